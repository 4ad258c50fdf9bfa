"""`search=` on the subscription list: the needle is found in any part of the network id or of the network
URL, case-insensitively and literally (contract), using a trigram index of the ids.

A stored URL is always `canonical_url(domain, entity_type, id)`: a constant part, then the id. So the
needle is in the URL when it is in the id, when it lies inside the constant part (every subscription of
that entity type matches: the total then comes from the counters), or when it starts in the constant part
and runs into the id (the id starts with the rest). Only the ids are indexed: FTS5's trigram tokenizer on
SQLite, pg_trgm's GIN index on PostgreSQL (migration a7d3f1c9e215). A trigram index cannot serve a needle
(or rest) shorter than 3 characters: those are a plain LIKE over the account's rows.
"""
from dataclasses import dataclass

from sqlalchemy import and_, bindparam, false, literal_column, or_, select, table, text

from app.models import Subscription
from app.services.entities import ENTITY_TYPES, canonical_url

TRIGRAM = 3
LIKE_ESCAPE = "\\"


@dataclass(frozen=True)
class SearchPlan:
    """What matches a needle: every subscription of `whole_types`; and of `partial_types`, those whose id
    contains `needle`, and those of each `(entity_type, start)` pair whose id starts with `start`."""
    needle: str
    whole_types: tuple
    partial_types: tuple
    id_starts: tuple


def plan(needle: str, domain: str, entity_types=ENTITY_TYPES) -> SearchPlan:
    """The plan for a needle already in the stored form (entities.search_form), over `entity_types`."""
    whole, partial, starts = [], [], []
    for entity_type in entity_types:
        before_id = canonical_url(domain, entity_type, "").lower()
        if needle in before_id:
            whole.append(entity_type)
            continue
        partial.append(entity_type)
        starts.extend((entity_type, needle[split:]) for split in range(1, len(needle))
                      if before_id.endswith(needle[:split]))
    return SearchPlan(needle, tuple(whole), tuple(partial), tuple(starts))


def like_escape(text_: str) -> str:
    return text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _fts_phrase(needle: str) -> str:
    """The needle as one FTS5 phrase: quoted, so operators and column filters in it are plain text."""
    return '"' + needle.replace('"', '""') + '"'


def _id_contains(needle: str, dialect: str, use_index=True):
    if use_index and dialect == "sqlite" and len(needle) >= TRIGRAM:
        matches = (select(literal_column("rowid")).select_from(table("subscriptions_search"))
                   .where(text("subscriptions_search MATCH :phrase").bindparams(
                       bindparam("phrase", _fts_phrase(needle), unique=True))))
        return literal_column("subscriptions.rowid").in_(matches)
    # PostgreSQL's planner takes the GIN trigram index for LIKE by itself (for 3 characters or more).
    return Subscription.network_id.like(f"%{like_escape(needle)}%", escape=LIKE_ESCAPE)


def _id_starts(start: str, dialect: str, use_index: bool):
    prefix = Subscription.network_id.like(f"{like_escape(start)}%", escape=LIKE_ESCAPE)
    return and_(_id_contains(start, dialect), prefix) if use_index and len(start) >= TRIGRAM else prefix


def partial_condition(search: SearchPlan, dialect: str, use_index=True):
    """The matching rows of `partial_types`; `use_index=False`: tested row by row (SQLite: LIKE, not FTS5)."""
    if not search.partial_types:
        return false()
    in_id = _id_contains(search.needle, dialect, use_index)
    if search.whole_types:
        in_id = and_(Subscription.entity_type.in_(search.partial_types), in_id)
    starts = [and_(Subscription.entity_type == entity_type, _id_starts(start, dialect, use_index))
              for entity_type, start in search.id_starts]
    return or_(in_id, *starts)


def condition(search: SearchPlan, dialect: str, use_index=True):
    """Every matching row."""
    partial = partial_condition(search, dialect, use_index)
    return or_(Subscription.entity_type.in_(search.whole_types), partial) if search.whole_types else partial
