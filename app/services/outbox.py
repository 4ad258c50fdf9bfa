"""The outbox (contract §5): claiming due deliveries with a lease, recording every try, the retry
schedule, endpoint health, redelivery and recovery.

A delivery goes through three steps so no transaction is held across HTTP:
1. `claim_due` leases a batch in one atomic UPDATE … RETURNING (its `next_attempt_at` moves to the lease
   end, so a sender killed at any instant leaves rows that simply become due again);
2. the worker sends them, outside any transaction;
3. `record_results` writes every try, the next attempt or final status, in one short transaction,
   skipping the outbox rows whose lease was lost meanwhile (the try itself is still logged).
"""
import logging
import math
import random
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import zip_longest
from typing import NamedTuple, Optional

from flask import current_app
from sqlalchemy import DateTime, Integer, and_, case, delete, exists, func, insert, literal, or_, select, update

from app import metrics
from app.admission import stepped_out
from app.common import isoformat, new_id, new_sortable_id, utcnow
from app.database import (add_to_counters, end_read_transaction, in_lock_order, lock_in_order, newest_first_page,
                          upsert, write_transaction)
from app.errors import NotFound, RateLimited, ValidationFailed
from app.extensions import db
from app.models import DeliveryAttempt, DeliveryDayCount, Event, OutboxDelivery, WebhookConfig
from app.services import events, webhooks
from app.services.account_lock import lock_account
from app.services.transport import Outcome, Outgoing

TEST_MESSAGE = "This is a test event sent by POST /webhooks/test."
log = logging.getLogger(__name__)
UNSENT_STATUSES = ("failed", "skipped")


@dataclass(frozen=True)
class Claimed:
    """A leased delivery, ready to send."""
    delivery_id: int
    account_id: str
    event_type: str
    tries: int  # tries this delivery made before this one, when claimed
    outgoing: Outgoing
    event_created_at: datetime = None  # detection time, for the detection-to-delivery histogram
    endpoint_failing: bool = False  # its configuration's last recorded try failed (`failing_since`)


class Destination(NamedTuple):
    """Where an account's tries go and the secrets that sign them, as its configuration says (`endpoints_now`)."""
    url: str
    secret: str
    previous_secret: Optional[str]  # while the rotation overlap lasts

    @classmethod
    def of(cls, outgoing: Outgoing) -> "Destination":
        return cls(outgoing.url, outgoing.secret, outgoing.previous_secret)


# --- sending what is due ------------------------------------------------------------------------

def new_claim_token() -> str:
    return new_id("claim")


def outgoing_for(config: WebhookConfig, event_id: str, body: str, attempt: int, now) -> Outgoing:
    return Outgoing(event_id=event_id, url=config.endpoint_url, body=body.encode(), attempt=attempt,
                    secret=config.secret, previous_secret=webhooks.previous_secret_in_overlap(config, now))


def claim_due(token: str, limit: int, room=None) -> list:
    """Lease up to `limit` due deliveries of active configurations, shared out among the accounts that have some due
    (`_shared_out`), in the order to send them. `room` ({account id: deliveries}) caps what an account may take (the
    sender loop's bound on what it holds of one account); an account not in it may take up to `limit`."""
    with write_transaction() as session:
        now = utcnow()
        lease_end = now + timedelta(seconds=current_app.config["WEBHOOK_LEASE_SECONDS"])
        chosen = _shared_out(session, now, limit, room or {})
        if not chosen:
            return []
        rows = session.execute(
            update(OutboxDelivery).where(OutboxDelivery.id.in_(chosen))
            .values(claim_token=token, claimed_until=lease_end, next_attempt_at=lease_end)
            .returning(OutboxDelivery.id, OutboxDelivery.event_id, OutboxDelivery.account_id,
                       OutboxDelivery.attempts)
            .execution_options(synchronize_session=False)).all()
        if not rows:
            return []
        place = {delivery_id: number for number, delivery_id in enumerate(chosen)}
        rows.sort(key=lambda row: place[row.id])
        found = {row.id: row for row in session.execute(
            select(Event.id, Event.type, Event.body, Event.attempt_count, Event.created_at)
            .where(Event.id.in_({row.event_id for row in rows})))}
        configs = events.webhook_configs_for(session, {row.account_id for row in rows})
        rows = _without_configuration_gone(session, rows, configs, now)
        if not rows:
            return []
        attempts = _number_attempts(session, rows, found)
        return [Claimed(row.id, row.account_id, found[row.event_id].type, row.attempts,
                        outgoing_for(configs[row.account_id], row.event_id, found[row.event_id].body,
                                     attempt, now), found[row.event_id].created_at,
                        configs[row.account_id].failing_since is not None)
                for row, attempt in zip(rows, attempts)]


