"""Subscriptions: the rules of contract §3 (identity, duplicates, caps, trial, states)."""
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from flask import current_app
from sqlalchemy import bindparam, exists, func, insert, literal_column, select
from sqlalchemy.exc import IntegrityError

from app.common import isoformat, new_id, utcnow
from app.database import PreparedSelect, write_transaction
from app.errors import (DuplicateSubscription, InvalidState, NotFound, ServiceError, TierLimitExceeded,
                        TrialExpired, ValidationFailed)
from app.extensions import db
from app.models import Account, Subscription
from app.models.subscription import LIVE_STATUSES
from app.services import account_lock, accounts, subscription_counts, subscription_search
from app.services.entities import ENTITY_TYPES, resolve_entity, search_needle
from app.services.scheduling import first_check_at
from app.sql_json import JsonArray


def _resolve(item: dict):
    return resolve_entity(item["entity_type"], item.get("network_id"), item.get("network_url"),
                          current_app.config["NETWORK_DOMAIN"])


# Built once, run through Core on the session's connection (like every statement of a create): the write
# lock is held from BEGIN IMMEDIATE to commit, and the ORM's layers would hold it several times longer.
_ACCOUNT_LOCK = account_lock.locking(Account.tier, Account.trial_ends_at)


def _lock_account(session, account_id):
    """The account's tier and trial_ends_at, its row locked until commit (`app/services/account_lock.py`):
    every write to its subscriptions takes it first, so the tier cap holds against concurrent creators."""
    return session.connection().execute(_ACCOUNT_LOCK, {"account_id": account_id}).one()


def _ensure_trial_open(account: Account, now):
    if accounts.trial_ended(account, now):
        raise TrialExpired("The account's free trial has ended; ask your operator to choose a tier.",
                           {"trial_ends_at": isoformat(account.trial_ends_at)})


def _tier_limit_error(account, current_count, limit):
    return TierLimitExceeded(
        f"The {account.tier} tier allows {limit} active or paused subscriptions.",
        {"current_count": current_count, "tier_limit": limit, "tier": account.tier})


# The statuses written into the SQL, not bound: only then can SQLite see that the query implies the partial
# unique index's WHERE and look entities up in it (with bound values it scanned every live row of the account:
# 22 ms per create at 10,000 rows).
_LIVE = Subscription.status.in_(bindparam("live_statuses", LIVE_STATUSES, expanding=True, literal_execute=True))


def _existing_live(session, account_id, entity_type, network_ids):
    """{network_id: subscription id} of the live subscriptions among `network_ids`."""
    rows = session.execute(select(Subscription.network_id, Subscription.id).where(
        Subscription.account_id == account_id, Subscription.entity_type == entity_type,
        Subscription.network_id.in_(network_ids), _LIVE))
    return dict(rows.all())


def _duplicate_error(network_id, existing_id):
    return DuplicateSubscription(f"A subscription for '{network_id}' already exists.",
                                 {"existing_subscription_id": existing_id, "network_id": network_id})


def _new_row(account_id, entity_type, network_id, network_url, custom_metadata, now) -> dict:
    """A new subscription's columns (the model's defaults fill the others)."""
    return {"id": new_id("sub"), "account_id": account_id, "entity_type": entity_type, "network_id": network_id,
            "network_url": network_url, "status": "active", "custom_metadata": custom_metadata, "created_at": now,
            "updated_at": now, "next_check_at": first_check_at(now)}


def _new_subscription(*columns) -> Subscription:
    return Subscription(**_new_row(*columns))


_LIVE_ENTITY = select(Subscription.id).where(
    Subscription.account_id == bindparam("account_id"), Subscription.entity_type == bindparam("entity_type"),
    Subscription.network_id == bindparam("network_id"), _LIVE)
_INSERT = insert(Subscription.__table__)


def _live_duplicate(session, values: dict) -> Optional[str]:
    """The id of the live subscription to the entity of `values`, if any."""
    return session.connection().execute(_LIVE_ENTITY, values).scalar()


