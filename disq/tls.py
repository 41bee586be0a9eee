"""TLS on the gRPC port: what the node (server and peer links) and the SDK build their gRPC
credentials from.

The node side follows etcd's flags (``--tls-cert``, ``--tls-key``, ``--tls-ca``,
``--tls-client-auth``); the config-file keys are Redis's (``tls-cert-file``, ``tls-key-file``,
``tls-ca-cert-file``, ``tls-auth-clients``). One port serves both the peers' ``Cluster/Link``
streams and the clients' ``Queue`` API, so:

* peers always present their node certificate when they dial another node, and always verify
  the other node's certificate against the CA (outbound);
* the server asks for client certificates (and verifies them against the CA) when client
  authentication is on. It is on by default when a CA is given (Redis's ``tls-auth-clients``
  defaults to ``yes``): gRPC cannot *request* a certificate without *requiring* it, so with it
  off an inbound link cannot be checked by certificate and only the outbound direction is.

Certificates must name what nodes and clients dial (``127.0.0.1``, a host name); otherwise a
``server_name`` overrides the name checked (``grpc.ssl_target_name_override``).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

__all__ = ["PemSource", "TlsConfig", "TlsError", "client_tls", "read_pem"]

# A PEM file's path, or its contents as bytes.
PemSource = str | os.PathLike[str] | bytes


class TlsError(ValueError):
    """TLS settings that cannot be used: a file that cannot be read, a certificate without
    its key, client authentication without a CA."""


def read_pem(source: PemSource | None, what: str) -> bytes | None:
    """The PEM bytes of ``source`` (a path, or the PEM itself as bytes); None stays None."""
    if source is None:
        return None
    if isinstance(source, bytes):
        return source
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read the TLS {what} {os.fspath(source)!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """PEM material of one TLS endpoint. ``cert``/``key``: its own certificate chain and key
    (a node's, or a client's for client authentication); ``ca``: the roots the other side's
    certificate is checked against (None: the system's, for a client only)."""

    cert: bytes | None = None
    key: bytes | None = None
    ca: bytes | None = None
    client_auth: bool = False  # server side: require and verify client certificates
    server_name: str | None = None  # the name to check in the server's certificate

    @classmethod
    def for_node(
        cls,
        cert: PemSource | None,
        key: PemSource | None,
        ca: PemSource | None,
        client_auth: bool | None = None,
        server_name: str | None = None,
    ) -> TlsConfig | None:
        """A node's TLS settings from its flags; None when TLS is off (no cert, key nor CA).

        ``client_auth`` None: on when a CA is given. Raises ValueError for an incomplete set.
        """
        if cert is None and key is None and ca is None:
            if client_auth:
                raise TlsError("--tls-client-auth needs --tls-cert, --tls-key and --tls-ca")
            return None
        if cert is None or key is None:
            raise TlsError("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
        if client_auth is None:
            client_auth = ca is not None
        if client_auth and ca is None:
            raise TlsError("--tls-client-auth needs --tls-ca (the CA of client certificates)")
        return cls(
            cert=read_pem(cert, "certificate"),
            key=read_pem(key, "key"),
            ca=read_pem(ca, "CA certificate"),
            client_auth=client_auth,
            server_name=server_name or None,
        )

    def server_credentials(self) -> grpc.ServerCredentials:
        assert self.cert is not None and self.key is not None
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.ca if self.client_auth else None,
            require_client_auth=self.client_auth,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Outbound: verify the server against ``ca``; present ``cert`` if there is one."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    def ssl_contexts(self) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        """(server, client) contexts with the same material, for the nodes' job lanes
        (disq.server.job_lane): the lane's server presents the node certificate and asks for
        the client's when client authentication is on; the client checks the server's
        against the CA and presents its own. Raises TlsError for unusable material."""
        assert self.cert is not None and self.key is not None
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            # ssl loads a certificate chain from files only: a private directory, at once
            # removed, holds them for the call.
            with tempfile.TemporaryDirectory(prefix="disq-tls-") as tmp:
                cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
                cert.write_bytes(self.cert)
                key.write_bytes(self.key)
                for ctx in (server, client):
                    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                    ctx.load_cert_chain(cert, key)
            if self.ca is not None:
                ca = self.ca.decode("ascii")
                client.load_verify_locations(cadata=ca)
                if self.client_auth:
                    server.load_verify_locations(cadata=ca)
            else:
                client.load_default_certs()
        except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
            raise TlsError(f"cannot load the TLS material for the job lanes: {exc}") from exc
        server.verify_mode = ssl.CERT_REQUIRED if self.client_auth else ssl.CERT_NONE
        return server, client

    def channel_options(self) -> list[tuple[str, Any]]:
        if self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []


def client_tls(
    *,
    tls: bool = False,
    ca: PemSource | None = None,
    cert: PemSource | None = None,
    key: PemSource | None = None,
    server_name: str | None = None,
) -> TlsConfig | None:
    """The SDK's TLS settings: None (plaintext) unless ``tls`` or any file is given."""
    if not (tls or ca is not None or cert is not None or key is not None):
        return None
    if (cert is None) != (key is None):
        raise TlsError("a client certificate (tls_cert) needs its key (tls_key), and back")
    return TlsConfig(
        cert=read_pem(cert, "certificate"),
        key=read_pem(key, "key"),
        ca=read_pem(ca, "CA certificate"),
        server_name=server_name or None,
    )