def _shared_out(session, now, limit: int, room: dict) -> list:
    """The ids of up to `limit` due deliveries, locked, taken in turns: the oldest due of each account with room
    (in the order of `_accounts_due`, each at most an even share of what is left of `limit`), then the next of
    each, and so on. Oldest-due-first across accounts gave an account with a backlog (its endpoint slow or down for
    a while) every sender, and the others' deliveries waited behind it. Rows another sender has locked are passed
    over, and when that leaves the batch short the next accounts are tried, so two senders claiming at once take
    the next ones instead of coming back empty."""
    tried = [account_id for account_id, more in room.items() if more <= 0]
    turns, taken = [], 0
    while taken < limit:
        accounts = _accounts_due(session, now, tried, limit)
        share = -(-(limit - taken) // len(accounts)) if accounts else 0
        for account_id in accounts:
            turns.append(session.scalars(
                select(OutboxDelivery.id)
                .where(OutboxDelivery.account_id == account_id, OutboxDelivery.next_attempt_at <= now)
                .order_by(OutboxDelivery.next_attempt_at).limit(min(share, room.get(account_id, limit)))
                .with_for_update(skip_locked=True)).all())
            taken += len(turns[-1])
        if len(accounts) < limit:  # every account with a delivery due was tried
            break
        tried += accounts
    return [delivery_id for turn in zip_longest(*turns) for delivery_id in turn if delivery_id is not None][:limit]


def _accounts_due(session, now, excluded: list, limit: int) -> list:
    """Up to `limit` accounts with an active configuration and a delivery due: first the one waiting longest (its
    oldest due delivery the oldest), then those whose endpoint is not failing, then those failing for the shortest
    time, each the one waiting longest first. By the oldest due alone, the endpoints failing for a while (their
    backlogs due long ago) came first in every claim, and an account whose first try had just failed got its retry
    only once fewer of them than `limit` had any due; with no first place kept, endpoints failing for long waited
    for as long as `limit` others had something due, and neither reached the end of their retries nor the
    deactivation after WEBHOOK_DISABLE_AFTER_SECONDS (review). The accounts come from the outbox itself, one index
    seek each (a recursive query stepping from one account id to the next): only the accounts that are owed
    something, not every configuration."""
    outbox = OutboxDelivery.__table__
    owing = select(func.min(outbox.c.account_id).label("account_id")).cte("owing", recursive=True)
    owing = owing.union_all(
        select(select(func.min(outbox.c.account_id)).where(outbox.c.account_id > owing.c.account_id)
               .scalar_subquery()).where(owing.c.account_id.is_not(None)))
    oldest_due = (select(func.min(outbox.c.next_attempt_at)).where(outbox.c.account_id == owing.c.account_id)
                  .scalar_subquery())
    chosen = (select(owing.c.account_id, oldest_due.label("oldest_due"), WebhookConfig.failing_since)
              .join(WebhookConfig, WebhookConfig.account_id == owing.c.account_id)
              .where(WebhookConfig.is_active.is_(True), owing.c.account_id.not_in(excluded))
              .subquery())
    due = (select(chosen.c.account_id, chosen.c.failing_since, chosen.c.oldest_due,
                  func.row_number().over(order_by=(chosen.c.oldest_due, chosen.c.account_id)).label("waiting"))
           .where(chosen.c.oldest_due <= now).subquery())
    return session.scalars(select(due.c.account_id)
                           .order_by(case((due.c.waiting == 1, 0), else_=1), due.c.failing_since.desc().nulls_first(),
                                     due.c.oldest_due)
                           .limit(limit)).all()


def _without_configuration_gone(session, rows, configs, now) -> list:
    """The claimed rows whose configuration is still there and active. A removal committed since the claim chose
    its accounts leaves the rows queued while it ran (it drops those it saw; only a writer that did not keep the
    configuration locked, `events.webhook_configs_for`, can queue one), and a deactivation committed meanwhile
    leaves them owed: they stay unclaimed, due, as they were."""
    kept = [row for row in rows if row.account_id in configs and configs[row.account_id].is_active]
    gone = {row.id for row in rows} - {row.id for row in kept}
    if gone:
        session.execute(update(OutboxDelivery).where(OutboxDelivery.id.in_(gone))
                        .values(claim_token=None, claimed_until=None, next_attempt_at=now)
                        .execution_options(synchronize_session=False))
    return kept


def _number_attempts(session, rows, found) -> list:
    """The X-Webhook-Attempt of each claimed row, recorded on its event in the claiming transaction:
    a sender that crashes between sending and recording must not make the retry repeat the number."""
    counts = {event_id: event.attempt_count for event_id, event in found.items()}
    numbers = []
    for row in rows:
        counts[row.event_id] += 1
        numbers.append(counts[row.event_id])
    session.execute(update(Event), [{"id": event_id, "attempt_count": count}  # in id order: `write_transaction`
                                    for event_id, count in sorted(counts.items())])
    return numbers


def endpoints_now(account_ids) -> dict:
    """{account id: the Destination of its deliveries now, None when its configuration is gone or inactive}: what a
    sender checks and signs the tries it holds with (one read; no transaction left open)."""
    now = utcnow()
    found = db.session.execute(select(WebhookConfig.account_id, WebhookConfig.endpoint_url, WebhookConfig.secret,
                                      WebhookConfig.previous_secret, WebhookConfig.rotated_at)
                               .where(WebhookConfig.account_id.in_(account_ids), WebhookConfig.is_active.is_(True)))
    endpoints = {**dict.fromkeys(account_ids),
                 **{row.account_id: Destination(row.endpoint_url, row.secret,
                                                webhooks.previous_secret_in_overlap(row, now)) for row in found}}
    end_read_transaction()
    return endpoints


def release(token: str, unsent: list) -> None:
    """Give back leased deliveries [Claimed] that were not sent (the sender is stopping, or their configuration
    changed): due now, for any sender, and the attempt numbers they took when claimed are handed back to their
    events. One whose configuration was removed while it was held is gone, and its try will never be made: the try
    before it no longer announces it (the removal left that to the sender, which might have sent it), and its event
    counts only its recorded tries (`_count_only_recorded_tries`)."""
    if not unsent:
        return
    with write_transaction() as session:
        event_ids = session.scalars(
            update(OutboxDelivery)
            .where(in_lock_order(OutboxDelivery.event_id, OutboxDelivery.id.in_([item.delivery_id for item in unsent]),
                                 OutboxDelivery.claim_token == token))
            .values(claim_token=None, claimed_until=None, next_attempt_at=utcnow())
            .returning(OutboxDelivery.event_id).execution_options(synchronize_session=False)).all()
        events_table, given_back = Event.__table__, Counter(event_ids)
        held = {item.outgoing.event_id: item.outgoing.attempt for item in unsent}
        dropped, last_held = _owed_nothing(session, set(held) - set(event_ids)), []
        for event_id in sorted({*given_back, *dropped}):  # one pass in key order: the lock order
            if event_id in given_back:
                session.execute(update(events_table).where(events_table.c.id == event_id)
                                .values(attempt_count=events_table.c.attempt_count - given_back[event_id]))
            elif _count_only_recorded_tries(session, event_id, held[event_id]):
                last_held.append(event_id)
        webhooks.unannounce_next_tries(session, last_held)


def _count_only_recorded_tries(session, event_id: str, held: int) -> bool:
    """An event whose delivery was dropped while its try numbered `held` was held and never made: the removal judged
    it by the attempt numbers the claims took (`failed` with attempt_count 1 and no try in the log, for a first try
    held). It now counts up to its last recorded try, and with none was never sent: `skipped` (contract §5). Only
    while `held` is the last number taken: one a later claim took (another sender's, after this one's lease ran out)
    may be on the wire, and is that sender's to record or give back. Returns whether it was the last."""
    events_table, attempts = Event.__table__, DeliveryAttempt.__table__
    last_recorded = func.coalesce(select(func.max(attempts.c.attempt)).where(attempts.c.event_id == events_table.c.id)
                                  .scalar_subquery(), 0)
    return bool(session.execute(
        update(events_table).where(events_table.c.id == event_id, events_table.c.attempt_count == held)
        .values(attempt_count=last_recorded,
                delivery_status=case((last_recorded == 0, "skipped"), else_=events_table.c.delivery_status))
        .execution_options(synchronize_session=False)).rowcount)


def _owed_nothing(session, event_ids: set) -> set:
    """Of `event_ids`, those no outbox row owes a delivery of any more (dropped with their configuration)."""
    owed = set(session.scalars(select(OutboxDelivery.event_id).where(OutboxDelivery.event_id.in_(event_ids))))
    return event_ids - owed


def retry_delay(tries: int, outcome: Outcome):
    """Seconds until the next try after the `tries`-th failed one of a delivery; None when the schedule
    is spent. Jittered; at least a minute after a timeout or 429; a Retry-After is honoured up to twice
    the delay we would have used."""
    config = current_app.config
    schedule = config["WEBHOOK_RETRY_SCHEDULE"]
    if outcome.gone or tries > len(schedule):
        return None
    jitter = config["WEBHOOK_RETRY_JITTER_FRACTION"]
    delay = schedule[tries - 1] * random.uniform(1 - jitter, 1 + jitter)
    if outcome.throttled:
        delay = max(delay, config["WEBHOOK_THROTTLED_MIN_DELAY_SECONDS"])
    if outcome.retry_after is not None:
        delay = max(delay, min(outcome.retry_after, 2 * delay))
    return delay


def timed_send(transport, outgoing: Outgoing) -> Outcome:
    """A try, with the moment it began: the delivery log's `attempted_at`, not the moment its batch is recorded
    (after the batch's slowest try)."""
    attempted_at = utcnow()
    return replace(transport.send(outgoing), attempted_at=attempted_at)


def attempt_row(account_id, event_id, event_type, attempt, outcome: Outcome, now, next_attempt_at) -> dict:
    return {"id": new_sortable_id("dlv"), "account_id": account_id, "event_id": event_id,
            "event_type": event_type, "attempt": attempt, "status": "succeeded" if outcome.succeeded else "failed",
            "response_status": outcome.status_code, "duration_ms": outcome.duration_ms,
            "error": outcome.error, "attempted_at": outcome.attempted_at or now, "next_attempt_at": next_attempt_at,
            "kept_headers": DeliveryAttempt.headers_to_keep(outcome.request_headers, event_id, attempt)}


def store_attempts(session, attempt_rows):
    """Insert attempts (`attempt_row`s) and count them per day and status, inside the caller's transaction."""
    if not attempt_rows:  # (an INSERT given no rows is one of a row of defaults)
        return
    session.execute(insert(DeliveryAttempt), attempt_rows)
    count_attempts_by_day(session, attempt_rows)


def count_attempts_by_day(session, attempt_rows):
    """Add attempt rows to `delivery_day_counts` (retention leaves them counted)."""
    counts, durations = Counter(), Counter()
    for row in attempt_rows:
        key = (row["account_id"], row["attempted_at"].date(), row["status"])
        counts[key] += 1
        durations[key] += row["duration_ms"] or 0
    add_to_counters(session, DeliveryDayCount, ("account_id", "day", "status"),
                    [{"account_id": account_id, "day": day, "status": status, "count": count,
                      "duration_ms": durations[account_id, day, status]}
                     for (account_id, day, status), count in counts.items()])


def attempt_totals_since(session, account_id: str, first_day) -> dict:
    """{status: (attempts, summed duration_ms)} of an account's delivery attempts from `first_day` (UTC) on, read
    from the per-day counters."""
    rows = session.execute(select(DeliveryDayCount.status, func.sum(DeliveryDayCount.count),
                                  func.sum(DeliveryDayCount.duration_ms))
                           .where(DeliveryDayCount.account_id == account_id, DeliveryDayCount.day >= first_day)
                           .group_by(DeliveryDayCount.status))
    return {status: (int(count), int(duration_ms)) for status, count, duration_ms in rows}


def record_results(token: str, results: list) -> Counter:
    """Write a sent batch [(Claimed, Outcome)] in one transaction: every try, and for each delivery still
    leased by this sender its next try, or the end of the delivery (its outbox row goes; the event keeps the
    outcome). The next try follows the row's tries as they are now: a redelivery during the send restarted them.
    Rows are taken in the lock order of `write_transaction` (the configurations first, the counters last).
    Returns how many tries were `delivered`, failed with a next try (`retrying`) and failed with none (`failed`)."""
    tally = Counter()
    if not results:
        return tally
    with write_transaction() as session:
        now = utcnow()
        configs = events.webhook_configs_for(session, {claimed.account_id for claimed, _ in results}, to_update=True)
        still_ours = {row.id: row for row in session.execute(
            select(OutboxDelivery.id, OutboxDelivery.attempts, OutboxDelivery.claimed_until,
                   OutboxDelivery.next_attempt_at)
            .where(OutboxDelivery.id.in_([claimed.delivery_id for claimed, _ in results]),
                   OutboxDelivery.claim_token == token)
            .order_by(OutboxDelivery.event_id).with_for_update())}
        kept, recorded = _events_kept(session, results), _tries_recorded(session, results)
        attempts, retries, ended, event_changes, late_successes = [], [], [], [], []
        for claimed, outcome in results:
            if outcome.gone and _sent_elsewhere(claimed, configs.get(claimed.account_id)):
                outcome = replace(outcome, gone=False)  # the old endpoint's 410: retried, at the URL it has now
            ours = claimed.delivery_id in still_ours  # else dropped, or another sender's now: no next try from us
            tries, next_at = _next_try(still_ours.get(claimed.delivery_id), claimed, outcome, now)
            status = "pending" if next_at else ("succeeded" if outcome.succeeded else "failed")
            tally[_what_became_of(outcome, ours and next_at)] += 1
            attempts.append(attempt_row(claimed.account_id, claimed.outgoing.event_id, claimed.event_type,
                                        claimed.outgoing.attempt, outcome, now, next_at))
            if not outcome.succeeded:
                _log_failed_attempt(claimed, outcome, attempts[-1])
            if ours:
                if next_at:
                    retries.append({"id": claimed.delivery_id, "attempts": tries,
                                    "next_attempt_at": next_at, "claim_token": None, "claimed_until": None})
                else:
                    ended.append(claimed.delivery_id)
                event_changes.append({"id": claimed.outgoing.event_id, "delivery_status": status,
                                      "attempt_count": claimed.outgoing.attempt})
            elif outcome.succeeded:
                late_successes.append(claimed.outgoing.event_id)
        if retries:
            session.execute(update(OutboxDelivery), retries)
        if ended:
            session.execute(delete(OutboxDelivery).where(OutboxDelivery.id.in_(ended)))
        if event_changes:
            session.execute(update(Event), sorted(event_changes, key=lambda change: change["id"]))
        _record_late_successes(session, late_successes)
        _update_endpoint_health(configs.values(), results, now)
        store_attempts(session, [attempt for attempt in attempts if attempt["event_id"] in kept
                                 and (attempt["event_id"], attempt["attempt"]) not in recorded])
    metrics.observe_deliveries(results, now)
    return tally


def _what_became_of(outcome: Outcome, tried_again) -> str:
    """A try as `record_results` counts it (a failed one whose delivery is no longer this sender's: `failed`, its
    next try, if any, another sender's)."""
    if outcome.succeeded:
        return "delivered"
    return "retrying" if tried_again else "failed"


def _next_try(held, claimed: Claimed, outcome: Outcome, now) -> tuple:
    """(tries made, when the next one is due or None) of a delivery whose try came back; `held`, its outbox row
    while this sender holds it. A redelivery asked for after the try had ended (its record waiting for the
    account's other tries) leaves the delivery owed once more, now, its schedule from the start (`_restarted`)."""
    if held is None:
        return claimed.tries + 1, None
    if held.claimed_until not in (None, held.next_attempt_at) and held.claimed_until >= _ended(outcome, now):
        return 0, now
    tries = held.attempts + 1
    delay = retry_delay(tries, outcome) if not outcome.succeeded and not is_probe(claimed) else None
    return tries, (_ended(outcome, now) + timedelta(seconds=delay) if delay is not None else None)


def _ended(outcome: Outcome, now) -> datetime:
    """When a try ended, which its retry delay counts from (not from its batch's record, which may come later)."""
    if outcome.attempted_at is None:
        return now
    return outcome.attempted_at + timedelta(milliseconds=outcome.duration_ms)


def _events_kept(session, results) -> set:
    """The ids of the batch's events that are still there, kept so until the commit. A delivery dropped while it
    was sent (`webhooks.remove`) no longer holds its event back from retention, which may have deleted it since:
    its tries go with it, as they would have had they been recorded first."""
    event_ids = {claimed.outgoing.event_id for claimed, _ in results}
    return set(session.scalars(select(Event.id).where(Event.id.in_(event_ids))
                               .order_by(Event.id).with_for_update(read=True, key_share=True)))


def _tries_recorded(session, results) -> set:
    """(event id, attempt number) of the batch's tries already in the delivery log. A try's number is its own (taken
    at its claim), so one found there is this batch's, recorded by a commit whose answer was lost (done all the same):
    the record tried once more (`deliveries._once_more_if_it_fails`) logged every try of the batch twice."""
    event_ids = {claimed.outgoing.event_id for claimed, _ in results}
    return set(session.execute(select(DeliveryAttempt.event_id, DeliveryAttempt.attempt)
                               .where(DeliveryAttempt.event_id.in_(event_ids))).all())


def _record_late_successes(session, event_ids):
    """A try that reached the endpoint while its delivery was dropped (the configuration removed) or ended by
    another sender: the event was delivered, whatever the dropping said. A delivery still owed (another sender
    holds it now, or a recovery queued it again meanwhile) is left to its sender."""
    if not event_ids:
        return
    # Locked by a statement of its own first: on PostgreSQL, an UPDATE that waits for a row re-checks it against
    # its first snapshot, which has not seen the outbox row the transaction it waited for queued.
    lock_in_order(session, Event.id, Event.id.in_(event_ids), key_share=True)
    session.execute(update(Event).where(Event.id.in_(event_ids), ~exists().where(OutboxDelivery.event_id == Event.id))
                    .values(delivery_status="succeeded").execution_options(synchronize_session=False))


def _log_failed_attempt(claimed: Claimed, outcome: Outcome, attempt: dict):
    next_at = attempt["next_attempt_at"]
    log.warning("webhook delivery attempt %s of %s failed: %s; %s", attempt["attempt"], attempt["event_id"],
                outcome.error or f"HTTP {outcome.status_code}",
                f"next try at {isoformat(next_at)}" if next_at else "no further try (redeliver or recover it)",
                extra={"account_id": claimed.account_id, "event_id": attempt["event_id"],
                       "delivery_id": attempt["id"], "attempt": attempt["attempt"],
                       "response_status": outcome.status_code, "error": outcome.error,
                       "next_attempt_at": isoformat(attempt["next_attempt_at"])})


def is_probe(claimed: Claimed) -> bool:
    """A `test` event (redelivered by API): tried once, and its answer tells nothing of the endpoint's health, as
    for `send_test`."""
    return claimed.event_type == "test"


def _sent_elsewhere(claimed: Claimed, config) -> bool:
    """Whether the try went to a URL other than the one the account's configuration has now (it was moved while the
    try was on the wire): its answer is the old endpoint's, not the configuration's."""
    return config is not None and claimed.outgoing.url != config.endpoint_url


def _update_endpoint_health(configs, results, now):
    """410 deactivates at once; a success clears `failing_since`; nothing but failures for
    WEBHOOK_DISABLE_AFTER_SECONDS deactivates. Test events are probes and count for none of this, and so do the tries
    sent to a URL the configuration no longer has: a try on the wire to the old endpoint when the configuration was
    pointed at a new one (PUT or POST /webhooks/configure) says nothing of the new one, whose record starts clean
    (`webhooks.update_config`); the old one's 410 deactivated the new configuration at once."""
    by_config = {config.account_id: config for config in configs}
    by_account = {}
    for claimed, outcome in results:
        if not is_probe(claimed) and not _sent_elsewhere(claimed, by_config.get(claimed.account_id)):
            by_account.setdefault(claimed.account_id, []).append(outcome)
    disable_after = timedelta(seconds=current_app.config["WEBHOOK_DISABLE_AFTER_SECONDS"])
    for config in configs:
        outcomes = by_account.get(config.account_id)
        if not outcomes:
            continue
        was_active = config.is_active
        if any(outcome.succeeded for outcome in outcomes):
            config.failing_since = None
        else:
            config.failing_since = config.failing_since or now
            if now - config.failing_since >= disable_after:
                config.is_active, reason = False, f"failing since {isoformat(config.failing_since)}"
        if any(outcome.gone for outcome in outcomes):
            config.is_active, reason = False, "the endpoint answered 410 Gone"
        if was_active and not config.is_active:
            config.updated_at = now
            log.warning("webhook endpoint deactivated: %s", reason,
                        extra={"account_id": config.account_id, "webhook_id": config.id, "reason": reason})


# --- the test send ------------------------------------------------------------------------------

_tests_sending = {}  # account id -> when its test send on the wire (in this process) started, time.time()
_tests_paused = {}  # account id -> until when its test sends wait, its last one unanswered (time.time())
_tests_sending_lock = threading.Lock()
TEST_SENDS_AT_ONCE = 2  # in a process, whatever the accounts: the server's other threads stay free for the API
UNANSWERED_TEST_PAUSE_SECONDS = 60  # an account looping test sends to a dead endpoint holds a place a sixth of the time


@contextmanager
def _one_test_at_a_time(account_id: str, timeout: float):
    """A test send holds a server thread for up to the webhook timeout: one account's test sends in parallel could
    take every thread and stall the API for everyone (walk: 6 at once to a slow endpoint held /healthz 8 s), and so
    could a few accounts' (walk: 9 accounts' at once held another account's request 9 s). A second one of an account
    while its first is on the wire, or one more than TEST_SENDS_AT_ONCE in the process, is a 429 whose Retry-After
    is when the one it waits for must have ended. A concurrency limit, as Stripe answers its own with 429."""
    with _tests_sending_lock:
        started, paused_until = _tests_sending.get(account_id), _tests_paused.get(account_id, 0)
        if paused_until > time.time():
            raise RateLimited(1, UNANSWERED_TEST_PAUSE_SECONDS, paused_until,
                              f"The last test send of this account got no answer within {timeout:g} s: the next "
                              f"may go {UNANSWERED_TEST_PAUSE_SECONDS} s after it.")
        if started is not None:
            raise RateLimited(1, math.ceil(timeout), started + timeout + 1,  # (+1: recording the first try)
                              "A test send of this account is already waiting for the endpoint's answer. Retry when "
                              "it has come back.")
        if len(_tests_sending) >= TEST_SENDS_AT_ONCE:
            raise RateLimited(TEST_SENDS_AT_ONCE, math.ceil(timeout), min(_tests_sending.values()) + timeout + 1,
                              f"This server is already waiting on {TEST_SENDS_AT_ONCE} endpoints' answers to test "
                              "sends, the most it sends at once. Retry in a few seconds.")
        _tests_sending[account_id] = time.time()
    try:
        yield
    finally:
        with _tests_sending_lock:
            del _tests_sending[account_id]


def test_mark(account_id: str, session=None) -> str:
    """The id of the account's newest test event as a Send test form shows it ('' for none): the form sends it back,
    so the same form sent again (a reload of its result) is told from a request for another test."""
    newest = (session or db.session).scalar(
        select(Event.id).where(Event.account_id == account_id, Event.type == "test")
        .order_by(Event.created_at.desc(), Event.id.desc()).limit(1))
    return newest or ""


def send_test(account_id: str, transport, shown_mark: Optional[str] = None) -> Optional[dict]:
    """Record a `test` event and send it now, whatever the filter or active flag; no retries; one at a time. One the
    endpoint left unanswered pauses the account's next for a minute: two accounts looping test sends to endpoints
    that never answer held both places of the process for everyone (review). With the `test_mark` a form showed,
    None and nothing sent when a test event was recorded since (the form sent again: a reload of its result)."""
    with _one_test_at_a_time(account_id, transport.timeout):
        result = _send_test(account_id, transport, shown_mark)
    if result is None:
        return None
    with _tests_sending_lock:
        if (result["error"] or "").startswith("timeout:"):
            _tests_paused[account_id] = time.time() + UNANSWERED_TEST_PAUSE_SECONDS
        else:
            _tests_paused.pop(account_id, None)
    return result


def _send_test(account_id: str, transport, shown_mark: Optional[str]) -> Optional[dict]:
    with write_transaction() as session:
        now = utcnow()
        if shown_mark is not None:  # the account's row first (lock order): a form sent twice at once sends once
            lock_account(session, account_id)
            if test_mark(account_id, session) not in ("", shown_mark):  # ('': the one it showed pruned since)
                return None
        config = webhooks.get(account_id, session)
        event = events.record(session, account_id, "test", {"message": TEST_MESSAGE}, now=now,
                              id_prefix="evt_test")
        outgoing = outgoing_for(config, event.id, event.body, 1, now)
    with stepped_out():  # of the request's turn (app/admission.py): the endpoint may take its whole timeout
        outcome = timed_send(transport, outgoing)
    with write_transaction() as session:
        session.execute(update(Event).where(Event.id == outgoing.event_id).values(
            attempt_count=1, delivery_status="succeeded" if outcome.succeeded else "failed"))
        store_attempts(session, [attempt_row(account_id, outgoing.event_id, "test", 1, outcome, utcnow(), None)])
    return {"event_id": outgoing.event_id, "delivered": outcome.succeeded, "status_code": outcome.status_code,
            "duration_ms": outcome.duration_ms, "error": outcome.error}


# --- redelivery and recovery --------------------------------------------------------------------

def _restarted(now) -> dict:
    """The values that restart an owed delivery: its retry schedule from the start, due now. A row a sender holds
    keeps its lease, so it is never sent twice at once: a try still on the wire counts as the restarted schedule's
    first; one that had ended is followed by another (`_next_try`), told by the moment of the restart written in
    `claimed_until` (which the claim sets to the lease's end, as `next_attempt_at`)."""
    held = OutboxDelivery.claim_token.is_not(None)
    return {"attempts": 0,
            "next_attempt_at": case((held, OutboxDelivery.next_attempt_at), else_=now),
            "claimed_until": case((held, now), else_=None)}


def _queue_where(session, conditions, now) -> int:
    """For every event matching `conditions`, a delivery due now with its retry schedule from the start: a new
    outbox row, or the event's owed row restarted (one INSERT … SELECT … ON CONFLICT: one row per event, in event
    id order), then the events marked pending (after the outbox rows: the lock order of `write_transaction`).
    Returns how many were queued: an event that retention deleted meanwhile is not (its FOR KEY SHARE, which a
    foreign key's check would take after the insert, waited for the delete and then found no row)."""
    chosen = (select(Event.id, Event.account_id, literal(0, Integer), literal(now, DateTime), literal(now, DateTime))
              .where(*conditions).order_by(Event.id).with_for_update(read=True, key_share=True))
    statement = upsert(session, OutboxDelivery).from_select(
        ["event_id", "account_id", "attempts", "next_attempt_at", "created_at"], chosen)
    queued = session.scalars(statement.on_conflict_do_update(index_elements=["event_id"], set_=_restarted(now))
                             .returning(OutboxDelivery.event_id)).all()
    session.execute(update(Event).where(in_lock_order(Event.id, *conditions)).values(delivery_status="pending")
                    .execution_options(synchronize_session=False))
    # The last try of a restarted delivery announced a later one, which is now (contract §5: `next_attempt_at`
    # says when the next try is; it kept the old schedule's moment: webhook walk). By the ids queued: the events
    # this transaction holds (the conditions no longer match them once marked pending: review).
    queued = sorted(queued)
    for start in range(0, len(queued), 1000):  # within SQLite's bound of parameters a statement
        session.execute(update(DeliveryAttempt).where(DeliveryAttempt.event_id.in_(queued[start:start + 1000]),
                                                      DeliveryAttempt.next_attempt_at > now)
                        .values(next_attempt_at=now).execution_options(synchronize_session=False))
    return len(queued)


def redeliver(account_id: str, event_id: str) -> dict:
    """Deliver any event of the account once more, whatever its status: a new delivery, or the one still owed
    restarted."""
    with write_transaction() as session:
        events.get(account_id, event_id)
        webhooks.active_config(session, account_id)
        if not _queue_where(session, [Event.id == event_id, Event.account_id == account_id], utcnow()):
            raise NotFound("event", event_id)  # pruned by retention meanwhile
    events.notify_new_deliveries()
    return {"event_id": event_id, "delivery_status": "pending"}


def recover(account_id: str, since, until=None, include_pending=False) -> dict:
    """Queue every event of the window (clamped to the last WEBHOOK_RECOVER_MAX_DAYS) whose delivery
    failed or never happened and whose type the configuration wants now; test events are left out.
    With `include_pending`, deliveries of the window waiting for their next try are restarted (due now)."""
    with write_transaction() as session:
        now = utcnow()
        config = webhooks.active_config(session, account_id)
        start = max(since, now - timedelta(days=current_app.config["WEBHOOK_RECOVER_MAX_DAYS"]))
        end = min(until or now, now)
        if end <= start:
            raise _empty_window(since, until, now)
        window = [Event.account_id == account_id, Event.created_at >= start, Event.created_at < end]
        wanted = [event_type for event_type in events.EVENT_TYPES
                  if event_type != "test" and events.type_matches(config.events, event_type)]
        owed = and_(Event.delivery_status.in_(UNSENT_STATUSES), Event.type.in_(wanted))
        if include_pending:  # in the same statement: one pass over the outbox rows, in the lock order
            owed = or_(owed, Event.id.in_(_waiting_for_a_later_try(account_id, now)))
        queued = _queue_where(session, [*window, owed], now)
    if queued:
        events.notify_new_deliveries()
    return {"queued": queued}


def _empty_window(since, until, now) -> ValidationFailed:
    """The error naming the bound at fault: a `since` not yet past, else the `until` (at or before `since`,
    or older than the recovery window)."""
    if since >= now:
        return ValidationFailed("since", "since must be in the past.", isoformat(since))
    return ValidationFailed("until", "until must be after since (and within the recovery window).",
                            isoformat(until))


def _waiting_for_a_later_try(account_id, now):
    """The events of the account whose owed delivery waits for a later try and is not being sent right now:
    restarting it makes it due now, its retry schedule from the start."""
    return select(OutboxDelivery.event_id).where(OutboxDelivery.account_id == account_id,
                                                 OutboxDelivery.next_attempt_at > now,
                                                 OutboxDelivery.claim_token.is_(None))


# --- the delivery log ---------------------------------------------------------------------------

def attempts_page(account_id: str, limit: int, offset: int, status=None, event_id=None):
    return newest_first_page(DeliveryAttempt, DeliveryAttempt.attempted_at, limit, offset, inline=("status",),
                             narrowed_by="event_id", account_id=account_id, status=status, event_id=event_id)
