"""What a Spark Python worker imports for a read of a local table: every planning call, read task and
commit runs in a fresh process that unpickles our source, and pays for every module it imports.

The worker's code path (the source Spark's lookup makes, schema(), reader(), partitions(), and one
partition's read()) runs here in a new interpreter, as pyspark.sql.worker runs it, and the modules
it leaves in sys.modules are checked: nothing of DELETE/UPDATE, OPTIMIZE, Spark transactions or
the catalog, nor pandas (which pyarrow imports on its first conversion of Python
values), numba, chdb or kazoo.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from spark_mergetree import MergeTreeTable

REPO_ROOT = Path(__file__).resolve().parent.parent

NOT_NEEDED = [
    "pandas", "numba", "chdb", "kazoo",
    "spark_mergetree.spark.mutations",
    "spark_mergetree.spark.optimize",
    "spark_mergetree.spark.transaction",
    "spark_mergetree.catalog",
]

WORKER = """
import json, sys
from pyspark_mergetree import DefaultSource           # what Spark's create_data_source unpickles

source = DefaultSource({"path": sys.argv[1], "where": sys.argv[2]})  # granules found through the key
schema = source.schema()
reader = source.reader(schema)                        # plan_data_source_read
partitions = reader.partitions()
rows = sum(batch.num_rows for partition in partitions for batch in reader.read(partition))  # a read task
print(json.dumps({"rows": rows, "modules": sorted(sys.modules)}))
"""


def test_a_read_workers_code_path_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    ids = np.arange(50_000, dtype=np.int64)
    table = MergeTreeTable.create(tmp_path / "t", [("id", "Int64"), ("value", "Float64"), ("name", "String"),
                                                   ("price", "Decimal(12, 2)")], order_by="id",
                                  settings={"auto_merge": False})
    table.insert(pa.table({"id": ids, "value": ids * 0.5, "name": pa.array(ids % 97).cast(pa.string()),
                           "price": pa.array(ids % 1000).cast(pa.decimal128(20, 0)).cast(pa.decimal128(12, 2))}))
    done = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path / "t"), "id BETWEEN 20000 AND 29999 AND value > 1"], capture_output=True, text=True,
                          timeout=300, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rows"] == 10_000
    loaded = set(report["modules"])
    assert "spark_mergetree.engine.select" in loaded  # the worker did read through the engine
    assert [name for name in NOT_NEEDED if name in loaded] == []


PANDAS_LATER = """
import json, sys
import numpy as np, pyarrow as pa
from spark_mergetree.spark.lazy_pandas import defer_pandas

defer_pandas()
pa.array(np.arange(3)); pa.scalar(1, pa.int64())     # conversions that imported pandas before
before = "pandas" in sys.modules
import pandas as pd                                   # a user's pandas UDF in the same worker
categories = pa.array(pd.Series(pd.Categorical(["a", "b", "a"])))
floats = pa.array(pd.Series([1.0, float("nan")]), from_pandas=True)
stamps = pa.Array.from_pandas(pd.Series(pd.to_datetime(["2020-01-01"]).tz_localize("UTC")))
frame = pa.table({"x": [1, 2]}).to_pandas()
print(json.dumps({"before": before, "categories": str(categories.type), "nulls": floats.null_count,
                  "stamps": str(stamps.type), "frame": list(frame["x"])}))
"""


def test_pandas_imported_later_converts_as_without_the_deferral() -> None:
    done = subprocess.run([sys.executable, "-c", PANDAS_LATER], capture_output=True, text=True, timeout=300,
                          cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"before": False, "categories": "dictionary<values=large_string, indices=int8, ordered=0>",
                      "nulls": 1, "stamps": "timestamp[us, tz=UTC]", "frame": [1, 2]}
