"""`search=` on the subscription list: the needle is found in any part of the network id or of the network
URL, case-insensitively and literally (contract), using a trigram index of the ids.

A stored URL is always `canonical_url(domain, entity_type, id)`: a constant part, then the id. So the
needle is in the URL when it is in the id, when it lies inside the constant part (every subscription of
that entity type matches: the total then comes from the counters), or when it starts in the constant part
and runs into the id (the id starts with the rest). Only the ids are indexed: FTS5's trigram tokenizer on
SQLite, pg_trgm's GIN index on PostgreSQL (migration a7d3f1c9e215). A trigram index cannot serve a needle
(or rest) shorter than 3 characters: their matches are counted by `subscription_gram_counts` (migration
e5f1a2b3c4d6) and found by a LIKE over the account's rows, newest first.

A stored id holds only `ID_CHARACTERS` (entities.normalize_network_id). So a needle holding another character
(`/`, `.`) is never in an id, and the part of it in the URL must end at the `/` before the id: it matches
either in the id or as a start of it, never both, and starts it at most one way.
"""
import string
from dataclasses import dataclass

from sqlalchemy import and_, bindparam, false, func, literal_column, or_, select, table, text, tuple_

from app.models import Subscription, SubscriptionGramCount
from app.services.entities import ENTITY_TYPES, canonical_url

TRIGRAM = 3
LIKE_ESCAPE = "\\"
ID_CHARACTERS = frozenset(string.ascii_lowercase + string.digits + "-_%")
START_GRAM = "^"  # subscription_gram_counts: `^ab` counts the ids starting with `ab`


@dataclass(frozen=True)
class SearchPlan:
    """What matches a needle: every subscription of `whole_types`; of `in_id_types`, those whose id contains
    `needle`; of each `(entity_type, start)` pair of `id_starts`, those whose id starts with `start`."""
    needle: str
    whole_types: tuple
    in_id_types: tuple
    id_starts: tuple

    @property
    def partial_types(self) -> tuple:
        return self.in_id_types + tuple(entity_type for entity_type, _start in self.id_starts)

    @property
    def counted_grams(self) -> tuple:
        """(entity_type, gram) of the parts too short for a trigram, whose matches the gram counters hold."""
        grams = [(entity_type, self.needle) for entity_type in self.in_id_types if len(self.needle) < TRIGRAM]
        return tuple(grams + [(entity_type, START_GRAM + start) for entity_type, start in self.id_starts
                              if len(start) < TRIGRAM])

    @property
    def indexed(self) -> bool:
        """Whether some part is served by the trigram index."""
        return len(self.counted_grams) < len(self.partial_types)


def _may_be_in_id(text_: str) -> bool:
    return set(text_) <= ID_CHARACTERS


def plan(needle: str, domain: str, entity_types=ENTITY_TYPES) -> SearchPlan:
    """The plan for a needle already in the stored form (entities.search_form), over `entity_types`."""
    whole, in_id, starts = [], [], []
    for entity_type in entity_types:
        before_id = canonical_url(domain, entity_type, "").lower()
        if needle in before_id:
            whole.append(entity_type)
            continue
        if _may_be_in_id(needle):
            in_id.append(entity_type)
        starts.extend((entity_type, needle[split:]) for split in range(1, len(needle))
                      if before_id.endswith(needle[:split]) and _may_be_in_id(needle[split:]))
    return SearchPlan(needle, tuple(whole), tuple(in_id), tuple(starts))


def gram_total(search: SearchPlan, by_status: bool):
    """The number of rows matching the parts of `counted_grams`, in the account of the parameter `account_id`
    (and of `status` when asked): disjoint parts (see the module), so a sum of counters."""
    pair = tuple_(SubscriptionGramCount.entity_type, SubscriptionGramCount.gram)
    conditions = [SubscriptionGramCount.account_id == bindparam("account_id"), pair.in_(search.counted_grams)]
    if by_status:
        conditions.append(SubscriptionGramCount.status == bindparam("status"))
    return select(func.coalesce(func.sum(SubscriptionGramCount.count), 0)).where(*conditions)


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


def counted_by_index_alone(search: SearchPlan) -> bool:
    """Whether the matches are exactly the ids holding the needle, whatever their entity type, so that the
    trigram index alone can count them (SQLite, in a table holding one account's rows)."""
    return (len(search.needle) >= TRIGRAM and set(search.in_id_types) == set(ENTITY_TYPES)
            and not search.whole_types and not search.id_starts)


def index_count(needle: str):
    """The number of ids in the whole table holding `needle` (3 characters or more), read from the FTS5 index
    alone: no row is read."""
    return (select(func.count()).select_from(table("subscriptions_search"))
            .where(text("subscriptions_search MATCH :phrase").bindparams(
                bindparam("phrase", _fts_phrase(needle), unique=True))))


def neighbour_trigrams(search: SearchPlan):
    """For a 2-character needle found only inside ids (`-0`): the FTS5 query of every trigram holding it (`x-0`,
    `-0x`). An id of 3 characters or more holds the needle only if it holds one of them; an id of exactly the
    needle holds none. None for other plans."""
    if len(search.needle) != 2 or search.whole_types or search.id_starts or not search.in_id_types:
        return None
    return " OR ".join(_fts_phrase(trigram) for character in sorted(ID_CHARACTERS)
                       for trigram in (character + search.needle, search.needle + character))


def among_neighbours(search: SearchPlan, query: str):
    """The rows holding the needle among the first `:candidates` rows of the trigram index holding one of the
    `neighbour_trigrams` (`query`), in any account."""
    candidates = (select(literal_column("rowid")).select_from(table("subscriptions_search"))
                  .where(text("subscriptions_search MATCH :neighbours").bindparams(
                      bindparam("neighbours", query, unique=True)))
                  .limit(bindparam("candidates")))
    return and_(literal_column("subscriptions.rowid").in_(candidates),
                Subscription.network_id.like(f"%{like_escape(search.needle)}%", escape=LIKE_ESCAPE))


def _id_starts(start: str, dialect: str, use_index: bool):
    prefix = Subscription.network_id.like(f"{like_escape(start)}%", escape=LIKE_ESCAPE)
    return and_(_id_contains(start, dialect), prefix) if use_index and len(start) >= TRIGRAM else prefix


def partial_condition(search: SearchPlan, dialect: str, use_index=True, indexed_only=False):
    """The matching rows of `partial_types`; `use_index=False`: tested row by row (SQLite: LIKE, not FTS5);
    `indexed_only`: only the parts the trigram index serves (the others are counted_grams)."""
    def wanted(text_):
        return not indexed_only or len(text_) >= TRIGRAM

    parts = []
    if search.in_id_types and wanted(search.needle):
        in_id = _id_contains(search.needle, dialect, use_index)
        if search.whole_types:
            in_id = and_(Subscription.entity_type.in_(search.in_id_types), in_id)
        parts.append(in_id)
    parts.extend(and_(Subscription.entity_type == entity_type, _id_starts(start, dialect, use_index))
                 for entity_type, start in search.id_starts if wanted(start))
    return or_(*parts) if parts else false()


def condition(search: SearchPlan, dialect: str, use_index=True):
    """Every matching row."""
    partial = partial_condition(search, dialect, use_index)
    return or_(Subscription.entity_type.in_(search.whole_types), partial) if search.whole_types else partial
