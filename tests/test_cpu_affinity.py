"""WORKER_CPU: which CPU each gunicorn web worker keeps to (app/cpu_affinity.py); a served worker keeps to it:
tests/test_production.py."""
import os

import pytest

from app import cpu_affinity
from app.config import ConfigError


@pytest.fixture
def machine_cpus(monkeypatch):
    """Pretend this process may run on the given CPUs; record what a worker keeps to."""
    kept = []

    def have(cpus):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(cpus), raising=False)  # not on every OS
        monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: kept.append((pid, set(cpus))), raising=False)
        return kept
    return have


def test_auto_hands_out_every_allowed_cpu_highest_first(machine_cpus):
    machine_cpus({0, 1, 3})
    assert cpu_affinity.worker_cpus({}) == [3, 1, 0]
    assert cpu_affinity.worker_cpus({"WORKER_CPU": " Auto "}) == [3, 1, 0]


def test_one_allowed_cpu_or_off_leaves_the_worker_to_the_kernel(machine_cpus):
    machine_cpus({2})
    assert cpu_affinity.worker_cpus({}) is None
    machine_cpus({0, 1})
    assert cpu_affinity.worker_cpus({"WORKER_CPU": "off"}) is None


def test_a_cpu_number_is_that_cpu_for_every_worker(machine_cpus):
    machine_cpus({0, 1})
    cpus = cpu_affinity.worker_cpus({"WORKER_CPU": "0"})
    assert [cpu_affinity.cpu_for_new_worker(cpus, live) for live in ([], [0], [0, 0])] == [0, 0, 0]


def test_each_new_worker_takes_the_cpu_fewest_live_workers_keep_to(machine_cpus):
    machine_cpus({0, 1, 2})
    cpus = cpu_affinity.worker_cpus({})
    assert cpu_affinity.cpu_for_new_worker(cpus, []) == 2
    assert cpu_affinity.cpu_for_new_worker(cpus, [2]) == 1
    assert cpu_affinity.cpu_for_new_worker(cpus, [2, 1]) == 0
    assert cpu_affinity.cpu_for_new_worker(cpus, [2, 1, 0]) == 2
    # the worker on CPU 1 died: its replacement takes CPU 1, not the next in turn
    assert cpu_affinity.cpu_for_new_worker(cpus, [2, 0]) == 1
    assert cpu_affinity.cpu_for_new_worker(None, [2]) is None


class Log:
    def __init__(self):
        self.warnings = []

    def warning(self, message, *args):
        self.warnings.append(message % args)


def test_a_worker_keeps_to_its_cpu_and_none_leaves_it_alone(machine_cpus):
    kept = machine_cpus({0, 1})
    cpu_affinity.keep_to_one_cpu(1, Log())
    cpu_affinity.keep_to_one_cpu(None, Log())
    assert kept == [(0, {1})]


def test_a_cpu_the_worker_may_no_longer_use_leaves_it_to_the_kernel_with_a_warning(monkeypatch):
    def refuse(_pid, _cpus):
        raise OSError(22, "Invalid argument")
    monkeypatch.setattr(os, "sched_setaffinity", refuse, raising=False)
    log = Log()
    cpu_affinity.keep_to_one_cpu(3, log)  # no exception: a worker that fails to boot stops gunicorn altogether
    assert log.warnings == ["WORKER_CPU: this worker could not keep to CPU 3 ([Errno 22] Invalid argument); "
                            "the kernel places it"]


@pytest.mark.parametrize("raw, says", [
    ("7", "WORKER_CPU='7' is not a CPU this process may run on (it may use 0, 1): write auto, off or one of those"),
    ("-1", "WORKER_CPU='-1' is not a CPU this process may run on"),
    ("first", "WORKER_CPU='first' is not a CPU this process may run on"),
    ("١", "WORKER_CPU='١' is not a CPU"),  # a digit to str.isdigit, not a CPU number
])
def test_a_cpu_this_process_may_not_use_is_refused(machine_cpus, raw, says):
    machine_cpus({0, 1})
    with pytest.raises(ConfigError) as refused:
        cpu_affinity.worker_cpus({"WORKER_CPU": raw})
    assert str(refused.value).startswith(says)
