"""WORKER_CPU: each gunicorn web worker keeps to one CPU.

A worker is one Python process whose threads share one interpreter lock, which they hand to each other every
time one of them calls into SQLite or the network. When those threads sit on different cores, each hand-over
moves the interpreter's working set from one core's cache to the other's and wakes a thread across cores:
under 8 concurrent requests, over a third of a list request's CPU went there (1.0 ms of CPU in one thread against
1.6 ms with 8 threads, 50 context switches a request). Kept to one core, the threads hand over in place (4
context switches a request) and the process still runs Python on one core at a time, as it always did.
The price: work done outside the interpreter lock (SQLite's own steps, zlib, TLS) no longer overlaps with the
threads' Python on a second core, and the kernel cannot move a worker off a core other processes crowd.

Several instances on one host (two services, containers sharing the machine's CPUs) share the CPUs out: where a
server's own workers leave a choice, a new worker takes the CPU the fewest other processes on the host (as far
as /proc shows them) keep to alone.

Read by app/gunicorn_conf.py: the CPUs when gunicorn starts, one of them for each new worker in its pre_fork hook
(in the master, which knows the live workers), kept to in post_fork; `entity-monitor serve` checks the setting
first (app/serving.py)."""
import os
from collections import Counter

from app.config import ConfigError


def worker_cpus(environ=os.environ):
    """The CPUs web workers keep to, one each (`cpu_for_new_worker`), or None to leave them to the kernel.
    `auto` (the default): every CPU this process may run on, highest first (the first ones tend to take the
    devices' interrupts), when there are at least two; `off`: none; a CPU number: that CPU for every worker."""
    raw = environ.get("WORKER_CPU", "").strip().lower() or "auto"
    if raw == "off":
        return None
    allowed = sorted(os.sched_getaffinity(0), reverse=True) if hasattr(os, "sched_getaffinity") else []
    if raw == "auto":
        return allowed if len(allowed) > 1 else None
    cpu = int(raw) if raw.isascii() and raw.isdigit() else None
    if cpu not in allowed:
        raise ConfigError(f"WORKER_CPU={raw!r} is not a CPU this process may run on (it may use "
                          f"{', '.join(map(str, sorted(allowed))) or 'none it can name'}): write auto, off or one "
                          "of those numbers")
    return [cpu]


def cpu_for_new_worker(cpus, live_worker_cpus, kept_elsewhere=None):
    """The CPU of `cpus` (in their order) that the fewest of the server's live workers keep to, chosen in gunicorn's
    master before each fork, so a worker that replaces a dead one takes the CPU it left; among those, the one the
    fewest other processes keep to alone (`kept_elsewhere`: another instance's workers, say). None when `cpus` is
    None."""
    if not cpus:
        return None
    ours, others = Counter(live_worker_cpus), kept_elsewhere or Counter()
    return min(cpus, key=lambda cpu: (ours[cpu], others[cpu]))


PF_KTHREAD = 0x00200000  # a kernel thread: per-CPU ones sit on every CPU alike


def processes_kept_to_one_cpu(leaving_out=(), proc="/proc") -> Counter:
    """{cpu: how many user processes keep to that one CPU alone}, those in `leaving_out` (pids) left out; empty
    where `proc` cannot tell (not Linux)."""
    kept = Counter()
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit() and int(name) not in leaving_out]
    except OSError:
        return kept
    for pid in pids:
        cpu = _the_one_cpu_of(os.path.join(proc, pid))
        if cpu is not None:
            kept[cpu] += 1
    return kept


def _the_one_cpu_of(process_dir):
    """The CPU a user process keeps to, or None (several CPUs, a kernel thread, a zombie, gone, or not readable)."""
    try:
        with open(os.path.join(process_dir, "stat")) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
        if fields[0] == "Z" or int(fields[6]) & PF_KTHREAD:
            return None
        with open(os.path.join(process_dir, "status")) as status:
            allowed = next((line.split(":", 1)[1].strip() for line in status if line.startswith("Cpus_allowed_list:")),
                           "")
    except (OSError, ValueError, IndexError):
        return None
    return int(allowed) if allowed.isdigit() else None


def keep_to_one_cpu(cpu, log) -> None:
    """Called in a new worker process (gunicorn's post_fork). A CPU this process may no longer use (a cpuset
    narrowed since the server started) leaves the worker to the kernel, with a warning: a worker that failed
    to boot would stop the whole server."""
    if cpu is None:
        return
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as error:
        log.warning("WORKER_CPU: this worker could not keep to CPU %s (%s); the kernel places it", cpu, error)