def create(account_id: str, item: dict) -> Subscription:
    """One subscription from a validated create body (a new, detached instance)."""
    network_id, network_url = _resolve(item)
    try:
        with write_transaction() as session:
            now = utcnow()
            values = _new_row(account_id, item["entity_type"], network_id, network_url, item["custom_metadata"],
                              now)
            account = _lock_account(session, account_id)
            _ensure_trial_open(account, now)
            existing = _live_duplicate(session, values)
            if existing:
                raise _duplicate_error(network_id, existing)
            limit = accounts.subscription_limit(account)
            count = accounts.live_subscription_count(session, account_id)
            if limit is not None and count >= limit:
                raise _tier_limit_error(account, count, limit)
            session.connection().execute(_INSERT, values)
    except IntegrityError:  # a concurrent create won the unique index (PostgreSQL; SQLite serialises)
        raise _duplicate_error(network_id, _live_duplicate(db.session, values))  # values: the insert raised
    return Subscription(**values)


@dataclass
class DryRun:
    """What the earlier batches of a dry run would have created (entity keys, how many): later batches count them
    as present and against the tier's cap, as a real run's later batches count what the earlier ones made (each
    batch's writes are rolled back; without this a 150-row import said 142 would be created where 92 were)."""
    planned: dict = field(default_factory=dict)  # (entity_type, network_id) -> None: no subscription id yet
    count: int = 0


@dataclass
class BulkCreateResult:
    created: list = field(default_factory=list)
    errors: list = field(default_factory=list)


def _item_error(index, raw, error: ServiceError, network_id=None):
    """One failed item; `network_id` is the resolved id when known, else the id the item sent (or null); a
    duplicate names the subscription it duplicates. `details` is left out of the API's item shape."""
    if network_id is None and isinstance(raw, dict):
        raw_id = raw.get("network_id", raw.get("linkedin_id"))
        network_id = raw_id if isinstance(raw_id, str) else None
    item = {"index": index, "network_id": network_id, "error": error.message, "code": error.code,
            "details": error.details or {}}
    if "existing_subscription_id" in item["details"]:
        item["existing_subscription_id"] = item["details"]["existing_subscription_id"]
    return item


def bulk_create(account_id: str, raw_items: list, load_item, dry_run: Optional[DryRun] = None) -> BulkCreateResult:
    """Create what can be created; every failed item is reported with its index, in request order.

    `load_item` validates one raw item (the HTTP layer's schema) and raises ServiceError. `dry_run`
    applies every rule against the database as it is and what the dry run's earlier batches planned, adds this
    batch's plan to it, then writes nothing.
    """
    invalid, resolved = [], []  # resolved: (index, raw, item, network_id, network_url)
    for index, raw in enumerate(raw_items):
        try:
            item = load_item(raw)
            resolved.append((index, raw, item, *_resolve(item)))
        except ServiceError as error:
            invalid.append(_item_error(index, raw, error))
    try:
        result = _insert_batch(account_id, resolved, dry_run)
    except IntegrityError:  # a concurrent create took one of these entities (PostgreSQL): now a duplicate
        result = _insert_batch(account_id, resolved, dry_run)
    result.errors = sorted(invalid + result.errors, key=lambda error: error["index"])
    return result


def _insert_batch(account_id: str, resolved: list, dry_run: Optional[DryRun]) -> BulkCreateResult:
    result = BulkCreateResult()
    with write_transaction() as session:
        now = utcnow()
        account = _lock_account(session, account_id)
        _ensure_trial_open(account, now)
        limit = accounts.subscription_limit(account)
        count = accounts.live_subscription_count(session, account_id) + (dry_run.count if dry_run else 0)
        existing = dict(dry_run.planned) if dry_run else {}
        for entity_type in {entry[2]["entity_type"] for entry in resolved}:
            ids = [entry[3] for entry in resolved if entry[2]["entity_type"] == entity_type]
            existing.update({(entity_type, nid): sid for nid, sid in
                             _existing_live(session, account_id, entity_type, ids).items()})
        for index, raw, item, network_id, network_url in resolved:
            key = (item["entity_type"], network_id)
            if key in existing:
                result.errors.append(_item_error(index, raw, _duplicate_error(network_id, existing[key]),
                                                 network_id))
                continue
            if limit is not None and count >= limit:
                result.errors.append(_item_error(index, raw, _tier_limit_error(account, count, limit),
                                                 network_id))
                continue
            subscription = _new_subscription(account_id, item["entity_type"], network_id, network_url,
                                             item["custom_metadata"], now)
            session.add(subscription)
            existing[key] = None if dry_run else subscription.id  # a dry run creates no subscription to name
            count += 1
            result.created.append(subscription)
        if dry_run:
            session.rollback()
            dry_run.planned.update(((created.entity_type, created.network_id), None) for created in result.created)
            dry_run.count += len(result.created)
    return result


