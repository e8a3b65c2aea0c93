"""WireTransport against real servers on loopback: keep-alive, bodies cut short, trickled headers, stale
connections, chunked bodies, requests with a body, TLS with and without a trusted certificate."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from crawler_ops.hooks.http import deadline
from crawler_ops.hooks.source.wire import READ_PIECE, WireTransport

Reply = Callable[[socket.socket, bytes], bool]  # writes the answer to a request; True: keep the connection


class RawServer:
    """An HTTP server on loopback written at the socket level, so a test can misbehave exactly: ``reply`` answers
    each request (its head as received) and says whether to keep the connection. ``accepted`` counts connections,
    ``requests`` keeps each request's head and body."""

    def __init__(self, reply: Reply, context: ssl.SSLContext | None = None) -> None:
        self.reply, self.context = reply, context
        self.accepted = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self.handle, args=(sock,), daemon=True).start()

    def handle(self, sock: socket.socket) -> None:
        try:
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_side=True)
            reader = sock.makefile("rb")
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
                )
                self.requests.append((head, reader.read(length)))
                if not self.reply(sock, head):
                    return
        except (OSError, ssl.SSLError):
            return
        finally:
            sock.close()

    def close(self) -> None:
        self.listener.close()


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(reply: Reply, context: ssl.SSLContext | None = None) -> RawServer:
        servers.append(RawServer(reply, context))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def client(server: RawServer, scheme: str = "http", verify: bool | ssl.SSLContext = False) -> httpx.Client:
    base = f"{scheme}://127.0.0.1:{server.port}"
    return httpx.Client(base_url=base, transport=WireTransport(verify, max_idle=4), timeout=5)


def test_requests_reuse_one_connection_and_read_bodies_larger_than_a_read(serve) -> None:
    body = bytes(range(256)) * (3 * READ_PIECE // 256 + 7)
    server = serve(lambda sock, head: sock.sendall(answer(body, "X-Seen: café".encode().decode("latin-1"))) is None)

    with client(server) as http:
        answers = [http.get(f"/page?n={n}") for n in range(3)]

    assert [(a.status_code, a.content) for a in answers] == [(200, body)] * 3
    assert (b"X-Seen", "café".encode()) in answers[0].headers.raw  # the header's bytes as sent
    assert server.accepted == 1
    heads = [head.decode("latin-1").lower() for head, _ in server.requests]
    assert [h.count("host:") for h in heads] == [1, 1, 1]
    assert [h.count("accept-encoding:") for h in heads] == [1, 1, 1]
    assert heads[2].startswith("get /page?n=2 http/1.1")


def test_a_request_body_is_sent_with_its_length(serve) -> None:
    server = serve(lambda sock, head: sock.sendall(answer(b"{}")) is None)

    with client(server) as http:
        http.post("/feed", content=b'{"after": "x"}')

    head, body = server.requests[0]
    assert body == b'{"after": "x"}'
    assert b"content-length: 14" in head.lower()


def test_a_body_cut_short_is_a_protocol_error_and_its_connection_is_not_kept(serve) -> None:
    def cut(sock: socket.socket, head: bytes) -> bool:
        sock.sendall(answer(b"x" * 1000)[:-600])
        return False  # and close

    server = serve(cut)
    with client(server) as http, pytest.raises(httpx.RemoteProtocolError, match="600 bytes before the end"):
        http.get("/page")
    assert http._transport.idle.get(("http", "127.0.0.1", server.port), []) == []


def test_headers_trickled_a_byte_at_a_time_fail_by_the_deadline(serve) -> None:
    def trickle(sock: socket.socket, head: bytes) -> bool:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
            sock.sendall(bytes([byte]))
            time.sleep(0.05)
        return False

    server = serve(trickle)
    started = time.monotonic()
    with client(server) as http, deadline(0.5), pytest.raises(httpx.ReadTimeout):
        http.get("/page")  # each read comes well within the 5 s read timeout
    assert time.monotonic() - started < 1.5


def test_a_connection_the_server_closed_while_idle_is_not_used_again(serve) -> None:
    def once(sock: socket.socket, head: bytes) -> bool:
        sock.sendall(answer(b"ok"))  # keep-alive by default in HTTP/1.1, but closed at once
        return False

    server = serve(once)
    with client(server) as http:
        first = http.get("/a")
        time.sleep(0.1)  # the server's close has arrived
        second = http.get("/b")

    assert (first.content, second.content, server.accepted) == (b"ok", b"ok", 2)


def test_an_answer_saying_connection_close_is_read_to_its_end_and_not_kept(serve) -> None:
    def closing(sock: socket.socket, head: bytes) -> bool:
        sock.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"y" * 5000)
        return False

    server = serve(closing)
    with client(server) as http:
        assert http.get("/a").content == b"y" * 5000
        assert http.get("/b").content == b"y" * 5000
    assert server.accepted == 2


def test_a_chunked_body_is_read_whole(serve) -> None:
    def chunked(sock: socket.socket, head: bytes) -> bool:
        sock.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        return True

    server = serve(chunked)
    with client(server) as http:
        assert [http.get("/a").content, http.get("/b").content] == [b"hello world"] * 2
    assert server.accepted == 1


def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with httpx.Client(transport=WireTransport(False, 1)) as http, pytest.raises(httpx.ConnectError):
        http.get(f"http://127.0.0.1:{port}/")


def test_a_malformed_status_line_is_a_protocol_error(serve) -> None:
    server = serve(lambda sock, head: sock.sendall(b"SPDY/9 what\r\n\r\n") is None)
    with client(server) as http, pytest.raises(httpx.RemoteProtocolError):
        http.get("/a")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crawler_ops test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "cert.pem", folder / "key.pem"


def tls_server(serve: Callable[..., RawServer], certificate: tuple[Path, Path], reply: Reply) -> RawServer:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return serve(reply, context)


def test_https_to_a_trusted_certificate_keeps_its_connection(serve, certificate) -> None:
    server = tls_server(serve, certificate, lambda sock, head: sock.sendall(answer(b"secret" * 10_000)) is None)
    trusted = ssl.create_default_context(cafile=str(certificate[0]))

    with client(server, "https", trusted) as http:
        assert [http.get("/a").content, http.get("/b").content] == [b"secret" * 10_000] * 2
    assert server.accepted == 1


def test_https_to_an_unknown_certificate_fails_to_connect(serve, certificate) -> None:
    server = tls_server(serve, certificate, lambda sock, head: sock.sendall(answer(b"secret")) is None)

    with client(server, "https", True) as http, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        http.get("/a")


def test_a_tls_handshake_that_never_comes_fails_by_the_deadline(serve) -> None:
    server = serve(lambda sock, head: True)  # never answers: the server does not speak TLS and waits for a request
    started = time.monotonic()
    with client(server, "https", True) as http, deadline(0.5), pytest.raises(httpx.ConnectTimeout):
        http.get("/a")
    assert time.monotonic() - started < 1.5
