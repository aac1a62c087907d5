"""`python -m spark_mergetree`: the mergetree command line."""

from spark_mergetree.cli import run

run()
