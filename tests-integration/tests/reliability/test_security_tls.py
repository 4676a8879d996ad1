"""TLS: the conformance suite over ``rediss://`` against a TLS-only Redis 7.

A throwaway CA and certificates are made in the test with `trustme`. The harness's `start`
takes the TLS options as `extra_args`; ``--port 0`` turns the plaintext port off, so
`Server.url` and `Server.port` (which name that port) are not used here.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import trustme
from langgraph.checkpoint.base import empty_checkpoint
from redis.backoff import NoBackoff
from redis.retry import Retry
from reliability_support import CuttingProxy, cfg

from agentstate_testkit import Server, start
from agentstate_testkit.savers import SyncAsAsync, assert_conformance
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver


@dataclass
class TlsServer:
    server: Server
    port: int
    ca: str
    client_cert: str
    client_key: str

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tls_server(tmp_path: Path, auth_clients: bool) -> Iterator[TlsServer]:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("agent@example.test")
    files = {
        "ca": tmp_path / "ca.pem",
        "crt": tmp_path / "server.crt",
        "key": tmp_path / "server.key",
        "client": tmp_path / "client.pem",
        "client_key": tmp_path / "client.key",
    }
    ca.cert_pem.write_to_path(files["ca"])
    server_cert.cert_chain_pems[0].write_to_path(files["crt"])
    server_cert.private_key_pem.write_to_path(files["key"])
    client_cert.cert_chain_pems[0].write_to_path(files["client"])
    client_cert.private_key_pem.write_to_path(files["client_key"])
    port = _free_port()
    args = [
        "--port", "0", "--tls-port", str(port),
        "--tls-cert-file", str(files["crt"]), "--tls-key-file", str(files["key"]),
        "--tls-ca-cert-file", str(files["ca"]),
        "--tls-auth-clients", "yes" if auth_clients else "no",
    ]  # fmt: skip
    with start("redis-7", extra_args=args) as server:
        yield TlsServer(
            server, port, str(files["ca"]), str(files["client"]), str(files["client_key"])
        )


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[TlsServer]:
    """A Redis 7 (the Debian build, which has TLS) listening on TLS only."""
    yield from _tls_server(tmp_path, auth_clients=False)


@pytest.fixture
def mtls(tmp_path: Path) -> Iterator[TlsServer]:
    """The same, but it also asks clients for a certificate signed by its CA."""
    yield from _tls_server(tmp_path, auth_clients=True)


@pytest.mark.parametrize("style", ["async", "sync"])
async def test_conformance_over_tls(tls: TlsServer, style: str) -> None:
    async def factory() -> AsyncIterator[Any]:
        prefix = f"tls{uuid.uuid4().hex[:12]}"
        if style == "async":
            async with AsyncRedisSaver(tls.url, prefix=prefix, ssl_ca_certs=tls.ca) as saver:
                yield saver
        else:
            with RedisSaver(tls.url, prefix=prefix, ssl_ca_certs=tls.ca) as saver:
                yield SyncAsAsync(saver)

    await assert_conformance(factory, f"{style} saver over rediss://")


# No retries in the refusals below: the savers' default retry would repeat each for seconds.
ONCE: dict[str, Any] = {"retry": Retry(NoBackoff(), 0)}


def test_tls_refuses_unverified_and_plaintext_clients(tls: TlsServer) -> None:
    with RedisSaver(tls.url, prefix="tls", **ONCE) as unverified:  # the system CAs lack ours
        with pytest.raises(redis.exceptions.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            unverified.get_tuple(cfg("t"))
    plain_url = f"redis://127.0.0.1:{tls.port}/0"
    with RedisSaver(plain_url, prefix="tls", socket_timeout=5, **ONCE) as plaintext:
        with pytest.raises((redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
            plaintext.get_tuple(cfg("t"))


@pytest.mark.parametrize("style", ["async", "sync"])
async def test_an_untrusted_certificate_is_reported_without_retrying(
    tls: TlsServer, style: str
) -> None:
    """The default retry gives up at once: a proxy counts the connection attempts."""
    proxy = CuttingProxy("127.0.0.1", tls.port)
    url = f"rediss://127.0.0.1:{proxy.port}/0"
    try:
        with pytest.raises(redis.exceptions.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            if style == "async":
                async with AsyncRedisSaver(url, prefix="tls") as asaver:
                    await asaver.aget_tuple(cfg("t"))
            else:
                with RedisSaver(url, prefix="tls") as saver:
                    saver.get_tuple(cfg("t"))
        assert proxy.accepted == 1
    finally:
        proxy.close()


def test_mutual_tls_needs_the_client_certificate(mtls: TlsServer) -> None:
    with RedisSaver(
        mtls.url,
        prefix="mtls",
        ssl_ca_certs=mtls.ca,
        ssl_certfile=mtls.client_cert,
        ssl_keyfile=mtls.client_key,
    ) as saver:
        stored = saver.put(cfg("t"), empty_checkpoint(), {}, {})
        assert saver.get_tuple(stored) is not None
        saver.delete_thread("t")
        assert list(saver.list(None)) == []
    no_cert = {"ssl_ca_certs": mtls.ca, "socket_timeout": 5, **ONCE}
    with RedisSaver(mtls.url, prefix="mtls", **no_cert) as anon:
        with pytest.raises((redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
            anon.get_tuple(cfg("t"))
