"""A provider as a third party would write it (the README's example): only `fetch`, nothing inherited.
It serves a directory kept in memory; in real life `fetch` would call the team's own data source."""
from app.providers import EntityUnavailable, ProviderError


class DirectoryProvider:
    name = "directory"

    def __init__(self, people=None):
        self.people = people or {}
        self.down = set()

    def fetch(self, entity_type, network_id):
        if network_id in self.down:
            raise ProviderError("directory unreachable")
        if network_id not in self.people:
            raise EntityUnavailable("not_found")
        return {"network_id": network_id, **self.people[network_id]}


def create(config):
    return DirectoryProvider()
