"""gunicorn settings: one process with threads (the in-memory rate limiter is per process), and the
in-process scheduler started in the worker once it is ready (never in `flask` CLI commands)."""
import os

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "1"))
threads = int(os.environ.get("GUNICORN_THREADS", "8"))
worker_class = "gthread"
timeout = 60
graceful_timeout = 20
accesslog = "-"
# Never log the X-API-Key header: the access log format names no request headers.
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(D)sus'


def post_worker_init(worker):
    from app.worker.scheduler import start_in_process_scheduler
    start_in_process_scheduler(worker.wsgi)

# Limits, JSON answers to what gunicorn refuses itself, and no secret in its log (app/gunicorn_limits.py)
from app import gunicorn_limits  # noqa: E402
limit_request_line = gunicorn_limits.LIMIT_REQUEST_LINE
limit_request_fields = gunicorn_limits.LIMIT_REQUEST_FIELDS
limit_request_field_size = gunicorn_limits.LIMIT_REQUEST_FIELD_SIZE
logger_class = gunicorn_limits.RedactingLogger
gunicorn_limits.answer_errors_in_json()
