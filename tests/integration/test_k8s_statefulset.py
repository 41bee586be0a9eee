"""k8s/statefulset.yaml run for real, as far as a machine without Kubernetes can.

The pod template's command, args and env are read from the manifest (nothing copied by
hand). Each pod gets a loopback address of its own (Linux routes all of 127/8 to lo):
disq-N is 127.0.0.(N+2), which stands for its pod IP ($(POD_IP), the advertised address;
the manifest's 0.0.0.0 listen address becomes it too, as the pods share one network here) and
for its DNS name disq-N.disq-peers.<ns>.svc.cluster.local in every --join; its /data volume is a
temporary directory. Readiness is the manifest's probe: grpc.health.v1.Health on the gRPC
port.

Then a producer (ADDJOB REPLICATE 2, round robin over the pods as the client Service would)
and a consumer (GETJOB + ACKJOB) run through a rolling restart in StatefulSet order
(disq-2, disq-1, disq-0: SIGTERM, the drain, exit, start again on the same data dir, ready,
back in the cluster). At the end every acknowledged job must have been delivered. Failed adds
and the longest gap between successful adds are printed, not asserted (they are the
numbers docs/benchmarks.md reports); adds must succeed again once each pod is back.
"""

from __future__ import annotations

import re
import signal
import socket
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from conftest import ServerFactory  # noqa: E402
from eventually import eventually  # noqa: E402

from cluster.nodeproc import NodeProcess  # noqa: E402
from cluster.resp_client import RespClient, RespError, info_fields  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs 127/8 on lo")

NAMESPACE = "disq-test"
QUEUE = "k8s-roll"
DRAIN_EXIT_S = 35.0  # SIGTERM to exit: the drain is bounded by --drain-timeout-s (20)


def pod_ip(ordinal: int) -> str:
    return f"127.0.0.{ordinal + 2}"


def statefulset() -> dict[str, Any]:
    (sts,) = [d for d in yaml.safe_load_all((ROOT / "k8s" / "statefulset.yaml").read_text()) if d]
    return sts


@dataclass
class Pod:
    """One pod of the StatefulSet as a local process: the manifest's command line with the
    downward API and the cluster DNS resolved to this machine. ``node`` starts it (without
    waiting: readiness is the manifest's probe, :func:`ready`)."""

    ordinal: int
    node: NodeProcess
    ports: dict[str, int]
    exits: list[int] = field(default_factory=list)

    @property
    def ip(self) -> str:
        return pod_ip(self.ordinal)

    def sigterm_and_wait(self) -> int:
        self.node.signal(signal.SIGTERM)
        rc = self.node.wait(timeout=DRAIN_EXIT_S)
        self.exits.append(rc)
        return rc

    def resp(self, timeout: float = 2.0) -> RespClient:
        return RespClient(self.ip, self.ports["resp"], timeout=timeout)

    def log_tail(self) -> str:
        return self.node.log_text()[-3000:]


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args (unknown names stay as written)."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), text)


def pod_env(container: dict[str, Any], ordinal: int) -> dict[str, str]:
    downward = {
        "metadata.name": f"disq-{ordinal}",
        "metadata.namespace": NAMESPACE,
        "status.podIP": pod_ip(ordinal),
    }
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in downward, f"env {e['name']}: no local stand-in for {path}"
            env[e["name"]] = downward[path]
    return env


PEER_DNS = re.compile(r"\bdisq-(\d+)\.disq-peers(?:\.[A-Za-z0-9.-]+)?(?=:\d+$)")


def make_pods(base: Path) -> list[Pod]:
    sts = statefulset()
    spec = sts["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    (claim,) = spec["volumeClaimTemplates"]
    mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}[
        claim["metadata"]["name"]
    ]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    binary = Path(sys.executable).parent / container["command"][0]  # the venv's disq-node
    pods = []
    for i in range(spec["replicas"]):
        data_dir = base / f"disq-{i}"
        data_dir.mkdir()
        env = pod_env(container, i)
        args = [expand(a, env) for a in container["args"]]
        args = [PEER_DNS.sub(lambda m: pod_ip(int(m.group(1))), a) for a in args]
        args = [str(data_dir) + a[len(mount) :] if a.startswith(mount) else a for a in args]
        # The pods share this machine's ports: each binds its own address, not every one.
        args = [pod_ip(i) if a == "0.0.0.0" else a for a in args]
        node = NodeProcess(
            args,
            cmd=[str(binary)],
            cwd=data_dir,
            env=env,
            log_path=base / f"disq-{i}.log",
            name=f"disq-{i}",
            mark_starts=True,
        )
        pods.append(Pod(i, node, ports))
    return pods


def bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the node: TIME-WAIT is fine
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def ready(pod: Pod) -> bool:
    """The readinessProbe: grpc.health.v1.Health/Check on the gRPC port says SERVING."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"{pod.ip}:{pod.ports['grpc']}") as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=1.0
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def known_nodes(pod: Pod) -> int:
    with pod.resp() as c:
        return int(info_fields(c.call("CLUSTER", "INFO"))["cluster_known_nodes"])


@pytest.fixture
def pods(server_factory: ServerFactory, tmp_path: Path) -> list[Pod]:
    """The StatefulSet's pods, started side by side (the factory kills them at teardown)."""
    pods = make_pods(tmp_path)
    busy = [(p.ip, port) for p in pods for port in p.ports.values() if not bindable(p.ip, port)]
    if busy:
        pytest.skip(f"ports of the manifest in use on this machine: {busy}")
    for p in pods:
        server_factory.add(p.node, start=False).spawn()
    return pods


