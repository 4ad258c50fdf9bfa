"""Crustdata (https://docs.crustdata.com), API version 2025-11-01.

- Auth: `authorization: Bearer <key>` and `x-api-version: 2025-11-01` on every call.
- People: POST /person/enrich {"professional_network_profile_urls": [...up to 25], "fields": [...]};
  companies: POST /company/enrich with the same identifier key. Both answer a JSON array, one entry per
  identifier: {matched_on, match_type, matches: [{confidence_score, person_data | company_data}]};
  an empty `matches` is no match (not found), so a 404 is an unknown route's, never a profile's. `fields`
  takes section groups or dot paths (https://docs.crustdata.com/person-docs/enrichment/reference).
- Limits: 15 requests a minute per endpoint by default, counted on a sliding window; a 429 says when
  capacity frees up in `x-ratelimit-reset` (seconds). A 402 {"error": {"type": "insufficient_credits"}}
  is terminal until credits are added; 401 is a missing or refused key.
- Credits: a base person profile costs 1, a company record 2 (pricing pages); no response header
  reports the cost, so none is recorded.

Mapped: person basic_profile.name, headline, current_title, location.raw, and the current employer:
the `name` of the `experience.employment_details.current` entry marked `is_default` (else the first) —
field paths of the 2025-11-01 person schema as Crustdata's own n8n node lists them
(https://github.com/crustdata/n8n-nodes-crustdata, nodes/Crustdata/filter-fields.generated.ts, "generated
from the Crustdata OpenAPI 2025-11-01 spec"); no current entry is unknown. Company basic_info.name,
description, industries[0], website and headcount.total. Posts are not in the enrich answers: they come
from the separate, per-account-enabled and per-post-billed /social_post/search, not called here, so a
person's and a company's posts stay unknown (None, never a change).
"""
from urllib.parse import unquote, urlsplit

from app.common import composed
from app.providers.base import (Answers, BaseProvider, EntityUnavailable, ProviderError, api_settings,
                                current_position)
from app.providers.vendor_http import (OccasionalLog, json_body, pooled_session, raise_for_limits,
                                       raise_for_not_found, send)

DEFAULT_URL = "https://api.crustdata.com"
API_VERSION = "2025-11-01"
ENDPOINTS = {"contact": ("/person/enrich", "person_data", ["basic_profile", "experience"]),
             "company": ("/company/enrich", "company_data", ["basic_info", "headcount"])}


def _same_url(url: str) -> str:
    """Compare profile URLs without scheme, `www.`, case, a trailing slash or percent-encoding (the vendor may echo
    either: `/in/josé` for the stored `/in/jos%c3%a9`, which otherwise never matched: a check failed for ever)."""
    parts = urlsplit(url if "//" in url else f"https://{url}")
    path = composed(unquote(parts.path))  # the stored id's form
    return (parts.netloc.lower().removeprefix("www.") + path.rstrip("/")).lower()


def _slug(url: str) -> str:
    return urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1]


def _current_employer(experience):
    """The current position's company name; None (unknown) when the answer has no current position."""
    details = experience.get("employment_details") if isinstance(experience, dict) else None
    current = details.get("current") if isinstance(details, dict) else None
    positions = [entry for entry in current if isinstance(entry, dict)] if isinstance(current, list) else []
    position = current_position(positions, name="name", started="start_date",
                                preferred=lambda entry: entry.get("is_default") is True)  # the default one first
    return position.get("name") if position else None


def _section(data: dict, name: str) -> dict:
    """A section of a record, {} when it is absent; one of another shape (a list, a text) makes the profile's answer
    unreadable (it raised out of the call and failed every profile of the batch: walk)."""
    section = data.get(name)
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ProviderError(f"crustdata's {name} is not an object")
    return section


def _score(match: dict) -> float:
    """A match's confidence; one that is not a number (a number sent as text) is no confidence."""
    score = match.get("confidence_score")
    return score if isinstance(score, (int, float)) and not isinstance(score, bool) else 0


def person_snapshot(url: str, data: dict) -> dict:
    basic = _section(data, "basic_profile")
    location = basic.get("location")
    return {"network_id": _slug(url), "name": basic.get("name"), "headline": basic.get("headline"),
            "company": _current_employer(data.get("experience")), "title": basic.get("current_title"),
            "location": location.get("raw") if isinstance(location, dict) else None}


def company_snapshot(url: str, data: dict) -> dict:
    basic = _section(data, "basic_info")
    headcount = data.get("headcount")
    industries = basic.get("industries")
    return {"network_id": _slug(url), "name": basic.get("name"), "description": basic.get("description"),
            "headcount": headcount.get("total") if isinstance(headcount, dict) else None,
            "industry": industries[0] if isinstance(industries, list) and industries else None,
            "website": basic.get("website")}


class CrustdataProvider(BaseProvider):
    name = "crustdata"
    batch_size = 25
    rate_limit = "15/minute"
    concurrency = 1
    lookup = "url"

    def __init__(self, api_key: str, base_url: str = DEFAULT_URL, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = pooled_session(2, {"authorization": f"Bearer {api_key}", "x-api-version": API_VERSION,
                                          "content-type": "application/json", "accept": "application/json"})
        self.route_404_log = OccasionalLog()

    def fetch(self, entity_type: str, url: str) -> dict:
        answer = self.fetch_many(entity_type, [url])[url]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def fetch_many(self, entity_type: str, urls: list) -> Answers:
        path, section, fields = ENDPOINTS[entity_type]
        response = send(self.session, "POST", self.base_url + path, self.timeout,
                        json={"professional_network_profile_urls": urls, "fields": fields})
        raise_for_not_found(response, "PROVIDER_CRUSTDATA_URL", says_no_such_profile=lambda _response: False,
                            occasionally=self.route_404_log)
        raise_for_limits(response, wait_header="x-ratelimit-reset")
        if response.status_code != 200:
            raise ProviderError(f"crustdata answered HTTP {response.status_code}")
        entries = {}
        for entry in json_body(response, list):
            if isinstance(entry, dict) and isinstance(entry.get("matched_on"), str):
                # one with matches wins over an empty one for the same profile, in either order
                entries.setdefault(_same_url(entry["matched_on"]), []).append(entry)
        entries = {url: max(found, key=lambda entry: bool(entry.get("matches"))) for url, found in entries.items()}
        snapshot = person_snapshot if entity_type == "contact" else company_snapshot
        return Answers({url: self._answer(entries.get(_same_url(url)), url, section, snapshot) for url in urls})

    @staticmethod
    def _answer(entry, url, section, snapshot):
        if entry is None:
            return ProviderError("crustdata's answer has no entry for this profile")
        if entry.get("matches") is None or entry["matches"] == []:  # no match: only none, or an empty list
            return EntityUnavailable("not_found")
        if not isinstance(entry["matches"], list):  # an answer of another shape (`{}` too): not "not found"
            return ProviderError("crustdata's entry has matches that are not a list")
        matches = [match for match in entry["matches"] if isinstance(match, dict)]
        if not matches:  # a list of something else (`[null]`) is an answer of another shape, as a dict is
            return ProviderError("crustdata's entry has matches that are not objects")
        data = max(matches, key=_score).get(section)
        if not isinstance(data, dict):
            return ProviderError(f"crustdata's match has no {section}")
        try:
            return snapshot(url, data)
        except ProviderError as unreadable:
            return unreadable


def create(config) -> CrustdataProvider:
    return CrustdataProvider(**api_settings("crustdata", config, DEFAULT_URL))
