"""TPC-H through Spark SQL: the 22 queries over temp views of mergetree tables and of Parquet copies
of the same data, in one SparkSession set up with spark_mergetree.configure, warm, results compared.

    python benchmarks/tpch.py [--scale 1] [--runs 1] [--dir /tmp/mergetree-tpch] [--queries 1,3,6]
                              [--pushdown both|on|off]

The data comes from tpchgen-cli (PyPI; installed by this script when missing) as Parquet files, which
Spark loads once into both formats: Parquet (written by Spark) and mergetree tables keyed and
partitioned as a ClickHouse user would (`lineitem` ORDER BY (l_orderkey, l_linenumber) PARTITION BY
toYear(l_shipdate), `orders` ORDER BY o_orderkey PARTITION BY toYear(o_orderdate), the others by their
keys). The load times of both are printed. Every query runs once to warm up, then `runs` times per
format (the median counts); both formats must return the same rows. mergetree runs with Spark's
filters offered to the Python source (`spark.sql.python.filterPushdown.enabled`, PySpark 4.1+),
without, or both (the default: each query is timed and compared both ways). The queries are the standard
texts with the specification's validation parameters (Q11's fraction scaled by the scale factor).
The report prints seconds per query and format, the ratio mergetree / Parquet per query, and totals.
"""

from __future__ import annotations

import argparse
import decimal
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness import (  # benchmarks/ is the script's directory
    REPO_ROOT,
    local_session,
    private_coordinator,
    warm_median,
)

sys.path.insert(0, str(REPO_ROOT))  # this checkout's package, in the driver as in the workers

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"

# table → (ORDER BY, PARTITION BY) of its mergetree copy
TABLES = {
    "lineitem": ("(l_orderkey, l_linenumber)", "toYear(l_shipdate)"),
    "orders": ("o_orderkey", "toYear(o_orderdate)"),
    "customer": ("c_custkey", None),
    "part": ("p_partkey", None),
    "partsupp": ("(ps_partkey, ps_suppkey)", None),
    "supplier": ("s_suppkey", None),
    "nation": ("n_nationkey", None),
    "region": ("r_regionkey", None),
}

