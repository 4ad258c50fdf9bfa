"""When a subscription is next checked (contract §7)."""
import random
from datetime import timedelta

from flask import current_app

from app.services.accounts import tier_settings


def first_check_at(now):
    """`CHECK_INITIAL_DELAY_SECONDS` after `now`, never earlier than half of it."""
    delay = current_app.config["CHECK_INITIAL_DELAY_SECONDS"]
    return now + timedelta(seconds=random.uniform(delay / 2, delay))


def check_interval_seconds(tier: str) -> int:
    return current_app.config["CHECK_INTERVAL_SECONDS"] or tier_settings(tier)["check_interval_seconds"]


def next_regular_check_at(now, tier: str):
    """One interval on, spread by ±jitter so checks do not come in waves."""
    interval = check_interval_seconds(tier)
    jitter = current_app.config["CHECK_JITTER_FRACTION"]
    return now + timedelta(seconds=interval * random.uniform(1 - jitter, 1 + jitter))


def retry_check_at(now, failures: int, tier: str):
    """Back off after a transient provider failure: base × 2^(failures-1), capped at the interval."""
    base = current_app.config["CHECK_RETRY_BASE_SECONDS"]
    delay = min(base * 2 ** max(failures - 1, 0), check_interval_seconds(tier))
    return now + timedelta(seconds=delay * random.uniform(0.9, 1.1))
