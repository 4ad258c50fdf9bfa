"""Ids and timestamps shared by every layer."""
import re
from datetime import datetime

from app import common


def test_sortable_ids_sort_by_creation_time_and_do_not_collide(monkeypatch):
    moments = iter([1_700_000_000.000, 1_700_000_000.001, 1_700_000_050.0])
    monkeypatch.setattr(common.time, "time", lambda: next(moments))
    ids = [common.new_sortable_id("evt") for _ in range(3)]
    assert ids == sorted(ids)
    assert all(re.fullmatch(r"evt_[0-9a-f]{24}", event_id) for event_id in ids)
    monkeypatch.undo()
    assert len({common.new_sortable_id("evt") for _ in range(1000)}) == 1000


def test_timestamps_are_iso_utc_with_z():
    assert common.isoformat(datetime(2026, 11, 22, 5, 3, 24)) == "2026-11-22T05:03:24Z"
    assert common.isoformat(datetime(2026, 11, 22, 5, 3, 24, 500000)) == "2026-11-22T05:03:24.500Z"
    assert common.isoformat(None) is None
