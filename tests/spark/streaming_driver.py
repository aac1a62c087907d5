"""A Spark driver of its own for tests/spark/test_streaming_kill.py, which kills it with SIGKILL.

`python tests/spark/streaming_driver.py <input dir> <table> <checkpoint>` streams the input's
Parquet files (id long, batch int), one per micro-batch, into the mergetree table with
Trigger.AvailableNow, and exits 0 when the query finished (3 if it did not within 300 s).
`... <checkpoint> <second table>` writes each micro-batch to both tables instead, through
foreachBatch with `with transaction(spark):` around the two writes (`spark` being the session the
query starts from, as users write it).
"""

from __future__ import annotations

import sys


def main(source: str, table: str, checkpoint: str, second: str | None = None) -> int:
    from pyspark.sql import SparkSession

    from spark_mergetree import transaction

    spark = (SparkSession.builder.master("local[2]").appName("streaming-driver")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    stream = spark.readStream.schema("id long, batch int").option("maxFilesPerTrigger", 1).parquet(source)
    if second is None:
        query = (stream.writeStream.format("mergetree").option("checkpointLocation", checkpoint)
                 .option("order_by", "id").trigger(availableNow=True).start(table))
    else:
        def each(batch_df, batch_id):  # noqa: ANN001 - Spark's callback
            with transaction(spark):
                batch_df.write.format("mergetree").mode("append").save(table)
                batch_df.write.format("mergetree").mode("append").save(second)

        query = (stream.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
    print(f"started {query.id}", flush=True)
    if not query.awaitTermination(300):
        return 3
    return 0 if query.exception() is None else 4


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