def get(account_id: str, subscription_id: str) -> Subscription:
    subscription = db.session.scalar(select(Subscription).where(
        Subscription.id == subscription_id, Subscription.account_id == account_id))
    if subscription is None:
        raise NotFound("subscription", subscription_id)
    return subscription


def network_ids(account_id: str, subscription_ids) -> dict:
    """{id: network_id} of the account's subscriptions among `subscription_ids` (a page's worth), for the lists that
    name whom each row is about."""
    wanted = {subscription_id for subscription_id in subscription_ids if subscription_id}
    if not wanted:
        return {}
    return dict(db.session.execute(select(Subscription.id, Subscription.network_id).where(
        Subscription.account_id == account_id, Subscription.id.in_(wanted))).all())


DETAIL_COLUMNS = (Subscription.id, Subscription.entity_type, Subscription.network_id, Subscription.network_url,
                  Subscription.status, Subscription.custom_metadata, Subscription.created_at,
                  Subscription.updated_at, Subscription.last_checked_at, Subscription.last_change_at,
                  Subscription.last_check_status, Subscription.next_check_at, Subscription.paused_at,
                  Subscription.cancelled_at, Subscription.check_count, Subscription.change_count)
# Prepared once: the get endpoint is hot.
_DETAIL_BY_ID = PreparedSelect(select(*DETAIL_COLUMNS).where(Subscription.id == bindparam("subscription_id"),
                                                             Subscription.account_id == bindparam("account_id")))


def get_detail(account_id: str, subscription_id: str):
    """The get shape's columns of one subscription (a row with attribute access like the model's; no
    snapshot JSON), by a prepared statement: no ORM work for a read-only answer."""
    row = _DETAIL_BY_ID.first({"subscription_id": subscription_id, "account_id": account_id})
    if row is None:
        raise NotFound("subscription", subscription_id)
    return row


LIST_COLUMNS = (Subscription.id, Subscription.entity_type, Subscription.network_id, Subscription.network_url,
                Subscription.status, Subscription.custom_metadata, Subscription.last_checked_at,
                Subscription.created_at)


def list_page(account_id, limit, offset, entity_type=None, status=None, search=None):
    """(rows, total) newest first, stable across pages. Rows hold only the list shape's columns (the hot
    path: no ORM entities, no snapshot JSON), with attribute access like the model's. Totals come from the
    counters; a search's from its matches (subscription_search)."""
    params = _list_params(account_id, limit, offset, entity_type, status)
    if search:
        page, params, total = _search_page(params, search_needle(search, current_app.config["NETWORK_DOMAIN"]))
        return (db.session.execute(page, params).all() if page is not None else []), total
    page_query, total_query = _list_statements(bool(entity_type), bool(status))
    rows = page_query.rows(params)
    total = rows[0].total if rows else total_query.first(params)[0]
    return rows, total


def list_page_json(account_id, fields, limit, offset, entity_type=None, status=None, search=None):
    """(items, count, total): the page of `list_page` written by the database as one JSON array text of
    objects of `fields` (app.sql_json.JsonField, a tuple), the number of items in it and the total."""
    params = _list_params(account_id, limit, offset, entity_type, status)
    if search:
        page, params, total = _search_page(params, search_needle(search, current_app.config["NETWORK_DOMAIN"]))
        if page is None:
            return "[]", 0, total
        items, count = db.session.execute(_as_json(page, fields), params).one()
        return items, count, total
    return _json_list_statement(bool(entity_type), bool(status), fields).first(params)