@dataclass
class Traffic:
    """The producer's and the consumer's records."""

    acked: dict[str, float] = field(default_factory=dict)  # id -> when ADDJOB answered
    delivered: set[str] = field(default_factory=set)
    failed_adds: int = 0
    longest_gap_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def producer(pods: list[Pod], t: Traffic, stop: threading.Event) -> None:
    clients = [p.resp() for p in pods]
    last_ok = time.monotonic()
    n = 0
    while not stop.is_set():
        c = clients[n % len(clients)]
        n += 1
        try:
            job_id = c.call("ADDJOB", QUEUE, f"job-{n}", 5000, "REPLICATE", 2, "RETRY", 5)
        except (OSError, RespError) as exc:
            c.close()
            with t.lock:
                t.failed_adds += 1
                t.errors.append(f"add: {exc}")
            continue
        now = time.monotonic()
        with t.lock:
            t.acked[job_id.decode() if isinstance(job_id, bytes) else str(job_id)] = now
            t.longest_gap_s = max(t.longest_gap_s, now - last_ok)
        last_ok = now
        stop.wait(0.01)  # pacing: about 100 adds/s
    for c in clients:
        c.close()


def consumer(pods: list[Pod], t: Traffic, stop: threading.Event) -> None:
    clients = [p.resp(timeout=3.0) for p in pods]
    n = 0
    while not stop.is_set():
        c = clients[n % len(clients)]
        n += 1
        try:
            got = c.call("GETJOB", "TIMEOUT", 200, "COUNT", 50, "FROM", QUEUE)
            if not got:
                continue
            ids = [j[1].decode() if isinstance(j[1], bytes) else str(j[1]) for j in got]
            # Delivered once GETJOB answered: an ACKJOB whose answer a draining node cut off
            # may still have acked them there (so they never come back).
            with t.lock:
                t.delivered.update(ids)
            c.call("ACKJOB", *ids)
        except (OSError, RespError) as exc:
            c.close()
            with t.lock:
                t.errors.append(f"get/ack: {exc}")
            continue
    for c in clients:
        c.close()


def wait_in_cluster(pods: list[Pod], what: str) -> None:
    for p in pods:
        eventually(lambda p=p: ready(p), f"{what}: disq-{p.ordinal} ready (gRPC health)", 60)
    for p in pods:
        eventually(
            lambda p=p: known_nodes(p) == len(pods), f"{what}: disq-{p.ordinal} knows all", 60
        )


def add_on(pod: Pod) -> bool:
    with pod.resp(timeout=5.0) as c:
        return bool(c.call("ADDJOB", "k8s-probe", "x", 5000, "REPLICATE", 2))


def test_statefulset_rolling_restart_loses_no_acknowledged_job(pods: list[Pod]) -> None:
    try:
        wait_in_cluster(pods, "first start")
    except AssertionError:
        print("\n".join(p.log_tail() for p in pods))
        raise
    for p in pods:  # what the prometheus.io annotations point at
        ann = statefulset()["spec"]["template"]["metadata"]["annotations"]
        url = f"http://{p.ip}:{ann['prometheus.io/port']}{ann['prometheus.io/path']}"
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.status == 200 and b"# TYPE" in r.read(), url

    t = Traffic()
    stop_adds, stop_gets = threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=producer, args=(pods, t, stop_adds), daemon=True),
        threading.Thread(target=consumer, args=(pods, t, stop_gets), daemon=True),
    ]
    for th in threads:
        th.start()
    started = time.monotonic()
    try:
        eventually(lambda: len(t.acked) >= 100, "100 adds before the roll")
        for p in sorted(pods, key=lambda p: -p.ordinal):  # RollingUpdate: highest first
            rc = p.sigterm_and_wait()
            assert rc == 0, f"disq-{p.ordinal} exit {rc}\n{p.log_tail()}"
            p.node.spawn()
            wait_in_cluster(pods, f"after restarting disq-{p.ordinal}")
            eventually(lambda p=p: add_on(p), f"an ADDJOB REPLICATE 2 on disq-{p.ordinal}")
            with t.lock:
                before = len(t.acked)
            eventually(
                lambda before=before: len(t.acked) >= before + 20,
                f"the producer adds again after disq-{p.ordinal} is back",
            )
    finally:
        stop_adds.set()
        threads[0].join(timeout=30)
    roll_s = time.monotonic() - started
    try:
        eventually(
            lambda: set(t.acked) <= t.delivered,
            "every acknowledged job delivered",
            timeout=120,
        )
    finally:
        stop_gets.set()
        threads[1].join(timeout=30)
        lost = sorted(set(t.acked) - t.delivered)
        print(
            f"\nk8s rolling restart: {len(t.acked)} adds acknowledged, "
            f"{t.failed_adds} failed adds, longest gap between adds {t.longest_gap_s:.2f} s, "
            f"{len(t.delivered)} delivered, {len(lost)} lost, roll {roll_s:.1f} s, "
            f"exits {[p.exits for p in pods]}"
        )
        for e in t.errors[:10]:
            print("  ", e)
    assert not lost, f"{len(lost)} acknowledged jobs never delivered: {lost[:5]}"
