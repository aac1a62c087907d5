"""Random interleavings of a few transactions over two tables, checked against a tiny model of
snapshot isolation: what every read returns, which removals conflict, what survives recovery and
cleanup. Both backends."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from spark_mergetree.errors import SerializationError
from spark_mergetree.txn import Coordinator, TableLog, Transaction
from tests.txn.conftest import part_directories, write_part


@dataclass
class ModelTransaction:
    handle: Transaction
    added: dict[str, set[str]] = field(default_factory=dict)
    removed: dict[str, set[str]] = field(default_factory=dict)


def committed_view(history: list[tuple[int, dict[str, set[str]], dict[str, set[str]]]], table: str,
                   snapshot: int) -> set[str]:
    parts: set[str] = set()
    for csn, added, removed in sorted(history, key=lambda item: item[0]):
        if csn <= snapshot:
            parts |= added.get(table, set())
            parts -= removed.get(table, set())
    return parts


@pytest.mark.parametrize("seed", [1, 2])
def test_random_interleavings_match_the_model(coordinator: Coordinator, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    tables = {"a": tmp_path / "a", "b": tmp_path / "b"}
    history: list[tuple[int, dict[str, set[str]], dict[str, set[str]]]] = []
    removed_ever: set[tuple[str, str]] = set()
    running: list[ModelTransaction] = []
    counter = 0
    for _ in range(120):
        action = rng.random()
        if not running or (action < 0.2 and len(running) < 3):
            running.append(ModelTransaction(Transaction(coordinator)))
            continue
        model = rng.choice(running)
        handle = model.handle
        key = rng.choice(sorted(tables))
        table = tables[key]
        expected = committed_view(history, key, handle.snapshot)
        expected = (expected | model.added.get(key, set())) - model.removed.get(key, set())
        if action < 0.45:
            assert handle.visible_parts(table) == expected
        elif action < 0.65:
            counter += 1
            name = write_part(table, f"all_{counter}_{counter}_0")
            handle.add_parts(table, [name])
            model.added.setdefault(key, set()).add(name)
        elif action < 0.8:
            candidates = sorted(expected - model.added.get(key, set()))
            if not candidates:
                continue
            name = rng.choice(candidates)
            locked_by_other = any(name in other.removed.get(key, set()) for other in running if other is not model)
            if (key, name) in removed_ever or locked_by_other:
                with pytest.raises(SerializationError):
                    handle.remove_parts(table, [name])
                running.remove(model)
                continue
            handle.remove_parts(table, [name])
            model.removed.setdefault(key, set()).add(name)
        elif action < 0.93:
            csn = handle.commit()
            running.remove(model)
            if model.added or model.removed:
                assert csn is not None
                history.append((csn, model.added, model.removed))
                removed_ever.update((k, name) for k, names in model.removed.items() for name in names)
        else:
            handle.rollback()
            running.remove(model)
    for model in running:
        model.handle.rollback()
    final = Transaction(coordinator)
    for key, table in tables.items():
        expected = committed_view(history, key, final.snapshot)
        assert final.visible_parts(table) == expected
        TableLog(table).cleanup(coordinator, retention_seconds=0)
    final.rollback()
    for key, table in tables.items():
        assert part_directories(table) == committed_view(history, key, 10**12)
