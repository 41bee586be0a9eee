"""What every disq data source shares: its options, the connection they describe, and the
error a bad one raises.

The sink (sink.py), the snapshot read (snapshot.py) and the two streams (queue_stream.py,
events_source.py) import this module and nothing of each other's: the option names, their
parsing and the TLS files are read here once, on the driver, and the ``Connection`` made of
them is pickled to the tasks with the reader or writer that holds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


class DisqSparkError(ValueError):
    """A bad option, column, mode or row of a disq data source, named in the message."""


class Options:
    """Spark's options of one source or sink: names are case-insensitive, values strings.
    Every parse names the option it read in its error (``error``, a DisqSparkError class)."""

    def __init__(
        self, options: Mapping[str, str], error: type[DisqSparkError] = DisqSparkError
    ) -> None:
        self.values = {k.lower(): v for k, v in options.items()}
        self.error = error

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name.lower(), default)

    def integer(
        self,
        name: str,
        default: int | None,
        *,
        minimum: int = 0,
        maximum: int | None = None,
        what: str = "",
    ) -> int | None:
        """An integer option in [minimum, maximum]; ``what`` says what it counts."""
        v = self.get(name)
        if v is None:
            return default
        try:
            n = int(v.strip())
        except ValueError:
            raise self.error(f"option {name} must be an integer{what}, not {v!r}") from None
        if n < minimum or (maximum is not None and n > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise self.error(f"option {name} must be {bound}{what}, not {n}")
        return n

    def boolean(self, name: str, default: bool) -> bool:
        v = self.get(name)
        if v is None:
            return default
        if v.strip().lower() in _TRUE:
            return True
        if v.strip().lower() in _FALSE:
            return False
        raise self.error(f"option {name} must be true or false, not {v!r}")

    def connection(self) -> Connection:
        """The nodes (required), the password and the TLS files of the options, the files
        read now, on the driver, so the tasks need no copy of them."""
        nodes = (self.get("nodes") or "").strip()
        if not nodes:
            raise self.error("option nodes is required: host:port[,host:port...] (gRPC ports)")
        for addr in nodes.split(","):
            host, _, port = addr.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise self.error(f"option nodes: {addr.strip()!r} is not host:port")
        return Connection(nodes, self.get("password"), self._tls(), self.error)

    def _tls(self) -> dict[str, bytes]:
        from disq.tls import TlsError, read_pem

        out: dict[str, bytes] = {}
        for option, arg, what in (
            ("tlsCa", "tls_ca", "CA certificate"),
            ("tlsCert", "tls_cert", "certificate"),
            ("tlsKey", "tls_key", "key"),
        ):
            path = self.get(option)
            if path:
                try:
                    pem = read_pem(path, what)
                except TlsError as exc:
                    raise self.error(f"option {option}: {exc}") from None
                if pem is not None:
                    out[arg] = pem
        if ("tls_cert" in out) != ("tls_key" in out):
            raise self.error("options tlsCert and tlsKey go together")
        return out


@dataclass
class Connection:
    """How to reach the cluster: made on the driver, pickled to the tasks."""

    nodes: str
    password: str | None
    tls: dict[str, bytes] = field(default_factory=dict)
    error: type[DisqSparkError] = DisqSparkError

    def client(self, addr: str | None = None) -> Any:
        """A blocking client of the cluster, or of the one node at ``addr``."""
        from disq.client import Client

        if addr is None:
            return Client(self.nodes, password=self.password, timeout_s=30, **self.tls)
        return Client(addr, password=self.password, timeout_s=30, discover=False, **self.tls)

    def async_client(self) -> Any:
        from disq.client import AsyncClient

        tls: dict[str, Any] = self.tls
        return AsyncClient(self.nodes, password=self.password, timeout_s=30, **tls)

    def hello(self) -> Any:
        """The cluster's Hello, from the first node of ``nodes`` that answers. None answering,
        the error says what each address is instead (nothing listens, or a port that is not
        disq's gRPC port, such as the RESP or beanstalk port)."""
        from disq.client import UnavailableError
        from disq.client.probe import describe_address

        with self.client() as c:
            try:
                return c.hello()
            except UnavailableError as exc:
                seen = "; ".join(
                    describe_address(a.strip(), tls=bool(self.tls)) for a in self.nodes.split(",")
                )
                raise self.error(f"option nodes: no disq gRPC port answered ({seen})") from exc
