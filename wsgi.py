"""WSGI entry point in a checkout: `gunicorn wsgi:app`, `flask --app wsgi …` (the same as `app.wsgi`)."""
from app.wsgi import app  # noqa: F401
