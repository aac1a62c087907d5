"""What the driver refuses before any table is created or any task runs: locations that are not
local, and options a table cannot honour. Each error names what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def _jvm_cwd(spark) -> Path:
    """Where Spark's Python workers run (a relative path there is where a stray directory lands)."""
    return Path(spark.sparkContext._jvm.System.getProperty("user.dir"))


def test_urls_are_refused_before_anything_is_written(spark, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    df = spark.range(3)
    with pytest.raises(Exception, match=r"'s3://bucket/events'.*not supported"):
        df.write.format("mergetree").option("order_by", "id").mode("append").save("s3://bucket/events")
    with pytest.raises(Exception, match=r"'gs://bucket/events'.*not supported"):
        spark.read.format("mergetree").load("gs://bucket/events").count()
    with pytest.raises(Exception, match=r"'abfss://c@a/root'.*not supported"):
        df.write.format("mergetree").option("catalog", "abfss://c@a/root").mode("append").save("db.t")
    for directory in {tmp_path, _jvm_cwd(spark)}:
        assert not any(entry.name.endswith(":") for entry in directory.iterdir()), directory
    target = tmp_path / "by url"
    df.write.format("mergetree").option("order_by", "id").mode("append").save(target.as_uri())
    assert spark.read.format("mergetree").load(str(target)).count() == 3
    assert spark.read.format("mergetree").load(f"file:{target}").count() == 3
