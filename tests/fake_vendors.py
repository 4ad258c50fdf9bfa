"""Local fakes of the data vendors, served over real HTTP on 127.0.0.1, answering in the shapes their
public documentation shows (the pages are cited on each class). Used by the adapter tests, the
conformance kit and scripts/bench_providers.py.

Each fake keeps every request it received (`calls`: arrival time, method, path, headers, body), enforces a
sliding-window rate limit when `limit=(calls, seconds)` is set (429), charges credits while `credits` is
not None (402 once spent), and serves `forced` answers (status, body, headers) first when the test queues them.
With `delay` (seconds) each answer takes that long, and `most_in_flight` is the most requests it was
answering at once.
"""
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1 (connection reuse is observable), JSON answers, no access log."""
    protocol_version = "HTTP/1.1"

    def reply(self, status, payload, headers=None):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(name, str(value))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class BackloggedHTTPServer(ThreadingHTTPServer):
    """A listen backlog for a whole sender or fetch pool: with the default of 5, connections past it wait for a
    SYN retransmit (a second), which a short client connect timeout reads as a failure."""
    request_queue_size = 128


class LocalServer:
    """A threading HTTP server on 127.0.0.1 with a free port, serving `handler_class` until `close`."""

    def __init__(self, handler_class):
        self.server = BackloggedHTTPServer(("127.0.0.1", 0), handler_class)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class NoSuchRoute(LocalServer):
    """A web server that has none of the vendor's routes (what a wrong base URL reaches): Python's own HTML 404 page
    for every request."""

    def __init__(self):
        class Handler(JsonHandler):
            def do_GET(self):
                self.send_error(404)

            do_POST = do_GET

        super().__init__(Handler)


class FakeVendor(LocalServer):
    api_key = "test-key"

    def __init__(self, limit=None, credits=None, delay=0.0):
        self.records = {}  # (entity_type, key) -> the vendor's record
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls = []
        self.statuses = []  # what each call was answered
        self.forced = deque()
        self.window = deque()  # arrival times within the rate-limit window
        self.limit = limit
        self.credits = credits
        self.lock = threading.Lock()
        vendor = self

        class Handler(JsonHandler):
            def do_GET(self):
                self.reply(*vendor.handle(self.command, self.path, self.headers, b""))

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.reply(*vendor.handle(self.command, self.path, self.headers, body))

        super().__init__(Handler)

    def handle(self, method, path, headers, body):
        with self.lock:
            now = time.time()
            self.calls.append((now, method, path, dict(headers), body))
            answer = self._answer(now, method, path, headers, body)
            self.statuses.append(answer[0])
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            return answer
        finally:
            with self.lock:
                self.in_flight -= 1

    def _answer(self, now, method, path, headers, body):
        if self.forced:
            return self.forced.popleft()
        if not self.authorized(headers):
            return self.refused()
        if self.limit and self._over_limit(now):
            return self.throttled()
        return self.serve(method, path, body)

    def _over_limit(self, now):
        """Whether `limit` requests already arrived within the window ending now (a sliding window)."""
        amount, seconds = self.limit
        while self.window and self.window[0] <= now - seconds:
            self.window.popleft()
        self.window.append(now)
        return len(self.window) > amount

    def charge(self, cost) -> bool:
        if self.credits is None:
            return True
        if self.credits < cost:
            return False
        self.credits -= cost
        return True

    def calls_per_window(self, seconds):
        """The most requests received within any `seconds`-long stretch."""
        moments = sorted(moment for moment, *_ in self.calls)
        most, start = 0, 0
        for end, moment in enumerate(moments):
            while moments[start] <= moment - seconds:
                start += 1
            most = max(most, end - start + 1)
        return most


class FakeCrustdata(FakeVendor):
    """https://docs.crustdata.com/person-docs/enrichment/introduction (POST /person/enrich, Bearer key,
    x-api-version 2025-11-01, an array of {matched_on, match_type, matches}),
    https://docs.crustdata.com/company-docs/enrichment/reference (POST /company/enrich, company_data),
    https://docs.crustdata.com/openapi-specs/2025-11-01/best-practices (sliding window, x-ratelimit-*,
    402 {"error": {"type": "insufficient_credits"}}), https://docs.crustdata.com/general/credits (401 bodies),
    https://docs.crustdata.com/general/pricing (1 credit per person profile, 2 per company record),
    https://github.com/crustdata/n8n-nodes-crustdata/blob/main/nodes/Crustdata/filter-fields.generated.ts
    (the person schema's experience.employment_details.current[]: name, title, start_date, is_default)."""
    COSTS = {"/person/enrich": 1, "/company/enrich": 2}
    SECTIONS = {"/person/enrich": ("person", "person_data"), "/company/enrich": ("company", "company_data")}

    def person(self, url, name="Jane Doe", headline="Engineer at Acme", title="Engineer",
               location="Berlin, Germany", company="Acme"):
        current = [] if company is None else [{"name": company, "title": title, "start_date": "2021-03-01",
                                               "is_default": True}]
        self.records[("person", url)] = {
            "basic_profile": {"name": name, "headline": headline, "current_title": title,
                              "location": {"raw": location}},
            "experience": {"employment_details": {"current": current, "past": [
                {"name": "Previous Co", "title": "Intern", "start_date": "2019-01-01", "end_date": "2021-02-28",
                 "is_default": False}]}}}

    def company(self, url, name="Acme", headcount=120, description="Makes anvils.", industry="Manufacturing"):
        self.records[("company", url)] = {"crustdata_company_id": 631394,
                                          "basic_info": {"name": name, "description": description,
                                                         "industries": [industry], "website": "https://acme.example",
                                                         "professional_network_url": url},
                                          "headcount": {"total": headcount}}

    def authorized(self, headers):
        return headers.get("authorization") == f"Bearer {self.api_key}" and headers.get("x-api-version") == "2025-11-01"

    def refused(self):
        return 401, {"message": "Invalid API key in request"}, {}

    def throttled(self):
        amount, seconds = self.limit
        return 429, {"error": {"type": "rate_limited", "message": "Too many requests"}}, {
            "x-ratelimit-limit": amount, "x-ratelimit-remaining": 0, "x-ratelimit-reset": int(seconds)}

    def serve(self, method, path, body):
        if method != "POST" or path not in self.SECTIONS:
            return 404, {"message": "Not found"}, {}
        urls = json.loads(body).get("professional_network_profile_urls") or []
        kind, section = self.SECTIONS[path]
        found = [url for url in urls if (kind, url) in self.records]
        if not self.charge(self.COSTS[path] * len(found)):
            error = {"type": "insufficient_credits", "message": "Insufficient credits", "metadata": {}}
            return 402, {"error": error}, {}
        entries = [{"matched_on": url, "match_type": "professional_network_profile_url",
                    "matches": [{"confidence_score": 1.0, section: self.records[(kind, url)]}]
                    if (kind, url) in self.records else []} for url in urls]
        return 200, entries, {}


class FakeCoresignal(FakeVendor):
    """https://docs.coresignal.com/api-introduction/authorization (`apikey` header),
    https://docs.coresignal.com/api/clean-employee-api (GET …/employee_clean/collect/{shorthand_name}),
    https://docs.coresignal.com/employee-api/clean-employee-api/data-dictionary-clean-employee-api
    (full_name, headline, generated_headline, job_title, is_deleted, experience),
    https://datarade.ai/data-products/public-resume-data-coresignal (experience entries: company_name,
    title, date_from, date_to),
    https://docs.coresignal.com/company-api/clean-company-api/sample-clean-company-api-data.md
    (name, size_employees_count, industry, description, websites_main),
    https://docs.coresignal.com/api-introduction/response-codes (401, 402, 404, 429, 503),
    https://docs.coresignal.com/api-introduction/credits (x-credits-remaining; 1 credit per Clean collect)."""
    PREFIXES = {"/cdapi/v2/employee_clean/collect/": "person", "/cdapi/v2/company_clean/collect/": "company"}

    def person(self, shorthand, name="Jane Doe", headline="Engineer at Acme", title="Engineer", company="Acme",
               deleted=0):
        self.records[("person", shorthand)] = {
            "id": 4290, "full_name": name, "headline": headline, "job_title": title, "is_deleted": deleted,
            "websites_professional_network": f"https://www.linkedin.com/in/{shorthand}",
            "shorthand_names": [shorthand],
            "experience": [{"company_name": company, "title": title, "date_from": "2021-03", "date_to": None},
                           {"company_name": "Previous Co", "title": "Intern", "date_from": "2019-01",
                            "date_to": "2021-02"}]}

    def company(self, shorthand, name="Acme", headcount=150, description="Makes anvils.", industry="Software"):
        self.records[("company", shorthand)] = {
            "id": 1234567, "name": name, "size_employees_count": headcount, "industry": industry,
            "description": description, "websites_main": "http://www.acme.example",
            "websites_professional_network": f"https://www.linkedin.com/company/{shorthand}"}

    def authorized(self, headers):
        return headers.get("apikey") == self.api_key

    def refused(self):
        return 401, {"detail": "No valid API key provided"}, {}

    def throttled(self):
        return 429, {"detail": "Rate limit exceeded"}, {"Retry-After": 1}

    def serve(self, method, path, body):
        for prefix, kind in self.PREFIXES.items():
            if method == "GET" and path.startswith(prefix):
                key = unquote(urlsplit(path).path[len(prefix):])
                break
        else:
            return 404, {"detail": "Not found"}, {}
        if (kind, key) not in self.records:
            return 404, {"detail": "Not found"}, self._credit_header()
        if not self.charge(1):
            return 402, {"detail": "Insufficient credits"}, self._credit_header()
        return 200, self.records[(kind, key)], self._credit_header()

    def _credit_header(self):
        return {} if self.credits is None else {"x-credits-remaining": self.credits}
