"""WORKER_CPU: which CPU each gunicorn web worker keeps to (app/cpu_affinity.py); a served worker keeps to it:
tests/test_production.py."""
import os
from collections import Counter

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


def test_where_its_own_workers_leave_a_choice_a_new_worker_takes_the_cpu_fewest_other_processes_keep_to(
        machine_cpus):
    """Another instance on the host: its worker keeps to CPU 2, so this one's first worker takes CPU 1."""
    machine_cpus({0, 1, 2})
    cpus = cpu_affinity.worker_cpus({})
    assert cpu_affinity.cpu_for_new_worker(cpus, [], Counter({2: 1})) == 1
    assert cpu_affinity.cpu_for_new_worker(cpus, [1], Counter({2: 1})) == 0
    assert cpu_affinity.cpu_for_new_worker(cpus, [1, 0], Counter({2: 1})) == 2
    assert cpu_affinity.cpu_for_new_worker(cpus, [], Counter({2: 3, 1: 1})) == 0
    # a database kept to one CPU with 30 processes does not pile this server's workers onto the others
    assert cpu_affinity.cpu_for_new_worker(cpus, [1, 0], Counter({2: 30})) == 2
    assert cpu_affinity.cpu_for_new_worker(cpus, [2, 0], Counter({1: 30})) == 1  # the CPU a dead worker left


def _process(proc, pid, allowed, name="python3", flags=0x400000, state="S"):
    folder = proc / str(pid)
    folder.mkdir()
    (folder / "stat").write_text(f"{pid} ({name}) {state} 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 1 2 0 0 20 0 1 0\n")
    (folder / "status").write_text(f"Name:\t{name}\nCpus_allowed:\t3\nCpus_allowed_list:\t{allowed}\nVoluntary: 1\n")


def test_the_processes_kept_to_one_cpu_are_read_from_proc(tmp_path):
    _process(tmp_path, 10, "1")
    _process(tmp_path, 11, "1", name="gunicorn: worker [app.wsgi:app] (x) y")  # parentheses and spaces in the name
    _process(tmp_path, 12, "0")
    _process(tmp_path, 13, "0-1")
    _process(tmp_path, 14, "0,2")
    _process(tmp_path, 15, "0", name="ksoftirqd/0", flags=0x208040)  # a kernel thread: every CPU has its own
    _process(tmp_path, 16, "1")  # one of this server's own workers, counted as a live worker instead
    _process(tmp_path, 18, "0", state="Z")  # dead, not yet reaped
    (tmp_path / "17").mkdir()  # gone between the listing and the read
    (tmp_path / "self").mkdir()
    assert cpu_affinity.processes_kept_to_one_cpu(leaving_out={16: "worker"}, proc=str(tmp_path)) == Counter(
        {1: 2, 0: 1})
    assert cpu_affinity.processes_kept_to_one_cpu(proc=str(tmp_path / "missing")) == Counter()


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
