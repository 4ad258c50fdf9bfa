"""scripts/measure_disk.py: its projection is the arithmetic its docstring states, and a tiny run works end to end."""
import argparse
import re

import pytest

from tests.webhook_helpers import load_script


@pytest.fixture(scope="module")
def measure_disk():
    return load_script("measure_disk")


def gigabytes(output, label):
    return float(re.search(rf"{label}\s+([\d.]+) GB", output).group(1))


def test_the_projection_adds_subscriptions_initial_states_and_the_retained_change_events(measure_disk, capsys):
    args = argparse.Namespace(subscriptions=1000, days=2, project_subscriptions=1_000_000, project_days=30)
    first = {("subscriptions", "subscriptions"): 600_000, ("subscriptions", "ix"): 300_000,
             ("events", "events"): 4_000_000, ("outbox", "outbox"): 500_000, ("accounts", "accounts"): 10**9}
    last = {**first, ("subscriptions", "subscriptions"): 700_000, ("events", "events"): 4_900_000}
    measure_disk.project(args, 90, first, last, initial_events=1000, change_events=500)
    output = capsys.readouterr().out
    # 1,000 B a subscription + at most 0.25 a day x 28 days x 8 B of activity keys; 4,500 B an initial state;
    # 0.25 change events a subscription-day x 30 days x 1,800 B
    assert gigabytes(output, "subscriptions") == 1.06
    assert gigabytes(output, "initial states") == 4.5
    assert gigabytes(output, "change events") == 13.5
    assert gigabytes(output, "total") == 19.06
    measure_disk.project(args, 7, first, last, initial_events=1000, change_events=500)
    output = capsys.readouterr().out
    assert gigabytes(output, "initial states") == 0 and gigabytes(output, "change events") == 3.15


def test_a_tiny_run_measures_every_big_table(measure_disk, capsys, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert measure_disk.main(["--subscriptions", "30", "--days", "1"]) == 0
    output = capsys.readouterr().out
    for name in ("subscriptions", "ix_subscriptions_due", "events", "outbox", "delivery_attempts"):
        assert re.search(rf"^\s+{name}\s+[\d.]+\s+([\d,]+|-)$", output, re.MULTILINE), name  # -: no rows
    assert "projected for 1,000,000 subscriptions after 30 days" in output
