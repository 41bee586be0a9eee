"""TLS on the gRPC port (disq.tls): mutual TLS between nodes, server TLS and client
certificates for the SDK, the CLI and the Spark sink.

Certificates are made at test time with the ``openssl`` command: a CA, node certificates for
127.0.0.1/localhost, a client certificate, and a node certificate from another CA. The
3-node cluster is a Lab (config-file nodes: the ``tls-*`` keys); the joining nodes of the
bad-CA test run in flag mode (``--tls-*``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import PROJECT_ROOT, ServerFactory, free_port  # noqa: E402
from eventually import eventually  # noqa: E402

from cluster.lab import Lab  # noqa: E402
from cluster.resp_client import RespClient, info_fields  # noqa: E402
from disq.client import AuthError, Client, UnavailableError  # noqa: E402
from disq.server.cluster_services import MEET_ATTEMPTS  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

CLI = [sys.executable, "-m", "disq.cli"]


# ------------------------------------------------------------------------------ certificates
def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(d: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip


def _make_leaf(d: Path, name: str, ca: str, usage: str) -> None:
    ext = d / f"{name}.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage={usage}\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=d,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", ext.name,
        cwd=d,
    )  # fmt: skip


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca / node / client: the cluster's; other-ca / rogue: a node of another CA."""
    d = tmp_path_factory.mktemp("certs")
    _make_ca(d, "ca")
    _make_leaf(d, "node", "ca", "serverAuth,clientAuth")  # nodes dial each other too
    _make_leaf(d, "client", "ca", "clientAuth")
    _make_ca(d, "other-ca")
    _make_leaf(d, "rogue", "other-ca", "serverAuth,clientAuth")
    return d


