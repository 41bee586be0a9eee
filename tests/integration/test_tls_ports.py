"""TLS on the RESP and beanstalk ports (disq.server.tls_ports): separate ports, as Redis's
``tls-port``, with the node's certificate and key; client certificates checked against the CA
when client authentication is on.

Certificates are made at test time with the ``cryptography`` package: a CA, a server
certificate for 127.0.0.1/localhost and a client certificate, all signed by the CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cryptography", reason="needs the cryptography package (the dev extra)")

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory, ServerProcess, free_port  # noqa: E402
from eventually import eventually  # noqa: E402
from wire import Conn  # noqa: E402

from cluster.nodeproc import run_node  # noqa: E402
from cluster.resp_client import ReplyParser, RespClient, encode_command  # noqa: E402

TIMEOUT = 10.0


# ------------------------------------------------------------------------------ certificates
def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
    )
    if issuer is None:  # the CA
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        b = b.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        b = b.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        assert usage is not None
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        b = b.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        b = b.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    return b.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.pem; server.pem/server.key (127.0.0.1, localhost); client.pem/client.key."""
    d = tmp_path_factory.mktemp("tlsports")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("disq test CA", ca_key, None, ca_key, None)
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name, usage in (
        ("server", ExtendedKeyUsageOID.SERVER_AUTH),
        ("client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert(name, key, ca, ca_key, usage)
        (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(d / f"{name}.key", key)
    return d


# ------------------------------------------------------------------------------ nodes
class TlsNode:
    def __init__(self, srv: ServerProcess, resp: int, resp_tls: int, beanstalk_tls: int) -> None:
        self.srv, self.resp, self.resp_tls, self.beanstalk_tls = srv, resp, resp_tls, beanstalk_tls


def _start(factory: ServerFactory, certs: Path, *auth: str) -> TlsNode:
    resp, resp_tls, beanstalk_tls = free_port(), free_port(), free_port()
    srv = factory.new(
        "--resp-port", str(resp),
        "--resp-tls-port", str(resp_tls),
        "--beanstalk-tls-port", str(beanstalk_tls),
        "--tls-cert", str(certs / "server.pem"),
        "--tls-key", str(certs / "server.key"),
        *auth,
    )  # fmt: skip
    return TlsNode(srv, resp, resp_tls, beanstalk_tls)


@pytest.fixture(scope="module")
def factory(module_factory: ServerFactory) -> ServerFactory:
    if module_factory.kind != "disq":
        pytest.skip("TLS ports are disq's")
    return module_factory


@pytest.fixture(scope="module")
def node(factory: ServerFactory, certs: Path) -> TlsNode:
    """Both TLS ports, no client authentication."""
    return _start(factory, certs)


@pytest.fixture(scope="module")
def auth_node(factory: ServerFactory, certs: Path) -> TlsNode:
    """Both TLS ports; client certificates required (checked against the CA)."""
    return _start(factory, certs, "--tls-ca", str(certs / "ca.pem"), "--tls-client-auth")


def _client_ctx(certs: Path, *, cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if cert:
        ctx.load_cert_chain(str(certs / "client.pem"), str(certs / "client.key"))
    return ctx


def _tls_conn(port: int, ctx: ssl.SSLContext) -> Conn:
    """A wire.Conn whose socket is wrapped in TLS (handshake done)."""
    conn = Conn(port, timeout=TIMEOUT)
    conn.sock = ctx.wrap_socket(conn.sock, server_hostname="127.0.0.1")
    return conn


def _resp_call(sock: ssl.SSLSocket, *args: str | bytes) -> object:
    sock.sendall(encode_command(args))
    parser = ReplyParser()
    while (reply := parser.get()) is ReplyParser.NOTHING:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before a reply"
        parser.feed(chunk)
    return reply


def _beanstalk_round(conn: Conn) -> None:
    conn.send(b"use tls\r\n")
    conn.expect(b"USING tls\r\n")
    conn.send(b"watch tls\r\nignore default\r\n")
    conn.expect(b"WATCHING 2\r\nWATCHING 1\r\n")
    conn.send(b"put 0 0 60 5\r\nhello\r\n")
    line = conn.read_line()
    assert line.startswith(b"INSERTED ") and line.endswith(b"\r\n"), line
    job = int(line[len(b"INSERTED ") : -2])
    conn.send(b"reserve-with-timeout 0\r\n")
    conn.expect(b"RESERVED %d 5\r\nhello\r\n" % job)
    conn.send(b"delete %d\r\n" % job)
    conn.expect(b"DELETED\r\n")


# ------------------------------------------------------------------------------ tests
def test_resp_over_tls_with_redis_cli(node: TlsNode, certs: Path) -> None:
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli not installed (scripts/ensure_redis_cli.sh)")
    helptext = subprocess.run([cli, "--help"], capture_output=True, text=True, timeout=10)
    if "--tls" not in helptext.stdout + helptext.stderr:
        pytest.skip("this redis-cli is built without TLS (checked over Python's ssl below)")
    base = [cli, "--tls", "--cacert", str(certs / "ca.pem"), "-h", "127.0.0.1"]
    base += ["-p", str(node.resp_tls)]

    def run(*args: str) -> str:
        out = subprocess.run([*base, *args], capture_output=True, text=True, timeout=TIMEOUT)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert run("PING") == "PONG"
    job_id = run("ADDJOB", "tlsq", "over-tls", "0")
    assert job_id.startswith("D-"), job_id
    assert run("GETJOB", "NOHANG", "FROM", "tlsq").splitlines() == ["tlsq", job_id, "over-tls"]
    assert run("ACKJOB", job_id) == "1"


def test_resp_over_python_ssl(node: TlsNode, certs: Path) -> None:
    raw = socket.create_connection(("127.0.0.1", node.resp_tls), timeout=TIMEOUT)
    with _client_ctx(certs).wrap_socket(raw, server_hostname="localhost") as sock:
        assert _resp_call(sock, "PING") == "PONG"
        job_id = _resp_call(sock, "ADDJOB", "pyq", "body", "0")
        assert isinstance(job_id, str) and job_id.startswith("D-")  # a status reply
        got = _resp_call(sock, "GETJOB", "NOHANG", "FROM", "pyq")
        assert got == [[b"pyq", job_id.encode(), b"body"]]
        assert _resp_call(sock, "ACKJOB", job_id) == 1


def test_beanstalk_over_tls(node: TlsNode, certs: Path) -> None:
    with _tls_conn(node.beanstalk_tls, _client_ctx(certs)) as conn:
        _beanstalk_round(conn)


def test_plaintext_client_on_tls_ports_is_dropped(node: TlsNode, certs: Path) -> None:
    for port, hello in ((node.beanstalk_tls, b"stats\r\n"), (node.resp_tls, b"PING\r\n")):
        with Conn(port, timeout=TIMEOUT) as conn:
            conn.send(hello)
            conn.expect_closed()
    # The node lives on: its plaintext ports and its TLS ports still serve.
    assert node.srv.proc is not None and node.srv.proc.poll() is None
    with node.srv.connect() as conn:
        _beanstalk_round(conn)
    with RespClient("127.0.0.1", node.resp, timeout=TIMEOUT) as resp:
        assert eventually(lambda: resp.call("PING") == "PONG", "PING on the plaintext port")
    with _tls_conn(node.beanstalk_tls, _client_ctx(certs)) as conn:
        _beanstalk_round(conn)


def test_client_auth_refuses_a_client_without_certificate(auth_node: TlsNode, certs: Path) -> None:
    for port in (auth_node.beanstalk_tls, auth_node.resp_tls):
        # TLS 1.2: the server's refusal ends the handshake itself.
        ctx12 = _client_ctx(certs)
        ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
        raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            ctx12.wrap_socket(raw, server_hostname="localhost").close()
        raw.close()
        # TLS 1.3: the client may think it is done; the server's alert (or a close) is what
        # the first read gets, never a reply.
        raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        try:
            sock = _client_ctx(certs).wrap_socket(raw, server_hostname="localhost")
            sock.sendall(b"PING\r\n" if port == auth_node.resp_tls else b"stats\r\n")
            assert sock.recv(4096) == b""
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass
        finally:
            raw.close()
    # A client with a certificate signed by the CA gets in.
    with _tls_conn(auth_node.beanstalk_tls, _client_ctx(certs, cert=True)) as conn:
        _beanstalk_round(conn)
    raw = socket.create_connection(("127.0.0.1", auth_node.resp_tls), timeout=TIMEOUT)
    with _client_ctx(certs, cert=True).wrap_socket(raw, server_hostname="localhost") as sock:
        assert _resp_call(sock, "PING") == "PONG"


def test_tls_ports_need_a_certificate(tmp_path: Path) -> None:
    out = run_node(
        "--in-memory", "-p", str(free_port()), "--beanstalk-tls-port", str(free_port()),
        timeout=30,
    )  # fmt: skip
    assert out.returncode == 1
    assert "--tls-cert" in out.stderr


def test_tls_client_that_stops_reading_then_vanishes_releases_its_job(
    node: TlsNode, certs: Path
) -> None:
    """Flow control over an SSL transport: a TLS client that pipelines big replies without
    reading them gets its reading paused (disq.server.flow); when it then goes away, the node
    notices (the SSL transport's EOF, or the hang-up poll of the socket underneath) and its
    reserved job is ready again."""
    with node.srv.connect() as c:
        c.send(b"use flow\r\n")
        c.expect(b"USING flow\r\n")
        job = c.put(b"p" * 65535, ttr=600)
    conn = _tls_conn(node.beanstalk_tls, _client_ctx(certs))
    conn.send(b"watch flow\r\nreserve-with-timeout 0\r\n")
    conn.expect(b"WATCHING 2\r\nRESERVED %d 65535\r\n" % job)
    conn.read_exact(65537)
    conn.sock.settimeout(0.5)
    stuck, sent = False, 0
    batch = b"peek %d\r\n" % job * 1024
    try:
        while sent < 256 << 20:  # 64 KiB replies, never read: the node stops reading us
            conn.sock.sendall(batch)
            sent += len(batch)
    except (TimeoutError, ssl.SSLError, OSError):
        stuck = True
    assert stuck, "the node kept reading a client that reads none of its replies"
    with node.srv.connect() as c:
        assert c.stats_job(job)["state"] == "reserved"
        conn.sock.close()  # no close_notify: the TCP connection just ends
        eventually(lambda: c.stats_job(job)["state"] == "ready", "the job to be released")
        c.send(b"delete %d\r\n" % job)
        c.expect(b"DELETED\r\n")


def test_config_file_keys(server_factory: ServerFactory, certs: Path, tmp_path: Path) -> None:
    """Disque-style config: ``tls-port`` (RESP, Redis's name) and ``beanstalk-tls-port``."""
    resp_tls, beanstalk_tls = free_port(), free_port()
    conf = tmp_path / "disque.conf"
    conf.write_text(
        f"port {free_port()}\ngrpc-port {free_port()}\nmetrics-port 0\ndir {tmp_path}\n"
        f"tls-port {resp_tls}\nbeanstalk-tls-port {beanstalk_tls}\n"
        f"tls-cert-file {certs / 'server.pem'}\ntls-key-file {certs / 'server.key'}\n"
        f"tls-ca-cert-file {certs / 'ca.pem'}\ntls-auth-clients yes\n"
    )
    ctx = _client_ctx(certs, cert=True)

    def ping() -> bool:  # PING on the config file's tls-port
        raw = socket.create_connection(("127.0.0.1", resp_tls), timeout=TIMEOUT)
        with ctx.wrap_socket(raw, server_hostname="localhost") as sock:
            return _resp_call(sock, "PING") == "PONG"

    server_factory.node(str(conf), ready=ping, log_path=tmp_path / "node.log")
    with _tls_conn(beanstalk_tls, ctx) as conn:
        _beanstalk_round(conn)
