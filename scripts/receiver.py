#!/usr/bin/env python3
"""A small webhook receiver to see events arrive, and a reference for verifying them (standard library only).

    python3 scripts/receiver.py --secret whsec_...            # or WEBHOOK_SECRET=whsec_... in the environment
    python3 scripts/receiver.py --secret whsec_new --secret whsec_old --port 9000

For every POST it checks, against the raw body bytes exactly as received:
  * X-Webhook-Timestamp is milliseconds since the epoch, no older than 5 minutes (nor 5 minutes ahead);
  * X-Webhook-Signature (or, during a secret rotation, X-Webhook-Signature-Previous) equals the hex
    HMAC-SHA256 of "<timestamp>.<raw body>" keyed by one of the given secrets;
then prints the event once: a repeated event id (deliveries are at least once) is acknowledged, not printed.
Answers 200 when accepted or duplicate, 400 for a stale or malformed request, 401 for a bad signature.
"""
import argparse
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_MS = 5 * 60 * 1000
REMEMBERED_IDS = 100_000
MAX_BODY_BYTES = 1024 * 1024


class Rejected(Exception):
    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def expected_signature(secret: str, timestamp: str, raw_body: bytes) -> str:
    return hmac.new(secret.encode(), timestamp.encode() + b"." + raw_body, hashlib.sha256).hexdigest()


def _matches(signature, expected: str) -> bool:
    """In constant time, as bytes: compare_digest raises TypeError for text beyond ASCII (a header's `é`)."""
    return bool(signature) and hmac.compare_digest(signature.encode(), expected.encode())


def verify(headers, raw_body: bytes, secrets, now_ms=None) -> dict:
    """The parsed event when the request is authentic and fresh; raises Rejected otherwise."""
    timestamp = headers.get("X-Webhook-Timestamp", "")
    # str.isdigit takes `²`, which int() refuses, as it does more than 4,300 digits: milliseconds have 13
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 20):
        raise Rejected(400, "missing or malformed X-Webhook-Timestamp")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if abs(now_ms - int(timestamp)) > TOLERANCE_MS:
        raise Rejected(400, "timestamp outside the 5-minute tolerance (replayed or clock skew)")
    offered = [headers.get(name) for name in ("X-Webhook-Signature", "X-Webhook-Signature-Previous")]
    if not any(_matches(signature, expected_signature(secret, timestamp, raw_body))
               for signature in offered for secret in secrets):
        raise Rejected(401, "signature does not match")
    try:
        event = json.loads(raw_body)
    except ValueError:
        raise Rejected(400, "body is not JSON")
    if not (isinstance(event, dict) and isinstance(event.get("id"), str)):  # a list went on to event.get: no answer
        raise Rejected(400, "body is not an event (a JSON object with an id)")
    return event


class SeenIds:
    """The most recent event ids, to drop duplicates in bounded memory."""

    def __init__(self, capacity=REMEMBERED_IDS):
        self.capacity = capacity
        self._ids = OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, event_id) -> bool:
        with self._lock:
            if event_id in self._ids:
                return False
            self._ids[event_id] = True
            if len(self._ids) > self.capacity:
                self._ids.popitem(last=False)
            return True


def handler_for(secrets, seen, out):
    writing = threading.Lock()  # one line an event: print() from the threads of concurrent deliveries interleaved

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes

        def do_POST(self):
            length = self.headers.get("Content-Length") or "0"
            # int() raised on `abc` or `²` (a traceback, no answer); a negative one read to the close
            if not (length.isascii() and length.isdigit()):
                self.close_connection = True
                return self._answer(400, "malformed Content-Length")
            length = int(length)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                return self._answer(413, "body too large")
            raw_body = self.rfile.read(length)
            try:
                event = verify(self.headers, raw_body, secrets)
            except Rejected as rejected:
                print(f"rejected ({rejected.status}): {rejected.reason}", file=sys.stderr, flush=True)
                return self._answer(rejected.status, rejected.reason)
            if seen.first_time(event.get("id")):
                line = json.dumps({"attempt": self.headers.get("X-Webhook-Attempt"), **event}, ensure_ascii=False)
                with writing:
                    out.write(line + "\n")
                    out.flush()
            self._answer(200, "ok")

        def _answer(self, status, message):
            body = json.dumps({"status": message}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Handler


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # the service sends with up to WEBHOOK_WORKERS connections and more: 5 refused some


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--secret", action="append", help="webhook secret (repeat during a rotation); "
                                                          "default: $WEBHOOK_SECRET")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args(argv)
    secrets = args.secret or ([os.environ["WEBHOOK_SECRET"]] if os.environ.get("WEBHOOK_SECRET") else [])
    if not secrets:
        parser.error("give --secret whsec_... or set WEBHOOK_SECRET")
    try:
        server = Server((args.host, args.port), handler_for(secrets, SeenIds(), sys.stdout))
    except OSError as error:  # a port in use, a host that does not resolve: one line, not a traceback
        parser.exit(1, f"{parser.prog}: cannot listen on {args.host}:{args.port}: {error}\n")
    print(f"listening on http://{args.host}:{server.server_address[1]}/ (any path)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
