"""A deterministic synthetic network (the default provider; no network access).

Time is cut into epochs of `SIMULATED_PACE_SECONDS`. Every entity's state is a pure function of
(seed, network id, epoch): each person changes jobs every few epochs and posts, comments and
reacts; each company grows and rewrites its description now and then. Same seed, same history.
Ids beginning `private-` or `missing-` are unavailable, `flaky-` always fail transiently.

Rates (`SIMULATED_RATES`), with one epoch a day (the default pace): `realistic` for capacity planning — a
person changes jobs every 2–5 years, posts every 1–8 weeks, comments and reacts more often; a company's
headcount moves every 1–8 weeks and its description every 6–24 months. `demo` packs that into a few
epochs, for the quick start. `SIMULATED_LATENCY_MS`, `SIMULATED_FAILURE_PERCENT` and
`SIMULATED_THROTTLE_PERCENT` (a throttled answer asks to retry after `SIMULATED_RETRY_AFTER_SECONDS`)
let the engine's handling of a slow or throttled vendor be seen without one.
"""
import hashlib
import random
import time
from datetime import datetime, timezone

from app.providers.base import EntityUnavailable, ProviderError

COMPANIES = ("Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Stark Industries", "Wayne Enterprises",
             "Wonka Industries", "Cyberdyne", "Soylent", "Tyrell Corp", "Massive Dynamic", "Pied Piper",
             "Vandelay Industries", "Aperture Science", "Black Mesa")
TITLES = ("Software Engineer", "Senior Engineer", "Engineering Manager", "VP Engineering", "CTO",
          "Account Executive", "Sales Director", "Head of Growth", "Product Manager", "Data Scientist",
          "Designer", "Chief of Staff", "COO", "Marketing Lead")
INDUSTRIES = ("Software", "Manufacturing", "Retail", "Biotech", "Finance", "Media")
TOPICS = ("hiring", "our new release", "a conference talk", "lessons from the quarter", "team culture",
          "a customer story", "remote work", "the roadmap")
PITCHES = ("builds tools", "makes software", "offers services", "designs platforms", "runs a marketplace",
           "ships hardware", "provides analytics")
HEADCOUNT_CYCLE = 40
REACTIONS = ("like", "celebrate", "support", "insightful", "love")
RECENT_ACTIVITIES = 5
# How many epochs between two occurrences, shortest and longest (each entity has its own period).
RATES = {
    "realistic": {"job": (730, 1825), "post": (7, 56), "comment": (3, 28), "reaction": (1, 14),
                  "company_post": (3, 14), "growth": (7, 56), "description": (180, 720)},
    "demo": {"job": (4, 24), "post": (2, 8), "comment": (3, 10), "reaction": (1, 6),
             "company_post": (3, 10), "growth": (2, 12), "description": (20, 60)},
}


