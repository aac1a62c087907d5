"""The test S3 server's conditional writes are atomic, as S3's are: of several compare-and-swaps of
one object with the same etag (or put-if-absent of one key) exactly one succeeds, and the
object-store coordinator never hands out a tid twice.

moto alone checks the condition and stores the object in two steps with no lock, so under
contention two swaps could both succeed: two transactions of a torture run got the same tid, and
the history checker saw one's entry in a table and the other's in another (a committed transaction
half visible). tests/moto_serialized.py serialises moto's writes; a server whose threads switch
every 10 µs makes a switch inside the check-then-store likely, so these fail without it."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.s3_server import S3Server

RACERS = 8


@pytest.fixture(scope="module")
def busy_s3_server():
    server = S3Server(switch_interval=1e-5).start()
    yield server
    server.close()


def _race(attempt) -> int:  # type: ignore[no-untyped-def]
    """How many of RACERS concurrent calls of attempt(i) succeeded (did not raise)."""
    barrier = threading.Barrier(RACERS)

    def one(i: int) -> int:
        barrier.wait(timeout=30)
        try:
            attempt(i)
            return 1
        except Exception:  # noqa: BLE001 - a 412: this racer lost
            return 0

    with ThreadPoolExecutor(RACERS) as pool:
        return sum(pool.map(one, range(RACERS)))


def test_one_compare_and_swap_wins(busy_s3_server: S3Server) -> None:
    bucket = busy_s3_server.bucket()
    clients = [busy_s3_server.client() for _ in range(RACERS)]
    winners = []
    for round_ in range(60):
        clients[0].put_object(Bucket=bucket, Key="clock", Body=b"start")
        etag = clients[0].head_object(Bucket=bucket, Key="clock")["ETag"]
        winners.append(_race(lambda i, etag=etag, round_=round_: clients[i].put_object(Bucket=bucket, Key="clock", IfMatch=etag,
                                                             Body=f"{round_}-{i}".encode())))
    assert winners == [1] * 60


def test_one_put_if_absent_wins(busy_s3_server: S3Server) -> None:
    bucket = busy_s3_server.bucket()
    clients = [busy_s3_server.client() for _ in range(RACERS)]
    winners = [_race(lambda i, round_=round_: clients[i].put_object(Bucket=bucket, Key=f"record-{round_}", IfNoneMatch="*",
                                                      Body=f"{i}".encode()))
               for round_ in range(60)]
    assert winners == [1] * 60


def test_coordinator_tids_are_unique(busy_s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_mergetree.txn.object_store import ObjectStoreCoordinator

    for name, value in busy_s3_server.environment().items():
        monkeypatch.setenv(name, value)
    url = ObjectStoreCoordinator.url_for(f"s3://{busy_s3_server.bucket()}/coordinator")
    coordinators = [ObjectStoreCoordinator(url) for _ in range(RACERS)]
    try:
        barrier = threading.Barrier(RACERS)

        def begins(coordinator: ObjectStoreCoordinator) -> list[int]:
            barrier.wait(timeout=30)
            tids = []
            for _ in range(15):
                info = coordinator.begin()
                tids.append(info.tid)
                coordinator.abort(info.tid)
            return tids

        with ThreadPoolExecutor(RACERS) as pool:
            tids = [tid for found in pool.map(begins, coordinators) for tid in found]
    finally:
        for coordinator in coordinators:
            coordinator.close()
    assert len(tids) == RACERS * 15
    assert [tid for tid, n in Counter(tids).items() if n > 1] == []
