"""gunicorn settings for `entity-monitor serve` (`gunicorn -c python:app.gunicorn_conf app.wsgi:app`): one
process with threads by default; the scheduler starts with the application in the worker, whatever the
settings (a plain `gunicorn wsgi:app` runs it too)."""
import os

bind = os.environ.get("BIND", "").strip() or "127.0.0.1:8000"  # empty: unset, as every setting (app/serving.py)
workers = int(os.environ.get("WEB_CONCURRENCY", "").strip() or "1")
threads = int(os.environ.get("GUNICORN_THREADS", "").strip() or "8")
worker_class = "gthread"

# Each worker keeps to one CPU (WORKER_CPU, app/cpu_affinity.py): its threads then hand the interpreter lock
# to each other on one core instead of across cores.
from app import cpu_affinity  # noqa: E402
_worker_cpus = cpu_affinity.worker_cpus()


def pre_fork(server, worker):
    choice = _worker_cpus and len(_worker_cpus) > 1
    elsewhere = cpu_affinity.processes_kept_to_one_cpu(leaving_out=server.WORKERS) if choice else None
    worker.cpu = cpu_affinity.cpu_for_new_worker(_worker_cpus, [getattr(live, "cpu", None)
                                                                for live in server.WORKERS.values()], elsewhere)


def post_fork(_server, worker):
    cpu_affinity.keep_to_one_cpu(worker.cpu, worker.log)


timeout = 60
graceful_timeout = 30  # a stopping scheduler finishes its batch in hand in well under this
# gunicorn 27's control socket defaults to one path per user (~/.gunicorn/gunicorn.ctl): two services on
# one host would fight over it, and nothing here uses it.
control_socket_disable = True
# The app writes its own access line per request (app.access, with the request id, in LOG_FORMAT's form);
# gunicorn's would log every request a second time, and as text in a JSON stream.
accesslog = None

# Limits, JSON answers to what gunicorn refuses itself, and no secret in its log (app/gunicorn_limits.py)
from app import gunicorn_limits  # noqa: E402
limit_request_line = gunicorn_limits.LIMIT_REQUEST_LINE
limit_request_fields = gunicorn_limits.LIMIT_REQUEST_FIELDS
limit_request_field_size = gunicorn_limits.LIMIT_REQUEST_FIELD_SIZE
logger_class = gunicorn_limits.RedactingLogger
gunicorn_limits.answer_errors_in_json()
