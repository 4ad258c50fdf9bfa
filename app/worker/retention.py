"""The scheduler's retention step: a bounded number of small prune batches per run."""
from app.services import retention

MAX_BATCHES_PER_RUN = 20
INTERVAL_SECONDS = 300


def run_retention() -> bool:
    """Scheduler step; returns whether anything was pruned."""
    return retention.prune(max_batches=MAX_BATCHES_PER_RUN).events > 0
