"""Variant conversion benchmark: a JSON column's text → Spark variants (reads) and variants → JSON
text (writes), column-wise (spark/variant.py over format/variant_binary.py) against PySpark's own
per-row `VariantUtils.parse_json` / `to_json` on the same rows, in one run.

Documents are log events of about ten paths (strings short and long, integers, decimals, floats
with exponents, booleans, nulls, a nested object, an array of objects); a second set are Dynamic
columns' non-scalar values (arrays of integers, small objects). Every measurement is warmed once
(numba's loading and compilation) and is the median of --runs. Rows per second on one core.
Usage: python benchmarks/variant_columns.py [--rows N] [--runs K]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import pyarrow as pa
from harness import warm_median  # benchmarks/ is the script's directory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_documents(rows: int) -> list[str]:
    rng = random.Random(7)
    out = []
    for i in range(rows):
        doc = {
            "ts": f"2024-05-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:00",
            "level": rng.choice(["INFO", "WARN", "ERROR"]),
            "latency_ms": rng.randint(1, 5000) if rng.random() < 0.7 else round(rng.random() * 100, 3),
            "score": rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-30, 30),
            "ok": rng.random() < 0.9,
            "msg": "é request " + "x" * rng.randint(0, 120),
            "request": {"method": rng.choice(["GET", "POST"]), "status": rng.choice([200, 404, 500]),
                        "bytes": rng.randint(0, 2**40)},
            "tags": [{"k": f"t{j}", "v": j} for j in range(rng.randint(0, 3))],
            "error": None,
        }
        out.append(json.dumps(doc, ensure_ascii=False))
    return out


def make_dynamic_values(rows: int) -> list[str]:
    rng = random.Random(8)
    return [json.dumps([rng.randint(-1000, 10**12) for _ in range(rng.randint(0, 8))]) if i % 2 else
            json.dumps({"a": rng.randint(0, 100), "b": rng.choice(["x", "yy"]), "c": rng.random()})
            for i in range(rows)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from pyspark.sql.types import StructField, StructType, VariantType
    from pyspark.sql.variant_utils import VariantUtils

    from spark_mergetree.spark.types import spark_arrow_schema
    from spark_mergetree.spark.variant import _json_utils, texts_to_variant, variant_to_texts

    target = spark_arrow_schema(StructType([StructField("v", VariantType())])).field("v").type
    utils = _json_utils()
    print(f"{args.rows} rows, median of {args.runs} runs after a warm-up; rows/s on one core")
    for name, texts in (("JSON documents", make_documents(args.rows)), ("Dynamic arrays/objects",
                                                                        make_dynamic_values(args.rows))):
        column = pa.array(texts, pa.string())
        per_row_read, pairs = warm_median(args.runs, lambda texts=texts: [VariantUtils.parse_json(t) for t in texts])
        ours_read, variants = warm_median(args.runs, lambda column=column: texts_to_variant(column, target, "v"))
        got = [(r["value"], r["metadata"]) for r in variants.to_pylist()]
        assert got == pairs, "column-wise bytes differ from parse_json's"
        per_row_write, printed = warm_median(args.runs, lambda pairs=pairs: [utils.to_json(v, m) for v, m in pairs])
        ours_write, ours_printed = warm_median(args.runs, lambda variants=variants: variant_to_texts(variants, "v"))
        assert ours_printed.to_pylist() == printed, "column-wise text differs from to_json's"
        mb = column.nbytes / 1e6
        print(f"{name} ({mb:.1f} MB of text)")
        print(f"  read  text → variant: per-row parse_json {args.rows / per_row_read:>12,.0f}   "
              f"column-wise {args.rows / ours_read:>12,.0f}   ×{per_row_read / ours_read:.0f}")
        print(f"  write variant → text: per-row to_json    {args.rows / per_row_write:>12,.0f}   "
              f"column-wise {args.rows / ours_write:>12,.0f}   ×{per_row_write / ours_write:.0f}")


if __name__ == "__main__":
    main()