def _list_params(account_id, limit, offset, entity_type, status) -> dict:
    return {"account_id": account_id, "entity_type": entity_type, "status": status, "limit": limit,
            "offset": offset}


def _list_conditions(by_entity_type: bool, by_status: bool, indexed=True) -> list:
    """The account and filter conditions. `indexed=False` writes them as SQLite's `+column`, which keeps the
    planner off the account's indexes: a search then starts from the trigram index's matches instead of
    walking every row of the account and probing them."""
    def column(attribute):
        return attribute if indexed else literal_column(f"+subscriptions.{attribute.key}")

    conditions = [column(Subscription.account_id) == bindparam("account_id")]
    if by_entity_type:
        conditions.append(column(Subscription.entity_type) == bindparam("entity_type"))
    if by_status:
        conditions.append(column(Subscription.status) == bindparam("status"))
    return conditions


def _page_statement(conditions, *extra_columns):
    return (select(*LIST_COLUMNS, *extra_columns).where(*conditions)
            .order_by(Subscription.created_at.desc(), Subscription.id.desc())
            .limit(bindparam("limit")).offset(bindparam("offset")))


def _as_json(page, fields):
    """One row: the items of `page` (a `_page_statement`) as a JSON array text, and how many they are."""
    rows = page.subquery()
    items = JsonArray(fields, rows.c, (rows.c.created_at.desc(), rows.c.id.desc()))
    return select(items.label("items"), func.count().label("count")).select_from(rows)


@lru_cache(maxsize=None)
def _list_statements(by_entity_type: bool, by_status: bool):
    """The list's page and total statements for one combination of filters, prepared once with bound
    parameters (building, cache-keying and executing statements through SQLAlchemy's layers was most of the
    list endpoint's time). The total rides along the page as a scalar subquery of the counters: one round trip."""
    total_query = subscription_counts.total_statement(by_entity_type, by_status)
    page_query = _page_statement(_list_conditions(by_entity_type, by_status),
                                 total_query.scalar_subquery().label("total"))
    return PreparedSelect(page_query, one_fetch=True), PreparedSelect(total_query)


@lru_cache(maxsize=None)
def _json_list_statement(by_entity_type: bool, by_status: bool, fields: tuple):
    """`_list_statements`' page as JSON, with the total: one row of (items, count, total)."""
    total_query = subscription_counts.total_statement(by_entity_type, by_status)
    page = _as_json(_page_statement(_list_conditions(by_entity_type, by_status)), fields)
    return PreparedSelect(page.add_columns(total_query.scalar_subquery().label("total")))


def _search_page(params: dict, needle: str):
    """(page statement, its parameters, total) of the rows matching `needle`; the statement is None when the
    page is past the matches. The total is the counters of the entity types that match
    whole, the gram counters of the parts too short for a trigram, and a count of the index's matches for the
    rest; no page is read past it. The page comes from the index's matches when they are few; when they are
    many, or not indexed, from the newest rows of the account tested one by one, which finds a page's worth
    sooner than sorting every match."""
    entity_type, status = params["entity_type"], params["status"]
    search = subscription_search.plan(needle, current_app.config["NETWORK_DOMAIN"],
                                      (entity_type,) if entity_type else ENTITY_TYPES)
    dialect = db.session.get_bind().dialect.name
    on_trigrams = dialect == "sqlite" and search.indexed
    total = indexed_matches = 0
    if search.whole_types:
        total += db.session.scalar(subscription_counts.total_statement(
            by_status=bool(status), entity_types=search.whole_types), params)
    if search.counted_grams:
        total += db.session.scalar(subscription_search.gram_total(search, bool(status)), params)
    if search.indexed:
        indexed_matches = _indexed_matches(search, params, dialect)
        total += indexed_matches
    if total <= params["offset"]:
        return None, params, total
    if dialect == "sqlite" and search.counted_grams:
        found = _page_from_neighbour_trigrams(search, total, params)
        if found is not None:
            return (*found, total)
    walk = _walks(search, indexed_matches, params)
    conditions = _list_conditions(bool(entity_type), bool(status), indexed=walk or not on_trigrams)
    page = _page_statement([*conditions, subscription_search.condition(search, dialect, use_index=not walk)])
    return page, params, total


