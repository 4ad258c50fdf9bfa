"""A local HTTPS receiver for the delivery benchmark and the TLS tests (standard library and the `openssl`
command only): a throw-away CA and a server certificate made at run time, a threaded keep-alive server on
127.0.0.1, and a resolver table that points test names (such as `receiver.test`) at it.

Nothing here changes the service: the service trusts the CA only through WEBHOOK_TEST_CA_BUNDLE and
reaches 127.0.0.1 only with WEBHOOK_TEST_ALLOW_LOOPBACK, both refused outside TESTING.
"""
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

RECEIVER_HOST = "receiver.test"  # .test is reserved (RFC 2606): it never resolves on the internet
CERTIFICATE_DAYS = 2


@dataclass(frozen=True)
class Certificates:
    ca_file: str  # the CA certificate (PEM): what a client trusts
    cert_file: str  # the server's certificate, signed by the CA
    key_file: str


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(directory, host_name=RECEIVER_HOST) -> Certificates:
    """A new CA and a server certificate for `host_name` signed by it, as PEM files in `directory`."""
    directory = Path(directory).resolve()
    key_options = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *key_options, "-keyout", "ca.key", "-out", "ca.pem", "-days", str(CERTIFICATE_DAYS),
             "-subj", "/CN=Entity monitor throw-away test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)
    _openssl("req", *key_options, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={host_name}",
             cwd=directory)
    (directory / "server.ext").write_text(
        f"subjectAltName=DNS:{host_name}\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", str(CERTIFICATE_DAYS), "-extfile", "server.ext", cwd=directory)
    return Certificates(str(directory / "ca.pem"), str(directory / "server.pem"), str(directory / "server.key"))


class TLSServer(ThreadingHTTPServer):
    """A threaded HTTPS server; the handler decides keep-alive (protocol_version "HTTP/1.1")."""
    daemon_threads = True
    request_queue_size = 128  # a whole sender pool connects at once; past the backlog a SYN waits a second

    def __init__(self, address, handler_class, certificates: Certificates):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certificates.cert_file, certificates.key_file)
        self.handshakes = 0  # connections that completed a TLS handshake: with keep-alive, far fewer than requests
        self._count_lock = threading.Lock()
        super().__init__(address, handler_class)

    def finish_request(self, request, client_address):
        """The handshake runs in the connection's own thread, so a slow or refusing client holds up no other."""
        try:
            connection = self.context.wrap_socket(request, server_side=True)
        except OSError:  # the client refused our certificate (what some tests expect) or went away
            return
        with self._count_lock:
            self.handshakes += 1
        with connection:
            super().finish_request(connection, client_address)

    def handle_error(self, request, client_address):
        pass  # a client closing mid-connection is routine here; the tests and the benchmark check what arrived


class StaticResolver:
    """socket.getaddrinfo answering from a table for some names (None: the name does not resolve; a list: several
    addresses, in order) and passing every other name to the real resolver. Install it as socket.getaddrinfo
    (tests: monkeypatch). `slow[name] = seconds` makes the name's lookups take that long, as a resolver that does
    not answer."""

    def __init__(self, real, table=None):
        self.real = real
        self.table = dict(table or {})
        self.slow = {}

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        time.sleep(self.slow.get(host, 0))
        if host not in self.table:
            return self.real(host, port, family, type, proto, flags)
        addresses = self.table[host]
        if addresses is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port or 443, 0, 0)) if ":" in address
                else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port or 443))
                for address in ([addresses] if isinstance(addresses, str) else addresses)]