QUERIES = {
    1: """
select l_returnflag, l_linestatus, sum(l_quantity) as sum_qty, sum(l_extendedprice) as sum_base_price,
       sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
       sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge, avg(l_quantity) as avg_qty,
       avg(l_extendedprice) as avg_price, avg(l_discount) as avg_disc, count(*) as count_order
from lineitem
where l_shipdate <= date '1998-12-01' - interval '90' day
group by l_returnflag, l_linestatus
order by l_returnflag, l_linestatus""",
    2: """
select s_acctbal, s_name, n_name, p_partkey, p_mfgr, s_address, s_phone, s_comment
from part, supplier, partsupp, nation, region
where p_partkey = ps_partkey and s_suppkey = ps_suppkey and p_size = 15 and p_type like '%BRASS'
  and s_nationkey = n_nationkey and n_regionkey = r_regionkey and r_name = 'EUROPE'
  and ps_supplycost = (
    select min(ps_supplycost) from partsupp, supplier, nation, region
    where p_partkey = ps_partkey and s_suppkey = ps_suppkey and s_nationkey = n_nationkey
      and n_regionkey = r_regionkey and r_name = 'EUROPE')
order by s_acctbal desc, n_name, s_name, p_partkey
limit 100""",
    3: """
select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate, o_shippriority
from customer, orders, lineitem
where c_mktsegment = 'BUILDING' and c_custkey = o_custkey and l_orderkey = o_orderkey
  and o_orderdate < date '1995-03-15' and l_shipdate > date '1995-03-15'
group by l_orderkey, o_orderdate, o_shippriority
order by revenue desc, o_orderdate
limit 10""",
    4: """
select o_orderpriority, count(*) as order_count
from orders
where o_orderdate >= date '1993-07-01' and o_orderdate < date '1993-07-01' + interval '3' month
  and exists (select * from lineitem where l_orderkey = o_orderkey and l_commitdate < l_receiptdate)
group by o_orderpriority
order by o_orderpriority""",
    5: """
select n_name, sum(l_extendedprice * (1 - l_discount)) as revenue
from customer, orders, lineitem, supplier, nation, region
where c_custkey = o_custkey and l_orderkey = o_orderkey and l_suppkey = s_suppkey
  and c_nationkey = s_nationkey and s_nationkey = n_nationkey and n_regionkey = r_regionkey
  and r_name = 'ASIA' and o_orderdate >= date '1994-01-01'
  and o_orderdate < date '1994-01-01' + interval '1' year
group by n_name
order by revenue desc""",
    6: """
select sum(l_extendedprice * l_discount) as revenue
from lineitem
where l_shipdate >= date '1994-01-01' and l_shipdate < date '1994-01-01' + interval '1' year
  and l_discount between 0.06 - 0.01 and 0.06 + 0.01 and l_quantity < 24""",
    7: """
select supp_nation, cust_nation, l_year, sum(volume) as revenue
from (
  select n1.n_name as supp_nation, n2.n_name as cust_nation, year(l_shipdate) as l_year,
         l_extendedprice * (1 - l_discount) as volume
  from supplier, lineitem, orders, customer, nation n1, nation n2
  where s_suppkey = l_suppkey and o_orderkey = l_orderkey and c_custkey = o_custkey
    and s_nationkey = n1.n_nationkey and c_nationkey = n2.n_nationkey
    and ((n1.n_name = 'FRANCE' and n2.n_name = 'GERMANY') or (n1.n_name = 'GERMANY' and n2.n_name = 'FRANCE'))
    and l_shipdate between date '1995-01-01' and date '1996-12-31') as shipping
group by supp_nation, cust_nation, l_year
order by supp_nation, cust_nation, l_year""",
    8: """
select o_year, sum(case when nation = 'BRAZIL' then volume else 0 end) / sum(volume) as mkt_share
from (
  select year(o_orderdate) as o_year, l_extendedprice * (1 - l_discount) as volume, n2.n_name as nation
  from part, supplier, lineitem, orders, customer, nation n1, nation n2, region
  where p_partkey = l_partkey and s_suppkey = l_suppkey and l_orderkey = o_orderkey
    and o_custkey = c_custkey and c_nationkey = n1.n_nationkey and n1.n_regionkey = r_regionkey
    and r_name = 'AMERICA' and s_nationkey = n2.n_nationkey
    and o_orderdate between date '1995-01-01' and date '1996-12-31'
    and p_type = 'ECONOMY ANODIZED STEEL') as all_nations
group by o_year
order by o_year""",
    9: """
select nation, o_year, sum(amount) as sum_profit
from (
  select n_name as nation, year(o_orderdate) as o_year,
         l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity as amount
  from part, supplier, lineitem, partsupp, orders, nation
  where s_suppkey = l_suppkey and ps_suppkey = l_suppkey and ps_partkey = l_partkey
    and p_partkey = l_partkey and o_orderkey = l_orderkey and s_nationkey = n_nationkey
    and p_name like '%green%') as profit
group by nation, o_year
order by nation, o_year desc""",
    10: """
select c_custkey, c_name, sum(l_extendedprice * (1 - l_discount)) as revenue, c_acctbal, n_name,
       c_address, c_phone, c_comment
from customer, orders, lineitem, nation
where c_custkey = o_custkey and l_orderkey = o_orderkey and o_orderdate >= date '1993-10-01'
  and o_orderdate < date '1993-10-01' + interval '3' month and l_returnflag = 'R'
  and c_nationkey = n_nationkey
group by c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment
order by revenue desc
limit 20""",
    11: """
select ps_partkey, sum(ps_supplycost * ps_availqty) as value
from partsupp, supplier, nation
where ps_suppkey = s_suppkey and s_nationkey = n_nationkey and n_name = 'GERMANY'
group by ps_partkey
having sum(ps_supplycost * ps_availqty) > (
  select sum(ps_supplycost * ps_availqty) * {fraction}
  from partsupp, supplier, nation
  where ps_suppkey = s_suppkey and s_nationkey = n_nationkey and n_name = 'GERMANY')
order by value desc""",
    12: """
select l_shipmode,
       sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH' then 1 else 0 end) as high_line_count,
       sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH' then 1 else 0 end) as low_line_count
from orders, lineitem
where o_orderkey = l_orderkey and l_shipmode in ('MAIL', 'SHIP') and l_commitdate < l_receiptdate
  and l_shipdate < l_commitdate and l_receiptdate >= date '1994-01-01'
  and l_receiptdate < date '1994-01-01' + interval '1' year
group by l_shipmode
order by l_shipmode""",
    13: """
select c_count, count(*) as custdist
from (
  select c_custkey, count(o_orderkey) as c_count
  from customer left outer join orders on c_custkey = o_custkey and o_comment not like '%special%requests%'
  group by c_custkey) as c_orders
group by c_count
order by custdist desc, c_count desc""",
    14: """
select 100.00 * sum(case when p_type like 'PROMO%' then l_extendedprice * (1 - l_discount) else 0 end)
       / sum(l_extendedprice * (1 - l_discount)) as promo_revenue
from lineitem, part
where l_partkey = p_partkey and l_shipdate >= date '1995-09-01'
  and l_shipdate < date '1995-09-01' + interval '1' month""",
    15: """
with revenue0 as (
  select l_suppkey as supplier_no, sum(l_extendedprice * (1 - l_discount)) as total_revenue
  from lineitem
  where l_shipdate >= date '1996-01-01' and l_shipdate < date '1996-01-01' + interval '3' month
  group by l_suppkey)
select s_suppkey, s_name, s_address, s_phone, total_revenue
from supplier, revenue0
where s_suppkey = supplier_no and total_revenue = (select max(total_revenue) from revenue0)
order by s_suppkey""",
    16: """
select p_brand, p_type, p_size, count(distinct ps_suppkey) as supplier_cnt
from partsupp, part
where p_partkey = ps_partkey and p_brand <> 'Brand#45' and p_type not like 'MEDIUM POLISHED%'
  and p_size in (49, 14, 23, 45, 19, 3, 36, 9)
  and ps_suppkey not in (select s_suppkey from supplier where s_comment like '%Customer%Complaints%')
group by p_brand, p_type, p_size
order by supplier_cnt desc, p_brand, p_type, p_size""",
    17: """
select sum(l_extendedprice) / 7.0 as avg_yearly
from lineitem, part
where p_partkey = l_partkey and p_brand = 'Brand#23' and p_container = 'MED BOX'
  and l_quantity < (select 0.2 * avg(l_quantity) from lineitem where l_partkey = p_partkey)""",
    18: """
select c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity)
from customer, orders, lineitem
where o_orderkey in (select l_orderkey from lineitem group by l_orderkey having sum(l_quantity) > 300)
  and c_custkey = o_custkey and o_orderkey = l_orderkey
group by c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice
order by o_totalprice desc, o_orderdate
limit 100""",
    19: """
select sum(l_extendedprice * (1 - l_discount)) as revenue
from lineitem, part
where (p_partkey = l_partkey and p_brand = 'Brand#12'
       and p_container in ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG') and l_quantity >= 1 and l_quantity <= 1 + 10
       and p_size between 1 and 5 and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')
   or (p_partkey = l_partkey and p_brand = 'Brand#23'
       and p_container in ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK') and l_quantity >= 10 and l_quantity <= 10 + 10
       and p_size between 1 and 10 and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')
   or (p_partkey = l_partkey and p_brand = 'Brand#34'
       and p_container in ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG') and l_quantity >= 20 and l_quantity <= 20 + 10
       and p_size between 1 and 15 and l_shipmode in ('AIR', 'AIR REG') and l_shipinstruct = 'DELIVER IN PERSON')""",
    20: """
select s_name, s_address
from supplier, nation
where s_suppkey in (
    select ps_suppkey from partsupp
    where ps_partkey in (select p_partkey from part where p_name like 'forest%')
      and ps_availqty > (
        select 0.5 * sum(l_quantity) from lineitem
        where l_partkey = ps_partkey and l_suppkey = ps_suppkey and l_shipdate >= date '1994-01-01'
          and l_shipdate < date '1994-01-01' + interval '1' year))
  and s_nationkey = n_nationkey and n_name = 'CANADA'
order by s_name""",
    21: """
select s_name, count(*) as numwait
from supplier, lineitem l1, orders, nation
where s_suppkey = l1.l_suppkey and o_orderkey = l1.l_orderkey and o_orderstatus = 'F'
  and l1.l_receiptdate > l1.l_commitdate
  and exists (select * from lineitem l2 where l2.l_orderkey = l1.l_orderkey and l2.l_suppkey <> l1.l_suppkey)
  and not exists (select * from lineitem l3 where l3.l_orderkey = l1.l_orderkey and l3.l_suppkey <> l1.l_suppkey
                  and l3.l_receiptdate > l3.l_commitdate)
  and s_nationkey = n_nationkey and n_name = 'SAUDI ARABIA'
group by s_name
order by numwait desc, s_name
limit 100""",
    22: """
select cntrycode, count(*) as numcust, sum(c_acctbal) as totacctbal
from (
  select substring(c_phone, 1, 2) as cntrycode, c_acctbal
  from customer
  where substring(c_phone, 1, 2) in ('13', '31', '23', '29', '30', '18', '17')
    and c_acctbal > (select avg(c_acctbal) from customer where c_acctbal > 0.00
                     and substring(c_phone, 1, 2) in ('13', '31', '23', '29', '30', '18', '17'))
    and not exists (select * from orders where o_custkey = c_custkey)) as custsale
group by cntrycode
order by cntrycode""",
}