def _indexed_matches(search, params: dict, dialect: str) -> int:
    """The number of rows matching the parts the trigram index serves. On SQLite, unfiltered, when no other
    account has a subscription and the matches are every id holding the needle: the FTS5 index counts them
    alone (reading each match's row to test its account was most of a common needle's time, ~1 µs a match)."""
    entity_type, status = params["entity_type"], params["status"]
    on_trigrams = dialect == "sqlite"
    if (on_trigrams and not entity_type and not status and subscription_search.counted_by_index_alone(search)
            and _alone_in_the_table(params)):
        return db.session.scalar(subscription_search.index_count(search.needle))
    return db.session.scalar(select(func.count()).select_from(Subscription).where(
        *_list_conditions(bool(entity_type), bool(status), indexed=not on_trigrams),
        subscription_search.partial_condition(search, dialect, indexed_only=True)), params)


def _alone_in_the_table(params: dict) -> bool:
    """Whether no other account has a subscription (two seeks in the account index)."""
    other = Subscription.account_id
    return not db.session.scalar(select(exists().where(other < bindparam("account_id"))
                                        | exists().where(other > bindparam("account_id"))), params)


def _rows_in_filters(params: dict) -> int:
    in_filters = subscription_counts.total_statement(bool(params["entity_type"]), bool(params["status"]))
    return db.session.scalar(in_filters, params)


def _walks(search, indexed_matches: int, params: dict) -> bool:
    """Whether a search's page is found by testing the newest rows one by one rather than by sorting the
    index's matches: when some part has no index, or the matches are many (a walk reads about
    (offset + limit) * rows / matches rows)."""
    if search.whole_types or search.counted_grams:
        return True
    return indexed_matches ** 2 > (params["offset"] + params["limit"]) * _rows_in_filters(params)


CANDIDATE_COST = 25  # SQLite: the count and the page each read a candidate's row by its rowid, ~12 walked rows each


def _page_from_neighbour_trigrams(search, total: int, params: dict):
    """SQLite, a 2-character needle in few ids (`-0`), where a walk would test most rows of the account:
    (page statement, its parameters) of the page from the ids holding one of its neighbour trigrams
    (subscription_search.neighbour_trigrams), when they are fewer (in the whole table) than a walk's rows over
    CANDIDATE_COST and hold all `total` matches the gram counters counted. Otherwise None: the page is walked
    (an id of exactly the needle has no trigram)."""
    query = subscription_search.neighbour_trigrams(search)
    if query is None:
        return None
    page_end = params["offset"] + params["limit"]
    candidates = int(_rows_in_filters(params) * min(1, page_end / total) / CANDIDATE_COST)
    if candidates < total:
        return None
    params = {**params, "candidates": candidates}
    conditions = [*_list_conditions(bool(params["entity_type"]), bool(params["status"]), indexed=False),
                  subscription_search.among_neighbours(search, query)]
    found = db.session.scalar(select(func.count()).select_from(Subscription).where(*conditions), params)
    return (_page_statement(conditions), params) if found == total else None


def _cancel_in(subscription: Subscription, now) -> None:
    if subscription.status == "cancelled":
        return
    subscription.status = "cancelled"
    subscription.cancelled_at = now
    subscription.paused_at = None  # contract: `paused_at` (when paused)
    subscription.updated_at = now
    subscription.next_check_at = None
    subscription.claim_token = None
    subscription.claimed_until = None


def _locked(session, account_id, subscription_id):
    subscription = session.scalar(select(Subscription).where(
        Subscription.id == subscription_id, Subscription.account_id == account_id).with_for_update())
    if subscription is None:
        raise NotFound("subscription", subscription_id)
    return subscription


def cancel(account_id: str, subscription_id: str) -> Subscription:
    """Soft delete from active or paused; a cancelled one answers as it is (idempotent)."""
    with write_transaction() as session:
        _lock_account(session, account_id)
        subscription = _locked(session, account_id, subscription_id)
        _cancel_in(subscription, utcnow())
    return subscription