class SimulatedProvider:
    name = "simulated"
    concurrency = 1
    local = True  # no vendor to protect: no shared concurrency slots

    def __init__(self, seed: int, pace_seconds: int, domain: str, clock=time.time, rates="demo", latency_ms=0,
                 failure_percent=0.0, throttle_percent=0.0, retry_after_seconds=30.0):
        if rates not in RATES:
            raise ValueError(f"SIMULATED_RATES must be one of {', '.join(RATES)}, not {rates!r}")
        self.seed = seed
        self.pace = max(1, pace_seconds)
        self.domain = domain
        self.clock = clock
        self.periods = RATES[rates]
        self.latency = latency_ms / 1000
        self.failure_percent = failure_percent
        self.throttle_percent = throttle_percent
        self.retry_after = retry_after_seconds

    def _hash(self, *parts) -> int:
        text = "|".join(str(part) for part in (self.seed, *parts))
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")

    def _cycle(self, network_id, name, epoch, shortest, longest):
        """How many times a recurring thing has happened by `epoch`, each entity with its own period."""
        period = shortest + self._hash(network_id, name, "period") % (longest - shortest + 1)
        return (epoch + self._hash(network_id, name, "offset") % period) // period, period

    def _moment(self, epoch):
        return datetime.fromtimestamp(epoch * self.pace, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _misbehave(self, network_id):
        """The slow or failing vendor the settings ask for."""
        if self.latency:
            time.sleep(self.latency)
        if network_id.startswith("flaky-") or random.uniform(0, 100) < self.failure_percent:
            raise ProviderError("simulated transient failure")
        if random.uniform(0, 100) < self.throttle_percent:
            raise ProviderError("simulated HTTP 429", retry_after=self.retry_after)

    def fetch(self, entity_type: str, network_id: str) -> dict:
        self._misbehave(network_id)
        if network_id.startswith("private-"):
            raise EntityUnavailable("private")
        if network_id.startswith("missing-"):
            raise EntityUnavailable("not_found")
        epoch = int(self.clock() // self.pace)
        if entity_type == "contact":
            return self._contact(network_id, epoch)
        return self._company(network_id, epoch)

    def _contact(self, network_id, epoch):
        job, _ = self._cycle(network_id, "job", epoch, *self.periods["job"])
        company = COMPANIES[self._hash(network_id, "company", job) % len(COMPANIES)]
        title = TITLES[self._hash(network_id, "title", job) % len(TITLES)]
        # Now and then the network hides the title: unknown, which is never a change.
        shown_title = None if self._hash(network_id, "hidden", epoch) % 25 == 0 else title
        activities = (self._activities(network_id, epoch, "post", *self.periods["post"])
                      + self._activities(network_id, epoch, "comment", *self.periods["comment"])
                      + self._activities(network_id, epoch, "reaction", *self.periods["reaction"]))
        return {
            "network_id": network_id,
            "name": network_id.replace("-", " ").title(),
            "headline": f"{title} at {company}",
            "company": company,
            "title": shown_title,
            "location": ("Berlin", "London", "New York", "Paris", "Remote")[self._hash(network_id, "loc") % 5],
            "activities": activities,
        }

    def _company(self, network_id, epoch):
        growth, _ = self._cycle(network_id, "growth", epoch, *self.periods["growth"])
        base = 10 + self._hash(network_id, "base") % 5000
        step = 1 + self._hash(network_id, "step") % max(1, base // 20)
        version, _ = self._cycle(network_id, "description", epoch, *self.periods["description"])
        industry = INDUSTRIES[self._hash(network_id, "industry") % len(INDUSTRIES)]
        name = network_id.replace("-", " ").title()
        pitch = PITCHES[self._hash(network_id, "pitch", version) % len(PITCHES)]
        return {
            "network_id": network_id,
            "name": name,
            # Grows for a while, then a round of layoffs brings it back (the cycle wraps).
            "headcount": base + step * (growth % HEADCOUNT_CYCLE),
            "description": f"{name} {pitch} for the {industry.lower()} industry.",
            "industry": industry,
            "website": f"https://{network_id}.example",
            "activities": self._activities(network_id, epoch, "post", *self.periods["company_post"]),
        }

    def _activities(self, network_id, epoch, kind, shortest, longest):
        count, period = self._cycle(network_id, kind, epoch, shortest, longest)
        items = []
        for number in range(max(0, count - RECENT_ACTIVITIES), count):
            activity_id = f"act_{self._hash(network_id, kind, number):016x}"
            item = {"id": activity_id, "kind": kind, "created_at": self._moment(number * period),
                    "url": f"https://www.{self.domain}/feed/update/{activity_id}",
                    "text": f"Thoughts on {TOPICS[self._hash(network_id, kind, number, 'topic') % len(TOPICS)]}"}
            if kind in ("comment", "reaction"):
                item["target_url"] = f"https://www.{self.domain}/feed/update/act_{self._hash(kind, number):016x}"
            if kind == "reaction":
                item["reaction_type"] = REACTIONS[self._hash(network_id, kind, number, "type") % len(REACTIONS)]
                item["text"] = None
            items.append(item)
        return items


def create(config) -> SimulatedProvider:
    return SimulatedProvider(config["SIMULATED_SEED"], config["SIMULATED_PACE_SECONDS"], config["NETWORK_DOMAIN"],
                             rates=config.get("SIMULATED_RATES", "realistic"),
                             latency_ms=config.get("SIMULATED_LATENCY_MS", 0),
                             failure_percent=config.get("SIMULATED_FAILURE_PERCENT", 0.0),
                             throttle_percent=config.get("SIMULATED_THROTTLE_PERCENT", 0.0),
                             retry_after_seconds=config.get("SIMULATED_RETRY_AFTER_SECONDS", 30.0))
