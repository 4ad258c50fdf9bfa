"""One-step check functions for the scheduler and the `checks run` command."""
import time

from flask import current_app

from app.services import checks

STEP_BUDGET_SECONDS = 30


def run_due_batch() -> checks.Summary:
    """Claim and check one batch of due subscriptions; an empty summary when nothing is due or while the
    provider is paused (the due subscriptions keep their place)."""
    size = checks.due_batch_size(STEP_BUDGET_SECONDS)
    if size == 0:
        return checks.Summary()
    token = checks.new_claim_token()
    claimed = checks.claim(token, size)
    return checks.run_claimed(claimed, token) if claimed else checks.Summary()


def run_due(budget_seconds=None) -> list:
    """Check due subscriptions batch after batch until none is due (or the budget is spent)."""
    deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
    summaries = []
    while deadline is None or time.monotonic() < deadline:
        summary = run_due_batch()
        if not summary.did_work:
            break
        summaries.append(summary)
    return summaries


def run_due_checks() -> bool:
    """Scheduler step; returns whether any work was done."""
    return bool(run_due(STEP_BUDGET_SECONDS))


def run_all():
    """Check every active subscription once, now, in id order; yields one summary per batch."""
    after = None
    while True:
        token = checks.new_claim_token()
        claimed = checks.claim(token, current_app.config["CHECK_BATCH_SIZE"], due=False, after_id=after)
        if not claimed:
            return
        after = claimed[-1].id
        yield checks.run_claimed(claimed, token)


def run_one(subscription_id: str):
    """Check one subscription now; None when it is not active (or another checker holds it)."""
    token = checks.new_claim_token()
    claimed = checks.claim(token, 1, subscription_id=subscription_id)
    return checks.run_claimed(claimed, token) if claimed else None