def _generate(scale: float, target: Path) -> None:
    """tpchgen-cli's Parquet files of every table in `target` (installed from PyPI when missing)."""
    tool = shutil.which("tpchgen-cli")
    if tool is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "tpchgen-cli"], check=True)
        tool = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
    subprocess.run([tool, "parquet", "-s", str(scale), f"--output-dir={target}"], check=True)


def _session():
    return local_session("mergetree-tpch", {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "4g",
                                            "spark.sql.session.timeZone": "UTC"})


def _normalized(rows: list) -> list[tuple]:
    """Rows comparable across formats: numbers rounded to 9 significant digits, in sorted order."""
    def value(item: object) -> object:
        if isinstance(item, float):
            return float(f"{item:.9g}")
        if isinstance(item, decimal.Decimal):
            return float(f"{float(item):.9g}")
        return item

    return sorted((tuple(value(item) for item in row) for row in rows), key=repr)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--dir", default="/tmp/mergetree-tpch")
    parser.add_argument("--queries", default=",".join(map(str, QUERIES)), help="comma-separated query numbers")
    parser.add_argument("--pushdown", choices=("both", "on", "off"), default="both",
                        help="mergetree with Spark's filters pushed to the source, without, or both")
    args = parser.parse_args(argv)
    variants = {"both": ("on", "off"), "on": ("on",), "off": ("off",)}[args.pushdown]
    root = Path(args.dir)
    private_coordinator(root)  # before the session: its workers inherit it
    generated = root / f"generated-sf{args.scale:g}"
    if not (generated / "lineitem.parquet").exists():
        shutil.rmtree(generated, ignore_errors=True)
        _generate(args.scale, generated)
    parquet_root, mergetree_root = root / "parquet", root / "mergetree"
    for directory in (parquet_root, mergetree_root):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)

    spark = _session()
    from spark_mergetree.spark.session import extension_jar

    print(f"TPC-H SF {args.scale:g}; session extension {'on' if extension_jar() else 'NOT BUILT'}", flush=True)
    load_parquet = load_mergetree = 0.0
    for table, (order_by, partition_by) in TABLES.items():
        source = spark.read.parquet(str(generated / f"{table}.parquet"))
        started = time.perf_counter()
        source.write.parquet(str(parquet_root / table))
        load_parquet += time.perf_counter() - started
        writer = source.write.format("mergetree").option("order_by", order_by).mode("append")
        if partition_by:
            writer = writer.option("partition_by", partition_by)
        started = time.perf_counter()
        writer.save(str(mergetree_root / table))
        load_mergetree += time.perf_counter() - started
    print(f"load: parquet {load_parquet:.1f}s, mergetree {load_mergetree:.1f}s, "
          f"ratio {load_mergetree / load_parquet:.2f}", flush=True)

    frames = {
        "parquet": {table: spark.read.parquet(str(parquet_root / table)) for table in TABLES},
        "mergetree": {table: spark.read.format("mergetree").load(str(mergetree_root / table)) for table in TABLES},
    }

    def run(kind: str, text: str, pushdown: str = "on") -> list:
        for table, frame in frames[kind].items():
            frame.createOrReplaceTempView(table)
        spark.conf.set(PUSHDOWN, "true" if pushdown == "on" else "false")
        try:
            return spark.sql(text).collect()
        finally:
            spark.conf.set(PUSHDOWN, "true")

    # (query, parquet seconds, {pushdown: (mergetree seconds, same rows)})
    results: list[tuple[int, float, dict[str, tuple[float, bool]]]] = []
    for number in (int(q) for q in args.queries.split(",")):
        text = QUERIES[number].format(fraction=f"{0.0001 / args.scale:.10f}")
        parquet_seconds, parquet_rows = warm_median(args.runs, lambda text=text: run("parquet", text))
        expected = _normalized(parquet_rows)
        timed: dict[str, tuple[float, bool]] = {}
        for variant in variants:
            seconds, rows = warm_median(args.runs, lambda text=text, variant=variant: run("mergetree", text, variant))
            timed[variant] = (seconds, _normalized(rows) == expected)
        results.append((number, parquet_seconds, timed))
        print(f"Q{number:<2} parquet {parquet_seconds:6.2f}s  " + "  ".join(
            f"mergetree pushdown {variant} {seconds:6.2f}s ratio {seconds / parquet_seconds:5.2f} "
            f"{'same rows' if same else 'ROWS DIFFER'}" for variant, (seconds, same) in timed.items())
            + f" ({len(parquet_rows)} rows)", flush=True)

    total_parquet = sum(r[1] for r in results)
    wrong = [f"Q{r[0]} (pushdown {variant})" for r in results for variant, (_, same) in r[2].items() if not same]
    print(f"\nTPC-H SF {args.scale:g}, local[2], warm, median of {args.runs}: total parquet {total_parquet:.1f}s")
    for variant in variants:
        total = sum(r[2][variant][0] for r in results)
        print(f"mergetree, pushdown {variant}: total {total:.1f}s, ratio {total / total_parquet:.2f}; "
              f"worst query ratio {max(r[2][variant][0] / r[1] for r in results):.2f}")
    print(f"load ratio {load_mergetree / load_parquet:.2f}; "
          + (f"rows differ in {', '.join(wrong)}" if wrong else f"all {len(results)} queries return the same rows"))
    spark.stop()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
