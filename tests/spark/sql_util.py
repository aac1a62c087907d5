"""A Spark SQL catalog of mergetree tables for one test: its own Atomic root under a name of its own.

`spark.sql.catalog.<name>` is a runtime setting (Spark loads a catalog on first use of its name),
so each test on the shared session gets a fresh catalog, on classic and Spark Connect sessions
alike, without a session of its own.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from spark_mergetree.catalog import Catalog
from spark_mergetree.spark.session import CATALOG_CLASS

_numbers = itertools.count()


@dataclass
class SqlCatalog:
    name: str
    root: Path

    @property
    def engine(self) -> Catalog:
        return Catalog(self.root)


def sql_catalog(spark, tmp_path: Path, databases: tuple[str, ...] = ("db",)) -> SqlCatalog:
    root = tmp_path / "catalog_root"
    catalog = Catalog(root)
    for database in databases:
        catalog.create_database(database, if_not_exists=True)
    name = f"mt{next(_numbers)}_{abs(hash(str(root))) % 10**8}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.root", str(root))
    return SqlCatalog(name, root)


def scan_columns(spark, query: str) -> list[str]:
    """The columns the mergetree scan of `query` reads, from its physical plan (classic and Connect)."""
    plan = spark.sql(f"EXPLAIN {query}").collect()[0][0]
    scan = next(line for line in plan.splitlines() if "BatchScan" in line)
    inside = scan[scan.index("[") + 1:scan.index("]")]
    return [column.split("#")[0].strip() for column in inside.split(",")]