def _set_status_in(subscription: Subscription, status: str, now) -> None:
    """active ↔ paused; a cancelled subscription cannot move; the same status again is a no-op."""
    if subscription.status == "cancelled":
        raise InvalidState("A cancelled subscription cannot be paused or resumed; create a new one.",
                           {"status": subscription.status})
    if subscription.status == status:
        return
    subscription.status = status
    subscription.updated_at = now
    if status == "paused":
        subscription.paused_at = now
        subscription.next_check_at = None
        subscription.claim_token = None
        subscription.claimed_until = None
    else:
        subscription.paused_at = None
        subscription.next_check_at = first_check_at(now)


def set_status(account_id: str, subscription_id: str, status: str) -> Subscription:
    with write_transaction() as session:
        _lock_account(session, account_id)
        subscription = _locked(session, account_id, subscription_id)
        _set_status_in(subscription, status, utcnow())
    return subscription


def update_metadata(account_id: str, subscription_id: str, custom_metadata: dict,
                    shown: Optional[dict] = None) -> Subscription:
    """Replaces the custom metadata; with the `shown` object an editor started from, 409 and nothing changed when it
    is no longer what is stored: another member's save since would be overwritten unseen."""
    with write_transaction() as session:
        subscription = _locked(session, account_id, subscription_id)
        if shown is not None and (subscription.custom_metadata or {}) != shown:
            now = json.dumps(subscription.custom_metadata or {}, ensure_ascii=False)
            raise InvalidState(f"This metadata was changed since the page was opened; it is now {now}. Your text is "
                               "kept below: save again to replace it.",
                               {"custom_metadata": subscription.custom_metadata})
        subscription.custom_metadata = custom_metadata
        subscription.updated_at = utcnow()
    return subscription


_ID_LENGTH = Subscription.__table__.c.id.type.length


def _may_be_stored(subscription_id: str) -> bool:
    """Whether a string is worth looking up as an id: it fits the column and holds no NUL (which PostgreSQL
    refuses in text). Any other string, the empty one too, names no subscription without a query."""
    return 0 < len(subscription_id) <= _ID_LENGTH and "\x00" not in subscription_id


def _owned_by_id(session, account_id, ids):
    rows = session.scalars(select(Subscription).where(  # locked in id order, as a check's write-back locks them
        Subscription.account_id == account_id, Subscription.id.in_(set(ids))).order_by(Subscription.id)
        .with_for_update())
    return {subscription.id: subscription for subscription in rows}


def _id_error(index, subscription_id, error: ServiceError):
    return {"index": index, "id": subscription_id, "error": error.message, "code": error.code}


def _split_items(items):
    """({id: index of its first occurrence} in request order, an error for each item that is not a string):
    an id repeated in the request counts once."""
    indexes, errors = {}, []
    for index, item in enumerate(items):
        if isinstance(item, str):
            indexes.setdefault(item, index)
        else:
            error = ValidationFailed(f"subscription_ids.{index}", "Not a subscription id: an id is a string.")
            errors.append(_id_error(index, None, error))
    return indexes, errors


def _bulk_apply(account_id, items, apply):
    """Apply `apply(subscription, now)` to each subscription the items name. Each item that fails goes to
    errors with its index, in request order: not a string, not an id of the account's (NOT_FOUND, whatever
    the string), or a move `apply` refuses; the other items are still applied."""
    done = []
    indexes, errors = _split_items(items)
    with write_transaction() as session:
        now = utcnow()
        _lock_account(session, account_id)
        owned = _owned_by_id(session, account_id, filter(_may_be_stored, indexes))
        for subscription_id, index in indexes.items():
            try:
                subscription = owned.get(subscription_id)
                if subscription is None:
                    raise NotFound("subscription", subscription_id)
                apply(subscription, now)
            except ServiceError as error:
                errors.append(_id_error(index, subscription_id, error))
                continue
            done.append({"id": subscription.id, "status": subscription.status})
    errors.sort(key=lambda error: error["index"])
    return done, errors


def bulk_cancel(account_id: str, ids: list):
    return _bulk_apply(account_id, ids, _cancel_in)


def bulk_set_status(account_id: str, ids: list, status: str):
    return _bulk_apply(account_id, ids, lambda subscription, now: _set_status_in(subscription, status, now))
