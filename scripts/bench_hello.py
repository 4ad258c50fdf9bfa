"""The bare Flask view scripts/bench_api.py compares the API with, served by gunicorn with the API's own
settings (`gunicorn -c python:app.gunicorn_conf --pythonpath scripts bench_hello:app`)."""
from flask import Flask

app = Flask(__name__)


@app.get("/hello")
def hello():
    return "hello"