@pytest.fixture(scope="module")
def lab3(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    conf = [
        f"tls-cert-file {certs / 'node.pem'}",
        f"tls-key-file {certs / 'node.key'}",
        f"tls-ca-cert-file {certs / 'ca.pem'}",
        "tls-auth-clients yes",
    ]
    with Lab(3, tmp_path_factory.mktemp("tls3"), node_timeout_ms=1500, extra_conf=conf) as lab:
        yield lab


def addr(lab: Lab, i: int) -> str:
    return f"127.0.0.1:{lab.node(i).bus_port}"


def all_addrs(lab: Lab) -> str:
    return ",".join(addr(lab, i) for i in range(lab.n))


def tls_client(certs: Path, addresses: str, **options: Any) -> Client:
    return Client(
        addresses,
        tls_ca=certs / "ca.pem",
        tls_cert=certs / "client.pem",
        tls_key=certs / "client.key",
        **options,
    )


def known_nodes(resp_port: int) -> int:
    with RespClient("127.0.0.1", resp_port) as c:
        return int(info_fields(c.call("CLUSTER", "INFO"))["cluster_known_nodes"])


# ------------------------------------------------------------------------------------- tests
def test_a_tls_cluster_forms(lab3: Lab) -> None:
    for i in range(3):
        eventually(lambda i=i: known_nodes(lab3.node(i).port) == 3, f"node {i} knows 3")


def test_sdk_adds_gets_and_acks_over_tls(lab3: Lab, certs: Path) -> None:
    with tls_client(certs, all_addrs(lab3)) as c:
        job_id = c.add_job("tlsq", b"secret", replicate=2)
        jobs = c.get_jobs("tlsq", timeout_s=5)
        assert [(j.id, j.body) for j in jobs] == [(job_id, b"secret")]
        assert c.ack(job_id) >= 1


def test_clients_without_a_valid_certificate_cannot_read_jobs(lab3: Lab, certs: Path) -> None:
    with tls_client(certs, all_addrs(lab3)) as c:
        c.add_job("guarded", b"x", replicate=2)
    attempts: list[dict[str, Any]] = [
        {"tls_ca": certs / "ca.pem"},  # server TLS only: no client certificate
        {
            "tls_ca": certs / "ca.pem",
            "tls_cert": certs / "rogue.pem",  # a certificate of another CA
            "tls_key": certs / "rogue.key",
        },
        {},  # plaintext
    ]
    for options in attempts:
        with Client(addr(lab3, 0), discover=False, timeout_s=2, **options) as c:
            with pytest.raises((UnavailableError, AuthError)):
                c.get_jobs("guarded", nohang=True)


def test_cli_put_and_get_over_tls(lab3: Lab, certs: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISQ_")}
    env.update(
        PYTHONPATH=str(PROJECT_ROOT),
        DISQ_ADDR=all_addrs(lab3),
        DISQ_TLS_CA=str(certs / "ca.pem"),
        DISQ_TLS_CERT=str(certs / "client.pem"),
        DISQ_TLS_KEY=str(certs / "client.key"),
    )

    def disq(*args: str, **extra: str) -> str:
        r = subprocess.run(
            [*CLI, *args], capture_output=True, env={**env, **extra}, timeout=60, text=True
        )
        assert r.returncode == 0, f"disq {' '.join(args)}: rc {r.returncode}\n{r.stderr}"
        return r.stdout

    job_id = disq("put", "clitls", "hello tls").strip()
    got = json.loads(disq("--json", "get", "clitls", "--timeout", "5"))
    assert [(j["id"], j["body"]) for j in got] == [(job_id, "hello tls")]
    # Flags work as the environment does; without a client certificate the node refuses.
    r = subprocess.run(
        [*CLI, "--tls-cert", "", "--tls-key", "", "--timeout", "2", "qlen", "clitls"],
        capture_output=True,
        env={**env, "DISQ_TLS_CERT": "", "DISQ_TLS_KEY": ""},
        timeout=60,
        text=True,
    )
    assert r.returncode == 1 and "UNAVAILABLE" in r.stderr, r.stderr


def test_a_node_with_a_certificate_of_another_ca_cannot_join(
    certs: Path, server_factory: ServerFactory
) -> None:
    def node(cert: str, *join: str) -> tuple[Any, int, int]:
        resp, bus = free_port(), free_port()
        flags = [
            "--resp-port", str(resp), "--grpc-port", str(bus),
            "--tls-cert", str(certs / f"{cert}.pem"), "--tls-key", str(certs / f"{cert}.key"),
            "--tls-ca", str(certs / ("ca.pem" if cert == "node" else "other-ca.pem")),
        ]  # fmt: skip
        for j in join:
            flags += ["--join", j]
        return server_factory.new(*flags), resp, bus

    _a, a_resp, a_bus = node("node")
    _g, g_resp, _ = node("node", f"127.0.0.1:{a_bus}")
    rogue, _, _ = node("rogue", f"127.0.0.1:{a_bus}")
    # The good node joins (a positive event), through the same door the rogue knocks on.
    eventually(lambda: known_nodes(a_resp) == 2, "the good node joined")
    eventually(lambda: known_nodes(g_resp) == 2, "the good node sees the first")
    # Every join attempt of the rogue ran out (each one logs its failure) ...
    eventually(
        lambda: rogue.log_text().count("peer_oneshot_failed") >= MEET_ATTEMPTS,
        "the rogue's join attempts ran out",
        timeout=60,
    )
    # ... and none got it in.
    assert known_nodes(a_resp) == 2
    assert known_nodes(g_resp) == 2


def test_spark_writes_100_rows_over_tls(lab3: Lab, certs: Path) -> None:
    pytest.importorskip("pyspark")
    from disq.spark import session

    spark = session("disq-tls-tests", master="local[2]")
    try:
        df = spark.range(0, 100, numPartitions=2).selectExpr("concat('row-', id) as body")
        w = df.write.format("disq").mode("append").option("nodes", all_addrs(lab3))
        w = w.option("queue", "sparktls").option("replicate", "2").option("retry", "600")
        w = w.option("tlsCa", str(certs / "ca.pem"))
        w = w.option("tlsCert", str(certs / "client.pem")).option(
            "tlsKey", str(certs / "client.key")
        )
        w.save()
    finally:
        spark.stop()
    bodies: list[bytes] = []
    for i in range(lab3.n):
        with tls_client(certs, addr(lab3, i), discover=False) as c:
            while jobs := c.get_jobs("sparktls", count=1000, nohang=True):
                bodies.extend(j.body for j in jobs)
                c.fast_ack(*(j.id for j in jobs))
    assert sorted(bodies) == sorted(f"row-{i}".encode() for i in range(100))


def test_peer_links_verify_each_other_both_ways(certs: Path) -> None:
    """In process: a node of another CA neither dials in nor is dialled; a good one is."""
    import asyncio

    from disq.server.peer_link import PeerLinks
    from disq.tls import TlsConfig

    def tls(cert: str, ca: str) -> TlsConfig | None:
        return TlsConfig.for_node(certs / f"{cert}.pem", certs / f"{cert}.key", certs / ca)

    from disq.core.messages import GotJob

    async def main() -> None:
        ids = {name: name[0] * 40 for name in ("good", "other", "rogue")}
        got: asyncio.Queue[list[object]] = asyncio.Queue()
        links = {
            "good": PeerLinks(
                ids["good"], lambda s, m: got.put_nowait(m), tls=tls("node", "ca.pem")
            ),
            "other": PeerLinks(ids["other"], lambda s, m: None, tls=tls("node", "ca.pem")),
            "rogue": PeerLinks(ids["rogue"], lambda s, m: None, tls=tls("rogue", "other-ca.pem")),
        }
        for link in links.values():
            await link.start()
        try:
            for src, dst in (("other", "good"), ("rogue", "good"), ("good", "rogue")):
                links[src].set_address(ids[dst], "127.0.0.1", links[dst].port)
            assert await links["other"].wait_link_up(ids["good"], 10)
            assert not await links["rogue"].wait_link_up(ids["good"], 1)
            assert not await links["good"].wait_link_up(ids["rogue"], 1)
            # The job lane runs over TLS with the same certificates: job messages take it.
            assert links["other"].stats()["links_lane"] == 1
            links["other"].send(ids["good"], GotJob("D-over-the-lane"))
            assert await asyncio.wait_for(got.get(), 10) == [GotJob("D-over-the-lane")]
            assert links["good"].stats()["lane_frames_received"] == 1
            # The port acknowledged the hello over TLS (never on the raw socket mid-handshake).
            lane = links["other"]._peers[ids["good"]].lane
            assert lane is not None
            async with asyncio.timeout(5):  # the byte's arrival has no event of its own
                while not lane.acked:
                    await asyncio.sleep(0.01)
        finally:
            for link in links.values():
                await link.close()

    asyncio.run(main())


def test_the_tls_lane_port_closes_a_silent_connection_after_the_hello_timer(
    certs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hello timer runs from accept, the TLS handshake included: a connection that
    never starts its handshake, and one that finishes it and says nothing, are both closed
    after HELLO_TIMEOUT_S, not after asyncio's 60 s handshake timeout; while they wait they
    count among the port's connections without a hello (the cap)."""
    import asyncio
    import ssl

    from disq.server import job_lane
    from disq.server.peer_link import PeerLinks
    from disq.tls import TlsConfig

    monkeypatch.setattr(job_lane, "HELLO_TIMEOUT_S", 0.3)
    tls = TlsConfig.for_node(certs / "node.pem", certs / "node.key", certs / "ca.pem")

    async def main() -> None:
        links = PeerLinks("a" * 40, lambda s, m: None, tls=tls)
        await links.start()
        try:
            port = links.lane_port
            assert port
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.sleep(0)  # the accept
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the lane
            writer.close()
            # A TLS client that completes the handshake (with the cluster's certificate) and
            # then says nothing.
            ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
            ctx.load_cert_chain(certs / "node.pem", certs / "node.key")
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            assert links.stats()["lane_pending"] == 1
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            # The client may read the close before the server's side of it is done: poll,
            # bounded (the release has no event of its own).
            async with asyncio.timeout(5):
                while links.stats()["lane_pending"]:
                    await asyncio.sleep(0.01)
            assert links.stats()["lane_pending_closed_timeout"] == 2
        finally:
            await links.close()

    asyncio.run(main())


def test_kombu_transport_over_tls_with_celerys_broker_use_ssl(lab3: Lab, certs: Path) -> None:
    import kombu
    from kombu.exceptions import OperationalError

    ssl = {
        "ca_certs": str(certs / "ca.pem"),
        "certfile": str(certs / "client.pem"),
        "keyfile": str(certs / "client.key"),
    }
    with kombu.Connection(f"disq://{all_addrs(lab3)}", ssl=ssl) as conn:
        q = conn.SimpleQueue("tls-kombu")
        q.put({"secret": 1})
        m = q.get(timeout=5)
        assert m.payload == {"secret": 1}
        m.ack()
        q.close()
    # The same URL with no certificate: the nodes refuse it, a kombu error says so.
    plain = kombu.Connection(f"disq://{all_addrs(lab3)}?connect_timeout_s=1")
    with pytest.raises(OperationalError):
        plain.ensure_connection(max_retries=1)
    plain.release()
