"""Coresignal (https://docs.coresignal.com), Clean Employee and Clean Company APIs.

- Auth: an `apikey: <key>` header (Authorization page).
- People: GET /cdapi/v2/employee_clean/collect/{shorthand_name}; companies:
  GET /cdapi/v2/company_clean/collect/{shorthand_name}: one record per call (their bulk collect is an
  asynchronous file export, not a lookup). Asked by the subscription's network id, the shorthand name.
- Answers (Response codes page): 404 no such record, 401 no valid key, 402 insufficient credits,
  429 the per-second limit exceeded, 503 too many requests. Its errors are JSON objects (`{"detail": …}`, as
  the Bulk Collect page shows its 402); a 404 that is not one is a web server's for a wrong base URL. A record
  with `is_deleted: 1` is deleted or private. Every response carries `x-credits-remaining`; a successful Clean
  collect costs 1 credit (Credits page), recorded per call.
- Limits: requests per second per key, by plan and endpoint (18 to 54 on the pages read); the default
  here is the lowest, raise it with PROVIDER_RATE_LIMIT.

Mapped: employee full_name, generated_headline (else headline), job_title (Clean Employee API data
dictionary), and the company name of the current entry of `experience` (no `date_to`); company name,
description, industry, size_employees_count, websites_main. The dictionary documents the Experience
collection, but the copies of it searched for this adapter stop before the entries' fields: `company_name`
and `date_to` rest on Coresignal's listing of the same data on Datarade
(https://datarade.ai/data-products/public-resume-data-coresignal), not on its own pages. Posts come from a
separate Posts API, not called: unknown.
"""
import math
from urllib.parse import quote

from app.providers.base import (Answers, BaseProvider, EntityUnavailable, ProviderError, api_settings,
                                current_position, fetch_each)
from app.providers.vendor_http import (OccasionalLog, is_json_object, json_body, pooled_session, raise_for_limits,
                                       raise_for_not_found, send)

DEFAULT_URL = "https://api.coresignal.com"
PATHS = {"contact": "/cdapi/v2/employee_clean/collect/", "company": "/cdapi/v2/company_clean/collect/"}
COLLECT_CREDITS = 1.0


def _current_company(experience):
    """The company of the current entry (no `date_to`); of several, the latest started (then the first by name), so
    the same entries in another order name the same company (they were a position change each time, walk)."""
    if not isinstance(experience, list):
        return None
    current = [entry for entry in experience if isinstance(entry, dict) and entry.get("date_to") is None]
    position = current_position(current, name="company_name", started="date_from")
    return position.get("company_name") if position else None


def employee_snapshot(shorthand: str, record: dict) -> dict:
    return {"network_id": shorthand, "name": record.get("full_name"),
            "headline": record.get("generated_headline") or record.get("headline"),
            "title": record.get("job_title"), "company": _current_company(record.get("experience"))}


def company_snapshot(shorthand: str, record: dict) -> dict:
    return {"network_id": shorthand, "name": record.get("name"), "description": record.get("description"),
            "industry": record.get("industry"), "headcount": record.get("size_employees_count"),
            "website": record.get("websites_main")}


class CoresignalProvider(BaseProvider):
    name = "coresignal"
    batch_size = 1
    rate_limit = "18/second"
    concurrency = 4
    lookup = "id"

    def __init__(self, api_key: str, base_url: str = DEFAULT_URL, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.credits_remaining = None
        self.session = pooled_session(self.concurrency, {"apikey": api_key, "accept": "application/json"})
        self.route_404_log = OccasionalLog()

    def fetch(self, entity_type: str, shorthand: str) -> dict:
        # Stored ids are already percent-encoded (`jos%c3%a9`): encoding their % again asked for another name.
        response = send(self.session, "GET", self.base_url + PATHS[entity_type] + quote(shorthand, safe="%"),
                        self.timeout)
        self._note_credits(response)
        raise_for_not_found(response, "PROVIDER_CORESIGNAL_URL", says_no_such_profile=is_json_object,
                            occasionally=self.route_404_log)
        raise_for_limits(response, throttled=(429, 503))  # its 503 is "too many requests" (Response codes page)
        if response.status_code != 200:
            raise ProviderError(f"coresignal answered HTTP {response.status_code}")
        record = json_body(response, dict)
        if record.get("is_deleted") == 1:
            raise EntityUnavailable("private")
        return (employee_snapshot if entity_type == "contact" else company_snapshot)(shorthand, record)

    def fetch_many(self, entity_type: str, keys: list) -> Answers:
        answers = fetch_each(self, entity_type, keys)
        # Charged per 200: a record, or one marked deleted or private.
        answers.credits = COLLECT_CREDITS * sum(
            isinstance(answer, dict) or (isinstance(answer, EntityUnavailable) and answer.reason == "private")
            for answer in answers.values())
        return answers

    def _note_credits(self, response):
        remaining = response.headers.get("x-credits-remaining")
        if remaining is not None:
            try:
                credits = float(remaining)
            except ValueError:
                return
            if math.isfinite(credits):  # NaN or infinity made /healthz and /account/usage invalid JSON
                self.credits_remaining = credits


def create(config) -> CoresignalProvider:
    return CoresignalProvider(**api_settings("coresignal", config, DEFAULT_URL))
