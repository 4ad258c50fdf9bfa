"""One-step check functions for the scheduler and the `checks run` command. `keep_going` is the scheduler's
"not stopping" test: a step finishes the batch in hand and claims no more once it turns false."""
import time

from flask import current_app

from app import metrics
from app.common import always, utcnow
from app.services import checks

STEP_BUDGET_SECONDS = 30


def run_due_batch(keep_going=always) -> checks.Summary:
    """Claim and check one batch of due subscriptions; an empty summary when nothing is due or while the
    provider is paused (the due subscriptions keep their place)."""
    size = checks.due_batch_size(STEP_BUDGET_SECONDS)
    if size == 0:
        return checks.Summary()
    token = checks.new_claim_token()
    claimed = checks.claim(token, size)
    return _run_counted(claimed, token, keep_going) if claimed else checks.Summary()


def _run_counted(claimed, token, *options) -> checks.Summary:
    """`checks.run_claimed`, its outcomes counted for /metrics (a batch that failed after recording some too)."""
    try:
        summary = checks.run_claimed(claimed, token, *options)
    except Exception as error:
        recorded = checks.recorded_before(error)
        if recorded is not None:
            metrics.count_checks(recorded)
        raise
    metrics.count_checks(summary)
    return summary


def run_due(budget_seconds=None, keep_going=always, count_left=False) -> list:
    """Check due subscriptions batch after batch until none is due (or the budget is spent, or stopping, or the
    provider is paused); a batch a pause deferred whole is in the summaries too. With `count_left` (`checks run`), a
    run that ends (not stopped) counts as deferred those due at its last look that no checker holds, the checks it
    left unmade, in place of each batch's deferred: a check one batch deferred (half the lease gone, slow answers)
    and a later batch made counted as deferred too, and the run exited 1 blaming the provider; and a pause met before
    the run (or its next batch) claimed nothing and was counted nowhere (deferred=0, exit 0)."""
    deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
    summaries, looked = [], None
    while keep_going() and (deadline is None or time.monotonic() < deadline):
        looked = utcnow()  # the due ones the run looked for last: one due only since was never the run's
        try:
            summary = run_due_batch(keep_going)
        except Exception as error:
            note_made_before(error, summaries)
            raise
        if summary.did_work or summary.deferred:
            summaries.append(summary)
        if not summary.did_work:
            break
    if count_left and keep_going() and looked is not None:
        for summary in summaries:
            summary.deferred, summary.deferred_ids = 0, []
        left = checks.due_unclaimed(looked)
        if left:
            summaries.append(checks.Summary(deferred=left))
    return summaries


def note_made_before(error: Exception, summaries: list) -> None:
    """An error a batch raised once it had recorded what it made (`recorded`, `checks.run_claimed`: taking a call
    failed) carries the run's summaries, that batch's last, as `summaries`: for `checks run`'s line, which was lost
    with them in the error's traceback."""
    recorded = checks.recorded_before(error)
    if recorded is not None:
        error.summaries = [*summaries, recorded]


def run_due_checks(keep_going=always) -> bool:
    """Scheduler step; returns whether any work was done."""
    return bool(run_due(STEP_BUDGET_SECONDS, keep_going))


def run_all(keep_going=always):
    """Check every active subscription once, now, in id order; yields one summary per batch, and one counting
    the active subscriptions of a page that another checker held (they are being checked: passed by). A page's
    checks deferred by half the lease running out (slow answers) are claimed and checked again before the next
    page, for as long as each round gets some done; those a pause deferred stay deferred (they were skipped for
    good and blamed on the provider: fault walk)."""
    after = None
    while keep_going():
        token = checks.new_claim_token()
        claimed, after, held = checks.claim_page(token, current_app.config["CHECK_BATCH_SIZE"], after)
        if after is None:
            return
        while claimed:
            summary = _run_counted(claimed, token, keep_going)
            again = summary.deferred_ids if summary.did_work and keep_going() and not checks.provider_paused() else []
            token = checks.new_claim_token()
            claimed = checks.claim_ids(token, again) if again else []
            summary.deferred -= len(again)  # checked in the next round, but for those another checker took meanwhile
            summary.held += len(again) - len(claimed)
            summary.deferred_ids = []  # (a whole run's summaries are kept: counts only)
            yield summary
        if held:
            yield checks.Summary(held=held)


def run_one(subscription_id: str, keep_going=always):
    """Check one subscription now; None when it is not active (or another checker holds it)."""
    token = checks.new_claim_token()
    claimed = checks.claim_ids(token, [subscription_id])
    return _run_counted(claimed, token, keep_going) if claimed else None
