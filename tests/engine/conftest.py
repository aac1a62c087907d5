"""Engine tests run against a private local coordinator, never the user's default one."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_coordinator(tmp_path, monkeypatch):
    url = (tmp_path / "coordinator").resolve().as_uri()
    monkeypatch.setenv("SPARK_MERGETREE_COORDINATOR", url)
    return url
