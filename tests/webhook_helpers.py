"""Shared by the webhook tests: a programmable receiver on 127.0.0.1, events made through the real
events.record, and a clock the outbox can be moved along (time travel instead of sleeping)."""
import contextlib
import importlib.util
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from sqlalchemy import select

from app.common import utcnow
from app.database import write_transaction
from app.extensions import db
from app.models import DeliveryAttempt
from app.services import events, subscriptions
from app.worker.deliveries import deliver_due
from scripts.tls_receiver import RECEIVER_HOST, TLSServer
from tests.fake_vendors import BackloggedHTTPServer

ROOT = Path(__file__).resolve().parent.parent
LOCAL_RECEIVER_CONFIG = {"WEBHOOK_ALLOW_HTTP": True, "WEBHOOK_ALLOW_PRIVATE_ADDRESSES": True}


def load_script(name: str):
    """A script of scripts/ (not a package) as a module, e.g. load_script("receiver")."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes
    on_connection: int = 1  # 1 for the first request of its connection, 2 for the second (keep-alive) …

    @property
    def event(self) -> dict:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    body: bytes = b"{}"
    stall_after: int = None  # bytes of body written before a 2-second pause
    cut_after: int = None  # bytes of body written before the connection is closed
    drop: bool = False  # close the connection without an answer, as an endpoint whose keep-alive ran out
    early_hints: bool = False  # an interim 103 Early Hints before the answer (and before `delay`)


class Receiver:
    """`with Receiver() as receiver:` serves on 127.0.0.1 until the block ends; `receiver.reply` decides
    the answer to every request (a Reply, or a callable taking the Received). With `certificates`
    (scripts/tls_receiver.py) it serves HTTPS as `receiver.test`, a name the test points at 127.0.0.1."""

    def __init__(self, reply=None, certificates=None):
        self.reply = reply or Reply()
        self.requests = []
        self._lock = threading.Lock()
        self.tls = certificates is not None
        if self.tls:
            self.server = TLSServer(("127.0.0.1", 0), self._handler_class(), certificates)
        else:
            self.server = BackloggedHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"https://{RECEIVER_HOST}:{self.port}/hook" if self.tls else f"http://127.0.0.1:{self.port}/hook"

    @property
    def event_ids(self) -> list:
        with self._lock:
            return [request.headers.get("X-Webhook-Id") for request in self.requests]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
        return self.reply(received) if callable(self.reply) else self.reply

    def _handler_class(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.served = getattr(self, "served", 0) + 1  # one handler per connection
                reply = receiver._answer(Received(self.path, dict(self.headers.items()), body, self.served))
                if reply.drop:
                    self.close_connection = True
                    return
                if reply.early_hints:
                    self.send_response_only(103)
                    self.send_header("Link", "</style.css>; rel=preload; as=style")
                    self.end_headers()
                    self.wfile.flush()
                if reply.delay:
                    time.sleep(reply.delay)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if reply.cut_after is not None:
                    self.wfile.write(reply.body[:reply.cut_after])
                    self.close_connection = True
                    return
                try:
                    self.wfile.write(reply.body[:reply.stall_after])
                    if reply.stall_after is not None:
                        time.sleep(2)
                        self.wfile.write(reply.body[reply.stall_after:])
                except OSError:  # the sender stopped reading a body past its cap
                    self.close_connection = True

            do_GET = do_POST  # the same programmable answers serve as a fake upstream provider

            def log_message(self, *args):
                pass

        return Handler


def drops_every_second_request_of_a_connection(received) -> Reply:
    """An endpoint whose keep-alive ran out as the next try arrived on the connection it had kept open."""
    return Reply(drop=received.on_connection > 1)


class Dripper:
    """An endpoint that answers a byte at a time, each well within the per-read timeout: a status line, then a
    header that never ends, a byte every 0.1 s for 30 s. With `certificates`, over TLS as `receiver.test`."""

    def __init__(self, certificates=None):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.context = None
        if certificates is not None:
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(certificates.cert_file, certificates.key_file)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        port = self.server.getsockname()[1]
        return f"https://{RECEIVER_HOST}:{port}/hook" if self.context else f"http://127.0.0.1:{port}/hook"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.close()

    def _serve(self):
        with contextlib.suppress(OSError):
            connection, _ = self.server.accept()
            if self.context:
                connection = self.context.wrap_socket(connection, server_side=True)
            with connection:
                connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(300):
                    time.sleep(0.1)
                    connection.sendall(b"x")


def assert_cut_off_at_the_timeout(account_id):
    """One delivery to an endpoint that never finishes its answer: a failed try, ended at the 1 s timeout."""
    [event_id] = record_events(account_id)
    began = time.monotonic()
    assert deliver_due() == 1
    took = time.monotonic() - began
    db.session.expire_all()
    [attempt] = db.session.scalars(select(DeliveryAttempt).where(DeliveryAttempt.event_id == event_id)).all()
    assert attempt.status == "failed" and attempt.error.startswith("timeout"), attempt.error
    assert took < 5 and attempt.duration_ms < 2000


def subscribe(account_id, network_id="jane-doe", entity_type="contact"):
    return subscriptions.create(account_id, {"entity_type": entity_type, "network_id": network_id,
                                             "network_url": None, "custom_metadata": {}})


def record_events(account_id, count=1, event_type="contact.position_changed", subscription=None, data=None):
    """Events as monitoring records them: envelope, event row and (when wanted) outbox row in one transaction."""
    subscription = subscription or subscribe(account_id, f"person-{utcnow().timestamp():.6f}".replace(".", "-"))
    with write_transaction() as session:
        config = events.webhook_config_for(session, account_id)
        recorded = [events.record(session, account_id, event_type,
                                  data or {"entity": events.entity_data(subscription),
                                           "changes": {"previous_company": "Acme", "previous_title": "Engineer",
                                                       "current_company": "Acme", "current_title": "CTO"}},
                                  subscription=subscription, config=config)
                    for _ in range(count)]
        ids = [event.id for event in recorded]
    events.notify_new_deliveries()
    return ids


def configure(tenant, url, events_filter=("*",)):
    response = tenant.post("/webhooks/configure", json={"endpoint_url": url, "events": list(events_filter)})
    assert response.status_code in (200, 201), response.json
    return response.json


class Clock:
    """Replaces the outbox's `utcnow`: real time plus an offset that only grows when told."""

    def __init__(self):
        self.offset = timedelta(0)

    def __call__(self):
        return utcnow() + self.offset

    def advance(self, seconds):
        self.offset += timedelta(seconds=seconds)

    def travel_to(self, moment):
        """Move on to `moment` (never back)."""
        self.offset += max(timedelta(0), moment - self())
