"""A deterministic synthetic network (the default provider; no network access).

Time is cut into epochs of `SIMULATED_PACE_SECONDS`. Every entity's state is a pure function of
(seed, network id, epoch): each person changes jobs every few epochs and posts, comments and
reacts; each company grows and rewrites its description now and then. Same seed, same history.
Ids beginning `private-` or `missing-` are unavailable.
"""
import hashlib
import time
from datetime import datetime, timezone

from app.providers.base import EntityUnavailable

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


class SimulatedProvider:
    name = "simulated"
    concurrency = 1

    def __init__(self, seed: int, pace_seconds: int, domain: str, clock=time.time):
        self.seed = seed
        self.pace = max(1, pace_seconds)
        self.domain = domain
        self.clock = clock

    def _hash(self, *parts) -> int:
        text = "|".join(str(part) for part in (self.seed, *parts))
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")

    def _cycle(self, network_id, name, epoch, shortest, longest):
        """How many times a recurring thing has happened by `epoch`, each entity with its own period."""
        period = shortest + self._hash(network_id, name, "period") % (longest - shortest + 1)
        return (epoch + self._hash(network_id, name, "offset") % period) // period, period

    def _moment(self, epoch):
        return datetime.fromtimestamp(epoch * self.pace, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def fetch(self, entity_type: str, network_id: str) -> dict:
        if network_id.startswith("private-"):
            raise EntityUnavailable("private")
        if network_id.startswith("missing-"):
            raise EntityUnavailable("not_found")
        epoch = int(self.clock() // self.pace)
        if entity_type == "contact":
            return self._contact(network_id, epoch)
        return self._company(network_id, epoch)

    def _contact(self, network_id, epoch):
        job, _ = self._cycle(network_id, "job", epoch, 4, 24)
        company = COMPANIES[self._hash(network_id, "company", job) % len(COMPANIES)]
        title = TITLES[self._hash(network_id, "title", job) % len(TITLES)]
        # Now and then the network hides the title: unknown, which is never a change.
        shown_title = None if self._hash(network_id, "hidden", epoch) % 25 == 0 else title
        activities = (self._activities(network_id, epoch, "post", 2, 8)
                      + self._activities(network_id, epoch, "comment", 3, 10)
                      + self._activities(network_id, epoch, "reaction", 1, 6))
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
        growth, _ = self._cycle(network_id, "growth", epoch, 2, 12)
        base = 10 + self._hash(network_id, "base") % 5000
        step = 1 + self._hash(network_id, "step") % max(1, base // 20)
        version, _ = self._cycle(network_id, "description", epoch, 20, 60)
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
            "activities": self._activities(network_id, epoch, "post", 3, 10),
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
    return SimulatedProvider(config["SIMULATED_SEED"], config["SIMULATED_PACE_SECONDS"], config["NETWORK_DOMAIN"])
