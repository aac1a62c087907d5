"""Transaction workloads run in child processes by the concurrency, crash and fault tests.

`transfer`: move an amount between two tables (the "bank" of ClickHouse's
01174_select_insert_isolation): the total over both tables is the same in every snapshot.
`mirrored_insert`: add (and sometimes merge) the same part names in two tables: every snapshot
shows both tables with the same part names.
"""

from __future__ import annotations

import random
from pathlib import Path

from spark_mergetree.errors import SerializationError
from spark_mergetree.txn import Coordinator, TableLog, Transaction
from tests.txn.conftest import part_value, publish


def new_part_name(coordinator: Coordinator, table: Path) -> str:
    block = coordinator.allocate_blocks(TableLog(table).bind(coordinator.url), 1)
    return f"all_{block}_{block}_0"


def transfer(coordinator: Coordinator, tables: tuple[Path, Path], rng: random.Random) -> bool:
    """One transfer (or merge of two parts); False when it lost a conflict."""
    try:
        with Transaction(coordinator) as transaction:
            source, target = tables if rng.random() < 0.5 else tables[::-1]
            parts = sorted(transaction.visible_parts(source))
            if len(parts) >= 3 and rng.random() < 0.3:
                merged = rng.sample(parts, 2)
                total = sum(part_value(source, name) for name in merged)
                transaction.remove_parts(source, merged)
                publish(transaction, source, new_part_name(coordinator, source), total)
                return True
            taken = rng.choice(parts)
            value = part_value(source, taken)
            amount = rng.randint(0, value)
            transaction.remove_parts(source, [taken])
            publish(transaction, source, new_part_name(coordinator, source), value - amount)
            publish(transaction, target, new_part_name(coordinator, target), amount)
        return True
    except SerializationError:
        return False


def total(transaction: Transaction, tables: tuple[Path, Path]) -> int:
    return sum(part_value(table, name) for table in tables for name in transaction.visible_parts(table))


def mirrored_insert(coordinator: Coordinator, tables: tuple[Path, Path], rng: random.Random) -> int | None:
    """Add one part under the same name to both tables; every third time also merge two older
    pairs into one. Returns the csn."""
    first, second = tables
    with Transaction(coordinator) as transaction:
        name = new_part_name(coordinator, first)
        for table in tables:
            publish(transaction, table, name, 1)
        visible = sorted(transaction.visible_parts(first) - {name})
        if len(visible) >= 2 and rng.random() < 0.35:
            pair = rng.sample(visible, 2)
            merged = new_part_name(coordinator, first)
            for table in tables:
                transaction.remove_parts(table, pair)
                publish(transaction, table, merged, 2)
    return transaction.csn
