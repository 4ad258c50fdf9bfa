"""The WSGI application of a serving process (`gunicorn app.wsgi:app`, or `wsgi:app` in a checkout): loading
it starts the scheduler, unless SCHEDULER_ENABLED=0 or a one-off command is loading it."""
from app.serving import load

app = load()
