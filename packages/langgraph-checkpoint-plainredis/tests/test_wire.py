"""Script calls packed by the saver itself: the same bytes as redis-py's, only for plain
clients, and every other client still sees each call through `execute_command`."""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
import uuid
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from redis.cluster import RedisCluster
from redis.connection import Connection
from wrappers import Forwarding

from agentstate_testkit import servers
from agentstate_testkit.forking import child_passes_while_held
from agentstate_testkit.savers import aput_at_once, counting_client, wire_commands
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver, _sync, _wire
from langgraph_checkpoint_plainredis._wire import direct_pool, gives_up, pack


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def checkpoint(text: str) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"m": text}
    cp["channel_versions"] = {"m": 1}
    return cp


ARGS = st.lists(
    st.one_of(
        st.text(),
        st.binary(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.binary(min_size=1020, max_size=1030),  # around the size pack stops formatting in
        st.text(min_size=1020, max_size=1030),
    ),
    min_size=1,
    max_size=12,
)


@given(ARGS)
def test_pack_sends_the_bytes_redis_py_would(args: list[Any]) -> None:
    assert pack(["EVALSHA", *args]) == b"".join(Connection().pack_command("EVALSHA", *args))


@given(ARGS)
def test_packed_commands_read_back_from_the_wire(args: list[Any]) -> None:
    name = "EVALSHA"
    expected = [(name, *(a if isinstance(a, bytes) else str(a).encode() for a in args))]
    assert wire_commands(pack([name, *args])) == expected
    assert wire_commands([pack([name, *args]), pack([name, *args])]) == expected * 2


def test_pack_uses_the_clients_encoding_errors() -> None:
    with pytest.raises(UnicodeEncodeError):
        pack(["\udc80"])
    assert pack(["\udc80"], "surrogateescape") == b"*1\r\n$1\r\n\x80\r\n"


@pytest.mark.parametrize("arg", [1.5, None, True, ["a"]])
def test_pack_names_an_argument_it_cannot_send(arg: Any) -> None:
    with pytest.raises(TypeError, match=re.escape(f"str, bytes or int, got {arg!r}")):
        pack(["EVALSHA", arg])


def test_pack_takes_subclasses_of_str_bytes_and_int_as_redis_py_does() -> None:
    import enum

    class Tag(str):
        pass

    class Raw(bytes):
        pass

    class Level(enum.IntEnum):
        HIGH = 7

    args = ["EVALSHA", Tag("tag"), Raw(b"raw"), Level.HIGH]
    assert pack(args) == b"*4\r\n$7\r\nEVALSHA\r\n$3\r\ntag\r\n$3\r\nraw\r\n$1\r\n7\r\n"


# -- which clients the saver packs for -----------------------------------------------------

URL = "redis://127.0.0.1:1/0"  # never connected to: eligibility reads only the client


class Subclass(redis.Redis):
    pass


class AsyncSubclass(aioredis.Redis):
    pass


def test_a_plain_client_is_served_on_its_own_pool() -> None:
    sync, asynchronous = redis.Redis.from_url(URL), aioredis.Redis.from_url(URL)
    assert direct_pool(sync, redis.Redis) is sync.connection_pool
    assert direct_pool(asynchronous, aioredis.Redis) is asynchronous.connection_pool


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(lambda: Subclass.from_url(URL), id="subclass"),
        pytest.param(lambda: redis.Redis.from_url(URL, encoding="latin-1"), id="latin-1"),
    ],
)
def test_other_clients_go_through_execute_command(client: Any) -> None:
    assert direct_pool(client(), redis.Redis) is None


class TracedConnection(redis.Connection):
    def send_command(self, *args: Any, **kwargs: Any) -> None:
        super().send_command(*args, **kwargs)


def test_instance_overrides_and_script_callbacks_go_through_execute_command() -> None:
    mocked = redis.Redis.from_url(URL)
    mocked.execute_command = lambda *args, **options: None  # type: ignore[method-assign]
    traced = redis.Redis.from_url(URL, connection_class=TracedConnection)
    reshaped = redis.Redis.from_url(URL)
    reshaped.set_response_callback("EVALSHA", lambda reply, **options: reply)
    for client in (mocked, traced, reshaped):
        assert direct_pool(client, redis.Redis) is None
    asynchronous = aioredis.Redis.from_url(URL)
    asynchronous.set_response_callback("evalsha", lambda reply, **options: reply)
    assert direct_pool(asynchronous, aioredis.Redis) is None
    assert direct_pool(AsyncSubclass.from_url(URL), aioredis.Redis) is None


def test_the_failure_callback_gives_up_where_execute_command_would() -> None:
    """redis-py before 6 re-raises an error its connection does not list in
    `retry_on_error`; later ones leave the decision to the Retry."""
    legacy = hasattr(redis.Redis, "_disconnect_raise")
    unlisted, listed = (
        SimpleNamespace(retry_on_error=[]),
        SimpleNamespace(retry_on_error=[redis.ConnectionError]),
    )
    assert gives_up(unlisted, redis.ConnectionError("x")) is legacy
    assert gives_up(listed, redis.ConnectionError("x")) is False
    assert gives_up(listed, redis.ResponseError("x")) is legacy


class Flaky(redis.Connection):
    """Drops the connection instead of sending, `drops` times: a network failure."""

    drops = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if Flaky.drops:
            Flaky.drops -= 1
            self.disconnect()
            raise redis.ConnectionError("dropped by the test")
        super().send_packed_command(command, check_health)


class AsyncFlaky(aioredis.Connection):
    drops = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if AsyncFlaky.drops:
            AsyncFlaky.drops -= 1
            await self.disconnect()
            raise redis.ConnectionError("dropped by the test")
        await super().send_packed_command(command, check_health)


@pytest.mark.standalone
@pytest.mark.parametrize("path", ["direct", "execute_command"])
async def test_a_saver_from_a_url_retries_a_dropped_call_on_either_path(
    redis_url: str, prefix: str, path: str
) -> None:
    """The default retry holds on every redis-py the package allows (5.0.1 included)."""
    with RedisSaver(redis_url, prefix=prefix, connection_class=Flaky) as saver:
        if path == "execute_command":
            saver.client.set_response_callback("EVALSHA", lambda reply, **options: reply)
        assert (direct_pool(saver.client, redis.Redis) is None) is (path == "execute_command")
        saver.put(cfg("retried"), checkpoint("x"), {}, {"m": 1})
        Flaky.drops = 1
        assert saver.get_tuple(cfg("retried")) is not None
        assert Flaky.drops == 0
    async with AsyncRedisSaver(redis_url, prefix=prefix, connection_class=AsyncFlaky) as asaver:
        if path == "execute_command":
            asaver.client.set_response_callback("EVALSHA", lambda reply, **options: reply)
        assert (direct_pool(asaver.client, aioredis.Redis) is None) is (path == "execute_command")
        # Connected first: a drop inside a BlockingConnectionPool's connect deadlocks
        # redis-py 5.0.1's pool itself (it releases under the lock it holds).
        assert await asaver.aget_tuple(cfg("retried")) is not None
        AsyncFlaky.drops = 1
        assert await asaver.aget_tuple(cfg("retried")) is not None
        assert AsyncFlaky.drops == 0


def test_with_redis_py_metrics_on_every_call_goes_through_execute_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_wire, "_metrics_enabled", lambda: True)
    assert direct_pool(redis.Redis.from_url(URL), redis.Redis) is None


@pytest.mark.standalone
def test_a_single_connection_client_goes_through_execute_command(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url, protocol=2, single_connection_client=True) as made:
        assert direct_pool(made, redis.Redis) is None
    asynchronous = aioredis.Redis.from_url(URL, single_connection_client=True)
    assert direct_pool(asynchronous, aioredis.Redis) is None


def _recording(calls: list[str], original: Any, *, wraps: bool) -> Any:
    """A stand-in for instrumentation: functools.wraps (OpenTelemetry's wrapt keeps
    `__wrapped__` too) or a bare replacement function (Sentry's style)."""

    def execute_command(self: Any, *args: Any, **options: Any) -> Any:
        calls.append(args[0])
        return original(self, *args, **options)

    return functools.wraps(original)(execute_command) if wraps else execute_command


@pytest.mark.standalone  # a cluster client always goes through execute_command
@pytest.mark.parametrize("wraps", [True, False], ids=["wrapt-style", "replaced"])
def test_instrumentation_sees_every_script_call(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str, wraps: bool
) -> None:
    calls: list[str] = []
    patched = _recording(calls, redis.Redis.execute_command, wraps=wraps)
    monkeypatch.setattr(redis.Redis, "execute_command", patched)
    with RedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        for _ in range(2):  # the first time, the server may not know the scripts yet
            calls.clear()
            saver.put(cfg("seen"), checkpoint("x"), {}, {"m": 1})
            assert saver.get_tuple(cfg("seen")) is not None
    assert calls == ["EVALSHA", "EVALSHA"]


@pytest.mark.standalone  # a cluster client always goes through execute_command
async def test_async_instrumentation_sees_every_script_call(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    calls: list[str] = []
    original = aioredis.Redis.execute_command

    @functools.wraps(original)
    async def execute_command(self: Any, *args: Any, **options: Any) -> Any:
        calls.append(args[0])
        return await original(self, *args, **options)

    monkeypatch.setattr(aioredis.Redis, "execute_command", execute_command)
    async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        for _ in range(2):  # the first time, the server may not know the scripts yet
            calls.clear()
            await saver.aput(cfg("seen"), checkpoint("x"), {}, {"m": 1})
            assert await saver.aget_tuple(cfg("seen")) is not None
    assert calls == ["EVALSHA", "EVALSHA"]


@pytest.mark.standalone  # a cluster client always goes through execute_command
def test_both_paths_store_and_read_the_same(redis_url: str, prefix: str) -> None:
    direct, counter = counting_client(redis_url)
    routed = redis.Redis.from_url(redis_url, protocol=2, single_connection_client=True)
    assert direct_pool(direct, redis.Redis) is not None and direct_pool(routed, redis.Redis) is None
    by_direct = RedisSaver(client=direct, prefix=prefix)
    by_routed = RedisSaver(client=routed, prefix=prefix)
    by_direct.put(cfg("warm"), checkpoint("x"), {}, {"m": 1})  # connects, loads the script
    with counter.measure():
        by_direct.put(cfg("a"), checkpoint("é" * 600), {}, {"m": 1})
    assert counter.round_trips == 1 and [c[0] for c in counter.commands] == ["EVALSHA"]
    by_routed.put(cfg("b"), checkpoint("é" * 600), {}, {"m": 1})
    for reader in (by_direct, by_routed):
        a, b = reader.get_tuple(cfg("a")), reader.get_tuple(cfg("b"))
        assert a is not None and b is not None
        assert a.checkpoint["channel_values"] == b.checkpoint["channel_values"]
    direct.close()
    routed.close()


# -- connections a saver of its own keeps between calls ---------------------------------------


def _named(client: Any, name: str) -> int:
    """How many connections named `name` the server has open."""
    return sum(1 for entry in client.client_list() if entry.get("name") == name)


def _pool_calls(monkeypatch: pytest.MonkeyPatch, pool: Any) -> list[int]:
    """Counts the connections `pool` hands out from now on."""
    taken = [0]
    original = pool.get_connection

    def get_connection(*args: Any, **kwargs: Any) -> Any:
        taken[0] += 1
        return original(*args, **kwargs)

    async def aget_connection(*args: Any, **kwargs: Any) -> Any:
        taken[0] += 1
        return await original(*args, **kwargs)

    is_async = isinstance(pool, aioredis.ConnectionPool)
    monkeypatch.setattr(pool, "get_connection", aget_connection if is_async else get_connection)
    return taken


@pytest.mark.standalone  # a cluster client always goes through execute_command
async def test_a_saver_of_its_own_reuses_a_connection_without_the_pool(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """Twenty calls in a row take no connection from the pool once one is kept, and one
    stays open; a call that fails gives its connection back to the pool, which lends it
    again."""
    probe = redis.Redis.from_url(redis_url, protocol=2)
    wrong = f"{prefix}:ns:{{wrong}}"
    probe.set(wrong, "a foreign value")
    bad = cfg("wrong")
    name = f"keep-{prefix}"
    with RedisSaver(redis_url, prefix=prefix, cluster=False, client_name=name) as saver:
        saver.put(cfg("warm"), checkpoint("x"), {}, {"m": 1})  # the server learns the scripts
        assert saver.get_tuple(cfg("warm")) is not None
        taken = _pool_calls(monkeypatch, saver.client.connection_pool)
        for i in range(10):
            saver.put(cfg(f"t{i}"), checkpoint("x"), {}, {"m": 1})
            assert saver.get_tuple(cfg(f"t{i}")) is not None
        assert taken == [0] and _named(probe, name) == 1
        with pytest.raises(Exception, match=re.escape(wrong)):
            saver.put(bad, checkpoint("x"), {}, {"m": 1})
        assert saver.get_tuple(cfg("t0")) is not None
        assert taken == [1] and _named(probe, name) == 1
    aname = f"akeep-{prefix}"
    async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False, client_name=aname) as a:
        await a.aput(cfg("awarm"), checkpoint("x"), {}, {"m": 1})
        assert await a.aget_tuple(cfg("awarm")) is not None
        ataken = _pool_calls(monkeypatch, a.client.connection_pool)
        for i in range(10):
            await a.aput(cfg(f"a{i}"), checkpoint("x"), {}, {"m": 1})
            assert await a.aget_tuple(cfg(f"a{i}")) is not None
        assert ataken == [0] and _named(probe, aname) == 1
        with pytest.raises(Exception, match=re.escape(wrong)):
            await a.aput(bad, checkpoint("x"), {}, {"m": 1})
        assert await a.aget_tuple(cfg("a0")) is not None
        assert ataken == [1] and _named(probe, aname) == 1
    assert _named(probe, name) == 0 and _named(probe, aname) == 0  # closed with the saver
    probe.close()


@pytest.mark.standalone
async def test_a_kept_connection_the_server_closed_is_reconnected_before_use(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """With retries off, only the poll before reuse can save the call, so it runs however
    recently the connection was used (`Idle.FRESH` made long here). An asyncio connection
    of redis-py before 8 cannot tell a closed socket from an idle one (its pool cannot
    either): there the default retry reconnects."""
    monkeypatch.setattr(_wire.Idle, "FRESH", 3600.0)
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    probe = redis.Redis.from_url(redis_url, protocol=2)

    def kill(name: str) -> None:
        probe.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert _named(probe, name) == 0

    name, aname = f"kill-{prefix}", f"akill-{prefix}"
    no_retry: dict[str, Any] = {"retry_on_error": [], "cluster": False}
    with RedisSaver(
        redis_url, prefix=prefix, client_name=name, retry=Retry(NoBackoff(), 0), **no_retry
    ) as saver:
        saver.put(cfg("killed"), checkpoint("x"), {}, {"m": 1})
        kill(name)
        assert saver.get_tuple(cfg("killed")) is not None
    if hasattr(aioredis.Connection, "can_read"):
        options: dict[str, Any] = {"retry": AsyncRetry(NoBackoff(), 0), **no_retry}
    else:
        options = {"cluster": False}
    async with AsyncRedisSaver(redis_url, prefix=prefix, client_name=aname, **options) as a:
        await a.aput(cfg("akilled"), checkpoint("x"), {}, {"m": 1})
        kill(aname)
        await asyncio.sleep(0.05)  # the event loop reads the close when it next polls, as idle
        assert await a.aget_tuple(cfg("akilled")) is not None
    probe.close()


def _client_of(size: int) -> Any:
    return SimpleNamespace(connection_pool=SimpleNamespace(max_connections=size))


def _conn(label: str, retries: int = 3) -> Any:
    """A stand-in connection whose calls are retried (`retries` times) or not (0)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return SimpleNamespace(
        label=label, retry=Retry(NoBackoff(), retries), retry_on_error=[redis.ConnectionError]
    )


def test_a_forked_child_keeps_none_of_its_parents_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idle = _wire.Idle(_client_of(64))
    parents, childs = _conn("parent's"), _conn("child's")
    assert idle.keep(parents)
    monkeypatch.setattr(_wire, "_FORKS", _wire._FORKS + 1)  # now in a forked child
    assert idle.take() is None
    assert idle.keep(childs)
    assert idle.take() == (childs, False) and idle.take() is None
    assert idle.keep(parents)
    monkeypatch.setattr(_wire, "_FORKS", _wire._FORKS + 1)  # its child closes its saver
    assert idle.drain() == []  # the child's pool never lent it: nothing to give back


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_while_a_thread_held_the_kept_connections_lock_does_not_hang() -> None:
    """The thread holding the lock does not exist in the child: the child's first call
    gets a lock of its own instead of waiting for good (killed by SIGALRM before)."""
    idle = _wire.Idle(_client_of(64))
    assert idle.keep(_conn("parent's"))
    status = child_passes_while_held(
        idle._lock,
        lambda: idle.take() is None and idle.keep(_conn("child's")) and len(idle) == 1,
    )
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert len(idle) == 1 and idle.take() is not None  # the parent's own is still there


def test_a_kept_connection_is_polled_once_idle_for_fresh_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """However fresh, a connection whose call would not be retried is polled every time."""
    now = [100.0]
    monkeypatch.setattr(_wire, "_clock", lambda: now[0])
    idle = _wire.Idle(_client_of(64))
    retried, unretried = _conn("retried"), _conn("not retried", retries=0)
    for waited, polled in (
        (0.0, False),
        (_wire.Idle.FRESH, False),
        (_wire.Idle.FRESH + 0.01, True),
    ):
        assert idle.keep(retried)
        now[0] += waited
        assert idle.take() == (retried, polled)
        assert idle.keep(unretried)
        assert idle.take() == (unretried, True)


def test_kept_connections_never_starve_the_pool() -> None:
    """At most KEEP from a pool of 8 * KEEP or more; none from a smaller one, a client
    without a pool (a cluster's) or one that re-authenticates connections when they return
    to the pool; none while a call waits for the pool."""
    keep = _wire.Idle.KEEP
    idle = _wire.Idle(_client_of(8 * keep))
    assert [idle.keep(n) for n in range(keep + 1)] == [True] * keep + [False]
    assert len(idle) == keep and len(idle.drain()) == keep and idle.take() is None
    idle.waiting(+1)
    assert idle.keep("while another call waits") is False
    idle.waiting(-1)
    assert idle.keep("afterwards")
    reauth = _client_of(64)
    reauth.connection_pool.connection_kwargs = {"credential_provider": object()}
    for small in (_client_of(8 * keep - 1), SimpleNamespace(), reauth):
        assert _wire.Idle(small).keep("c") is False
        assert _wire.Idle.of(small) is None  # the saver then skips Idle altogether


@pytest.mark.standalone
async def test_more_concurrent_calls_than_connections_all_complete(
    redis_url: str, prefix: str
) -> None:
    """A burst past the pool's size completes, none of its calls waiting long (the pool
    gives up after `timeout`), and leaves at most KEEP kept; the pool never opens more than
    its size. (That nothing is kept while a call waits is checked without a server above.)"""
    name = f"burst-{prefix}"
    options: dict[str, Any] = {"max_connections": 32, "timeout": 10, "client_name": name}
    probe = redis.Redis.from_url(redis_url, protocol=2)
    async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False, **options) as saver:
        for _ in range(3):
            await asyncio.gather(
                *(saver.aput(cfg(f"b{i}"), checkpoint("x"), {}, {"m": 1}) for i in range(100))
            )
            got = await asyncio.gather(*(saver.aget_tuple(cfg(f"b{i}")) for i in range(100)))
            assert all(t is not None for t in got)
            assert _named(probe, name) <= 32
            assert saver._idle is not None and len(saver._idle) <= _wire.Idle.KEEP
    probe.close()


@pytest.mark.standalone
def test_kept_connections_go_back_to_the_pool_before_a_call_that_borrows_for_itself(
    redis_url: str, prefix: str
) -> None:
    """A pipelined call (prune of several threads) takes its connection from the pool
    directly: the connections kept for script calls are given back first, so a pool
    sized for the program's own concurrency is never 4 short."""
    with RedisSaver(redis_url, prefix=prefix, cluster=False, max_connections=32) as saver:
        for t in ("k1", "k2"):
            saver.put(cfg(t), checkpoint("x"), {}, {"m": 1})
        assert saver._idle is not None and len(saver._idle) == 1
        saver.prune(["k1", "k2"], strategy="keep_latest")
        assert len(saver._idle) == 0
        pool = saver.client.connection_pool
        assert len(pool._in_use_connections) == 0


def _kernel_timeouts(sock: Any) -> tuple[float, float]:
    """SO_RCVTIMEO and SO_SNDTIMEO of `sock`, in seconds (0: none)."""

    def read(option: int) -> float:
        seconds, micros = struct.unpack("@ll", sock.getsockopt(socket.SOL_SOCKET, option, 16))
        return float(seconds + micros / 1_000_000)

    return read(socket.SO_RCVTIMEO), read(socket.SO_SNDTIMEO)


linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="held sockets: Linux only"
)


def _drops_only() -> Any:
    """A retry of dropped connections only: kept connections are not polled before use
    (see Idle.take), so they stay held; a timeout is raised as it comes."""
    return redis.retry.Retry(
        redis.backoff.NoBackoff(), 1, supported_errors=(redis.ConnectionError,)
    )


@pytest.mark.standalone
@linux_only
def test_a_kept_connection_keeps_pythons_timeout(redis_url: str, prefix: str) -> None:
    """A kept connection's socket keeps the Python timeout redis-py gave it, and no kernel
    one (a kernel timeout restarts whole when a signal interrupts the wait)."""
    with RedisSaver(
        redis_url, prefix=prefix, cluster=False, socket_timeout=2.5, max_connections=32
    ) as saver:
        for t in ("k1", "k2"):
            saver.put(cfg(t), checkpoint("x"), {}, {"m": 1})
        assert saver._idle is not None and len(saver._idle) == 1
        sock = saver._idle._kept[0][0]._sock
        assert saver.get_tuple(cfg("k1")) is not None
        assert sock.gettimeout() == 2.5 and _kernel_timeouts(sock) == (0.0, 0.0)


@pytest.mark.standalone
def test_a_socket_without_a_timeout_is_left_as_it_is(redis_url: str, prefix: str) -> None:
    """socket_timeout=None: redis-py's socket blocks already, and waits for ever."""
    with RedisSaver(redis_url, prefix=prefix, cluster=False, socket_timeout=None) as saver:
        saver.put(cfg("t"), checkpoint("x"), {}, {"m": 1})
        assert saver._idle is not None and len(saver._idle) == 1
        sock = saver._idle._kept[0][0]._sock
        assert sock.gettimeout() is None and _kernel_timeouts(sock) == (0.0, 0.0)


@pytest.mark.standalone
def test_a_late_reply_on_a_kept_connection_times_out(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """The kept connection is not polled (its drops are retried), so the paused call reads
    it straight away: its timeout, raised as redis-py's TimeoutError."""
    probe = redis.Redis.from_url(redis_url, protocol=2)
    polls: list[Any] = []
    real_stale = _sync._stale
    monkeypatch.setattr(_sync, "_stale", lambda conn: polls.append(conn) or real_stale(conn))
    with RedisSaver(
        redis_url, prefix=prefix, cluster=False, socket_timeout=1.0, retry=_drops_only()
    ) as saver:
        saver.put(cfg("kept"), checkpoint("x"), {}, {"m": 1})
        assert saver.get_tuple(cfg("kept")) is not None
        assert saver._idle is not None and len(saver._idle) == 1
        probe.execute_command("CLIENT", "PAUSE", PAUSE_MS)
        with pytest.raises(redis.TimeoutError, match="Timeout reading from"):
            saver.get_tuple(cfg("kept"))
        assert polls == []
        probe.execute_command("CLIENT", "UNPAUSE") if _unpauses(probe) else _wait_pause(probe)
        got = saver.get_tuple(cfg("kept"))
        assert got is not None and got.checkpoint["channel_values"]["m"] == "x"
    probe.close()


@pytest.mark.standalone
@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
def test_a_periodic_signal_does_not_stretch_the_timeout(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """A kept connection's socket once waited with its timeout set in the kernel, which a
    signal restarts whole: with a handled signal every 0.1 s (a watchdog, a profiler), a call
    on a paused server never timed out, and returned only once the pause ended. Python's
    timeout counts to one deadline, however often a signal interrupts the wait."""
    probe = redis.Redis.from_url(redis_url, protocol=2)
    ticks = [0]

    def tick(signum: int, frame: Any) -> None:
        ticks[0] += 1

    with RedisSaver(
        redis_url, prefix=prefix, cluster=False, socket_timeout=1.0, retry=_drops_only()
    ) as saver:
        saver.put(cfg("sig"), checkpoint("x"), {}, {"m": 1})
        assert saver.get_tuple(cfg("sig")) is not None
        previous = signal.signal(signal.SIGALRM, tick)
        signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)
        try:
            probe.execute_command("CLIENT", "PAUSE", PAUSE_MS)
            with pytest.raises(redis.TimeoutError, match="Timeout reading from"):
                saver.get_tuple(cfg("sig"))  # before the pause ends (it returned then)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert ticks[0] >= 5  # the signal did interrupt the wait
        probe.execute_command("CLIENT", "UNPAUSE") if _unpauses(probe) else _wait_pause(probe)
    probe.close()


class _Deadline(Exception):
    """What a signal-based timeout's handler raises."""


@pytest.mark.standalone
def test_a_call_stopped_between_its_send_and_its_read_leaves_no_reply_behind(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """A signal handler's exception right after a script call was sent (a watchdog's
    timeout, Ctrl-C) gave the connection back to the pool with the reply still to come: the
    next call on it read that reply as its own (here: thread a's checkpoint for thread b).
    The connection is dropped instead; the next call opens another."""
    probe = redis.Redis.from_url(redis_url, protocol=2)
    client = redis.Redis.from_url(redis_url, protocol=2)
    saver = RedisSaver(client=client, prefix=prefix)
    saver.put(cfg("a"), checkpoint("thread a"), {}, {"m": 1})
    saver.put(cfg("b"), checkpoint("thread b"), {}, {"m": 1})
    read = _sync.read_reply
    stops = [True]

    def stopped_after_the_send(conn: Any) -> Any:
        if stops and stops.pop():
            raise _Deadline  # where a signal's handler would run, before the read begins
        return read(conn)

    monkeypatch.setattr(_sync, "read_reply", stopped_after_the_send)
    probe.execute_command("CLIENT", "PAUSE", 500)  # the reply of the call comes later
    with pytest.raises(_Deadline):
        saver.get_tuple(cfg("a"))
    got = saver.get_tuple(cfg("b"))
    assert got is not None and got.checkpoint["channel_values"] == {"m": "thread b"}
    client.close()
    probe.close()


def _pair(timeout: float) -> tuple[Any, socket.socket]:
    """A redis-py connection on one end of a socket pair; and the other end."""
    mine, peer = socket.socketpair()
    conn = redis.Connection(
        socket_timeout=timeout,
        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 3),
        retry_on_error=[redis.ConnectionError],
        protocol=2,
    )
    mine.settimeout(timeout)  # as redis-py leaves a socket it connected
    conn._sock = mine
    return conn, peer


def test_a_read_with_nothing_to_read_raises_redis_pys_timeout() -> None:
    conn, peer = _pair(0.1)
    with pytest.raises(redis.TimeoutError, match="Timeout reading from"):
        _wire.read_reply(conn)
    assert conn._sock is None  # disconnected
    peer.close()


def test_a_send_to_a_server_that_reads_slowly_times_out_as_a_whole() -> None:
    """The request as a whole is limited, as Python's sendall limits it: a peer that keeps
    reading, slowly, cannot stretch it for ever."""
    import threading

    conn, peer = _pair(0.2)
    stop = threading.Event()

    def drain() -> None:  # 64 KiB every 50 ms: each send of ours makes some progress
        peer.settimeout(0.05)
        while not stop.is_set():
            try:
                peer.recv(65536)
            except OSError:
                pass
            stop.wait(0.05)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        with pytest.raises(redis.TimeoutError, match="Timeout writing to socket"):
            _wire.send_raw(conn, b"x" * (64 << 20))  # minutes at that pace
    finally:
        stop.set()
        reader.join()
        peer.close()


@pytest.mark.standalone
def test_a_saver_on_a_unix_socket_times_out(redis_kind: str, tmp_path: Any) -> None:
    """unix:// URLs take the same path, and a late reply times out."""
    path = tmp_path / "redis.sock"
    with servers.start(redis_kind, extra_args=["--unixsocket", str(path)]) as server:
        url = f"unix://{path}"
        with RedisSaver(url, prefix="unix", socket_timeout=1.0, retry=_drops_only()) as saver:
            saver.put(cfg("u"), checkpoint("x"), {}, {"m": 1})
            assert saver._idle is not None and len(saver._idle) == 1
            sock = saver._idle._kept[0][0]._sock
            assert sock.family == socket.AF_UNIX
            got = saver.get_tuple(cfg("u"))
            assert got is not None and got.checkpoint["channel_values"]["m"] == "x"
            if saver._idle._kept[0][0].socket_timeout is None:  # redis-py 5.0: not in the URL
                return
            probe = redis.Redis.from_url(server.url, protocol=2)
            probe.execute_command("CLIENT", "PAUSE", PAUSE_MS)
            with pytest.raises(redis.TimeoutError, match="Timeout reading from"):
                saver.get_tuple(cfg("u"))
            probe.close()


@pytest.mark.standalone
async def test_kept_connections_go_back_to_the_pool_before_an_async_call_that_borrows_for_itself(
    redis_url: str, prefix: str
) -> None:
    async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        for t in ("k1", "k2"):
            await saver.aput(cfg(t), checkpoint("x"), {}, {"m": 1})
        assert saver._idle is not None and len(saver._idle) == 1
        await saver.aprune(["k1", "k2"], strategy="keep_latest")
        assert len(saver._idle) == 0


def test_a_passed_in_client_lends_each_connection_back_to_its_pool() -> None:
    """The user's pool is shared with the rest of the program: the saver keeps nothing."""
    assert RedisSaver(client=redis.Redis.from_url(URL))._idle is None
    assert AsyncRedisSaver(client=aioredis.Redis.from_url(URL))._idle is None


class Interrupted(BaseException):
    """A KeyboardInterrupt, say, while a kept connection is checked."""


@pytest.mark.standalone
async def test_a_call_stopped_while_it_checks_a_kept_connection_gives_it_back(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """Each round keeps a connection, then stops the next call in the check before reuse:
    a connection lost each time would exhaust the 32 of the pool."""
    from langgraph_checkpoint_plainredis import _aio, _sync

    async def cancelled(conn: Any) -> bool:
        raise asyncio.CancelledError

    def interrupted(conn: Any) -> bool:
        raise Interrupted

    monkeypatch.setattr(_wire.Idle, "FRESH", 0.0)  # every reuse polls
    options: dict[str, Any] = {"cluster": False, "max_connections": 32}
    with RedisSaver(redis_url, prefix=prefix, **options) as saver:
        for _ in range(40):
            saver.put(cfg("stop"), checkpoint("x"), {}, {"m": 1})
            with monkeypatch.context() as patch:
                patch.setattr(_sync, "_stale", interrupted)
                with pytest.raises(Interrupted):
                    saver.get_tuple(cfg("stop"))
    async with AsyncRedisSaver(redis_url, prefix=prefix, timeout=1, **options) as asaver:
        for _ in range(40):
            await asaver.aput(cfg("astop"), checkpoint("x"), {}, {"m": 1})
            with monkeypatch.context() as patch:
                patch.setattr(_aio, "_stale", cancelled)
                with pytest.raises(asyncio.CancelledError):
                    await asaver.aget_tuple(cfg("astop"))
        assert await asaver.aget_tuple(cfg("astop")) is not None


@pytest.mark.standalone
async def test_a_kept_connection_marked_to_reconnect_reconnects_before_use(
    redis_url: str, prefix: str
) -> None:
    """redis-py 7+ marks connections to reconnect when their server moves; a kept one
    must not make its next call on the old socket."""
    if not hasattr(redis.Connection, "mark_for_reconnect"):
        pytest.skip("redis-py before 7 marks no connection to reconnect")
    probe = redis.Redis.from_url(redis_url, protocol=2)

    def ids(name: str) -> set[str]:
        return {e["id"] for e in probe.client_list() if e.get("name") == name}

    name, aname = f"move-{prefix}", f"amove-{prefix}"
    with RedisSaver(redis_url, prefix=prefix, cluster=False, client_name=name) as saver:
        saver.put(cfg("moved"), checkpoint("x"), {}, {"m": 1})
        before = ids(name)
        assert saver._idle is not None and len(saver._idle) == 1
        saver._idle._kept[0][0].mark_for_reconnect()
        assert saver.get_tuple(cfg("moved")) is not None
        assert len(ids(name)) == 1 and ids(name) != before
    async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False, client_name=aname) as a:
        await a.aput(cfg("amoved"), checkpoint("x"), {}, {"m": 1})
        before = ids(aname)
        assert a._idle is not None and len(a._idle) == 1
        a._idle._kept[0][0].mark_for_reconnect()
        assert await a.aget_tuple(cfg("amoved")) is not None
        assert len(ids(aname)) == 1 and ids(aname) != before
    probe.close()


@pytest.mark.standalone
async def test_a_connection_used_just_now_is_reused_without_a_poll(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """Back-to-back calls make no readiness poll (each costs system calls, each a chance
    for another thread to take the GIL); one idle past `Idle.FRESH` is polled."""
    from langgraph_checkpoint_plainredis import _aio, _sync

    polls: list[Any] = []

    def counted(conn: Any) -> bool:
        polls.append(conn)
        return False

    async def acounted(conn: Any) -> bool:
        return counted(conn)

    monkeypatch.setattr(_sync, "_stale", counted)
    monkeypatch.setattr(_aio, "_stale", acounted)
    with RedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False) as asaver:
            for fresh, expected in ((3600.0, 0), (0.0, 20)):
                monkeypatch.setattr(_wire.Idle, "FRESH", fresh)
                saver.put(cfg("p"), checkpoint("x"), {}, {"m": 1})  # keeps a connection
                await asaver.aput(cfg("p"), checkpoint("x"), {}, {"m": 1})
                polls.clear()
                for _ in range(10):
                    assert saver.get_tuple(cfg("p")) is not None
                    assert await asaver.aget_tuple(cfg("p")) is not None
                assert len(polls) == expected


@pytest.mark.standalone
async def test_a_connection_killed_just_after_its_call_is_recovered_by_the_retry(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """Within `Idle.FRESH` (made long here) no poll runs: the default retry reconnects, as
    it does for a connection lost during a call, and the call succeeds."""
    from langgraph_checkpoint_plainredis import _aio, _sync

    def no_poll(conn: Any) -> bool:
        raise AssertionError("a fresh connection was polled")

    async def no_apoll(conn: Any) -> bool:
        return no_poll(conn)

    monkeypatch.setattr(_wire.Idle, "FRESH", 3600.0)
    monkeypatch.setattr(_sync, "_stale", no_poll)
    monkeypatch.setattr(_aio, "_stale", no_apoll)
    probe = redis.Redis.from_url(redis_url, protocol=2)
    name, aname = f"fresh-{prefix}", f"afresh-{prefix}"
    with RedisSaver(redis_url, prefix=prefix, cluster=False, client_name=name) as saver:
        saver.put(cfg("fresh"), checkpoint("x"), {}, {"m": 1})
        probe.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert _named(probe, name) == 0
        assert saver.get_tuple(cfg("fresh")) is not None
    async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False, client_name=aname) as a:
        await a.aput(cfg("afresh"), checkpoint("x"), {}, {"m": 1})
        probe.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert _named(probe, aname) == 0
        assert await a.aget_tuple(cfg("afresh")) is not None
    probe.close()


# -- replies read off the socket ----------------------------------------------------------


def _resp(value: Any) -> bytes:
    """RESP2 bytes of `value` (lists, bytes, ints, None, a ResponseError)."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, redis.ResponseError):
        return b"-%s\r\n" % str(value).encode()
    return b"*%d\r\n" % len(value) + b"".join(_resp(item) for item in value)


REPLIES = st.recursive(
    st.one_of(st.none(), st.binary(max_size=300), st.integers(-(2**63), 2**63 - 1)),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=30,
)


class _Chunks:
    """A socket whose recv hands out `data` in the given chunk sizes."""

    def __init__(self, data: bytes, sizes: list[int], then: int | None = None) -> None:
        self.data, self.sizes, self.then, self.at = data, iter(sizes), then, 0

    def recv(self, count: int) -> bytes:
        size = min(count, next(self.sizes, self.then or count))
        chunk = self.data[self.at : self.at + size]
        self.at += len(chunk)
        return chunk


def _conn_on(sock: Any) -> Any:
    disconnected: list[bool] = []
    conn = SimpleNamespace(
        _sock=sock,
        _parser=redis.connection._RESP2Parser(socket_read_size=65536),
        health_check_interval=0,
        host="127.0.0.1",
        port=1,
        disconnected=disconnected,
        disconnect=lambda: disconnected.append(True),
    )
    return conn


@given(REPLIES, st.lists(st.integers(1, 40), max_size=50))
def test_a_reply_reads_back_whole_however_the_socket_splits_it(
    value: Any, sizes: list[int]
) -> None:
    conn = _conn_on(_Chunks(_resp(value), sizes))
    assert _wire.read_reply(conn) == value
    assert conn.disconnected == []


@pytest.mark.parametrize("piece", [7, 4096, 70_000])
def test_a_long_reply_in_small_pieces_is_read_once(piece: int) -> None:
    """Two 300 KB bulk strings and many small ones, the socket giving `piece` bytes at a
    time: the reader asks for the rest of a long bulk at once instead of growing a buffer
    piece by piece."""
    value = [b"a" * 300_000, [b"x%d" % i for i in range(2_000)], b"b" * 300_000, 7]
    sock = _Chunks(_resp(value), [], then=piece)
    asked: list[int] = []
    recv = sock.recv
    sock.recv = lambda count: (asked.append(count), recv(count))[1]  # type: ignore[method-assign]
    conn = _conn_on(sock)
    assert _wire.read_reply(conn) == value
    assert max(asked) >= 300_000 - 65_536  # the rest of a long bulk, in one request


class _Stream:
    """An asyncio connection's reader and writer over `data`, in `piece`-byte pieces."""

    def __init__(self, data: bytes, piece: int, buffered: int = 0) -> None:
        self.reader = asyncio.StreamReader()
        self.data, self.piece, self.sent = data, piece, b""
        self.transport = SimpleNamespace(get_write_buffer_size=lambda: buffered, abort=lambda: None)
        self.drained = 0

    def write(self, data: bytes) -> None:
        self.sent += data
        for start in range(0, len(self.data), self.piece):
            asyncio.get_running_loop().call_soon(
                self.reader.feed_data, self.data[start : start + self.piece]
            )

    async def drain(self) -> None:
        self.drained += 1


async def _async_conn_on(stream: _Stream) -> Any:
    disconnected: list[bool] = []

    async def disconnect(nowait: bool = False) -> None:
        disconnected.append(True)

    return SimpleNamespace(
        _reader=stream.reader,
        _writer=stream,
        _parser=redis.connection._RESP2Parser(socket_read_size=65536),
        socket_timeout=5.0,
        host="127.0.0.1",
        port=1,
        disconnected=disconnected,
        disconnect=disconnect,
    )


@given(REPLIES, st.integers(1, 64))
async def test_an_async_reply_reads_back_whole_however_the_stream_splits_it(
    value: Any, piece: int
) -> None:
    stream = _Stream(_resp(value), piece)
    conn = await _async_conn_on(stream)
    assert await _wire.aexchange(conn, b"PING") == value
    assert stream.sent == b"PING" and conn.disconnected == []


async def test_an_async_send_is_drained_only_when_the_socket_left_some_of_it() -> None:
    taken = _Stream(_resp(b"ok"), 64)
    assert await _wire.aexchange(await _async_conn_on(taken), b"PING") == b"ok"
    left = _Stream(_resp(b"ok"), 64, buffered=3)
    assert await _wire.aexchange(await _async_conn_on(left), b"PING") == b"ok"
    assert (taken.drained, left.drained) == (0, 1)


async def test_an_async_send_that_never_drains_times_out_and_disconnects() -> None:
    stuck = _Stream(b"", 64, buffered=3)
    stuck.drain = lambda: asyncio.sleep(60)  # type: ignore[method-assign]
    conn = await _async_conn_on(stuck)
    conn.socket_timeout = 0.05
    with pytest.raises(redis.TimeoutError, match="writing"):  # as redis-py says it
        await _wire.aexchange(conn, b"PING")
    assert conn.disconnected == [True]


@pytest.mark.parametrize("piece", [4096, 70_000])
async def test_a_long_async_reply_reads_back_whole(piece: int) -> None:
    value = [b"a" * 300_000, [b"x%d" % i for i in range(2_000)], b"b" * 300_000, 7]
    conn = await _async_conn_on(_Stream(_resp(value), piece))
    assert await _wire.aexchange(conn, b"PING") == value


async def test_an_async_reply_cut_short_disconnects_and_says_so() -> None:
    stream = _Stream(b"$300000\r\n" + b"a" * 100_000, 4096)
    conn = await _async_conn_on(stream)
    stream.reader.feed_eof()
    with pytest.raises(redis.ConnectionError, match="closed by server"):
        await _wire.aexchange(conn, b"PING")
    assert conn.disconnected == [True]


_WATCHES = sys.version_info >= (3, 11)  # Task.uncancel: older Pythons use asyncio.timeout


async def _silent_conn(timeout: float) -> Any:
    """An asyncio connection whose server never answers."""
    conn = await _async_conn_on(_Stream(b"", 64))
    conn.socket_timeout = timeout
    return conn


def _answers(conn: Any, data: bytes) -> _Stream:
    """Points `conn` at a new stream from a server that answers `data` (b"": never)."""
    stream = _Stream(data, 64)
    conn._reader, conn._writer = stream.reader, stream
    return stream


async def _read_times_out(conn: Any) -> None:
    """The next read on `conn` raises redis-py's read timeout (5 s guard against a hang)."""
    with pytest.raises(redis.TimeoutError, match="Timeout reading from"):
        await asyncio.wait_for(_wire.aexchange(conn, b"PING"), 5)


async def test_an_async_reply_that_never_comes_times_out_and_disconnects() -> None:
    conn = await _silent_conn(0.05)
    with pytest.raises(redis.TimeoutError, match="Timeout reading from 127.0.0.1:1"):
        await asyncio.wait_for(_wire.aexchange(conn, b"PING"), 5)
    assert conn.disconnected == [True]


@pytest.mark.skipif(not _WATCHES, reason="a read's timer per connection needs Python 3.11+")
async def test_an_async_connection_keeps_one_timer_however_many_reads_it_makes() -> None:
    """The read timeout is one timer per connection, not one per read: reads only record
    their deadline."""
    stream = _Stream(_resp(b"ok"), 64)
    conn = await _async_conn_on(stream)
    await _wire.aexchange(conn, b"PING")
    watch = getattr(conn, _wire._WATCH)
    timer = watch.handle
    for _ in range(50):
        assert await _wire.aexchange(conn, b"PING") == b"ok"
    assert watch.handle is timer and not timer.cancelled() and watch.task is None


async def _primed(timeout: float) -> tuple[Any, _Stream]:
    """A connection with `timeout` whose first read, of a reply already there, set its timer.
    A pause of the whole process (a garbage collection, a busy machine) longer than `timeout`
    times that read out as it would a real one: it is tried again on a fresh connection."""
    for _ in range(5):
        stream = _Stream(_resp(b"ok"), 64)
        conn = await _async_conn_on(stream)
        conn.socket_timeout = timeout
        try:
            assert await _wire.aexchange(conn, b"PING") == b"ok"
            return conn, stream
        except redis.TimeoutError:
            continue
    pytest.fail(f"no read of a reply already there finished within {timeout} s")


async def test_a_connection_idle_past_its_timeout_still_times_out_its_next_read() -> None:
    """The timer lapses when it fires with no read under way; the next read sets it again."""
    conn, stream = await _primed(0.05)
    await asyncio.sleep(0.15)  # the timer fires with nothing to cancel
    stream.data = b""  # the server stops answering
    await _read_times_out(conn)


async def test_a_read_past_the_deadline_of_an_earlier_one_is_not_cut_short() -> None:
    """Each read gets the whole timeout from its own start: the timer set for an earlier
    read's deadline waits on for the current one."""
    stream = _Stream(_resp(b"ok"), 64)
    conn = await _async_conn_on(stream)
    conn.socket_timeout = 1.0  # room for a busy machine: the reply below has 0.7 s to spare
    assert await _wire.aexchange(conn, b"PING") == b"ok"
    await asyncio.sleep(0.9)
    late = _answers(conn, _resp(b"late"))

    def write(data: bytes) -> None:  # the reply comes 0.3 s after the request
        asyncio.get_running_loop().call_later(0.3, late.reader.feed_data, _resp(b"late"))

    late.write = write  # type: ignore[method-assign]
    assert await _wire.aexchange(conn, b"PING") == b"late"  # past the first read's 1 s
    assert conn.disconnected == []


@pytest.mark.skipif(not _WATCHES, reason="a read's timer per connection needs Python 3.11+")
@pytest.mark.parametrize("timeout", [0.0005, 0.002, 0.05])
async def test_no_read_times_out_before_its_own_timeout(timeout: float) -> None:
    """A read that starts just before the timer an earlier read left fires (here under a
    millisecond before) still gets its whole timeout, by the loop's own clock."""
    loop = asyncio.get_running_loop()
    for lead in (0.9, 0.99):
        conn, _ = await _primed(timeout)
        due = getattr(conn, _wire._WATCH).due
        while loop.time() < due - timeout * (1 - lead):  # busy: the timer cannot run yet
            pass
        _answers(conn, b"")
        started = loop.time()
        await _read_times_out(conn)
        assert loop.time() - started >= timeout - 1e-6


async def test_a_read_cancelled_from_outside_is_cancelled_not_timed_out() -> None:
    conn = await _silent_conn(5.0)
    task = asyncio.ensure_future(_wire.aexchange(conn, b"PING"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert conn.disconnected == [True]  # the reply may still come: the connection goes


async def test_a_timeout_inside_an_outer_cancellation_stays_a_cancellation() -> None:
    """The timer and a caller both cancel the read: the caller's cancellation wins, as with
    asyncio.timeout."""
    conn = await _silent_conn(0.05)

    async def read_then_cancel() -> Any:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_later(0.05, task.cancel)
        return await _wire.aexchange(conn, b"PING")

    with pytest.raises(asyncio.CancelledError):
        await read_then_cancel()


def test_a_connection_used_on_a_second_event_loop_still_times_out() -> None:
    """asyncio.run twice (a test suite, a script): the timer set on the first loop never
    fires; the second loop gets its own."""

    async def first() -> Any:
        conn = await _async_conn_on(_Stream(_resp(b"ok"), 64))
        assert await _wire.aexchange(conn, b"PING") == b"ok"
        return conn

    conn = asyncio.run(first())

    async def second() -> None:
        _answers(conn, b"")
        conn.socket_timeout = 0.05
        await _read_times_out(conn)

    asyncio.run(second())


def test_a_connection_back_on_a_loop_it_left_times_out_once() -> None:
    """Used on loop A, then B, then A again (two long-lived loops): only the timer set last
    acts, so the read times out (not a cancellation counted twice)."""
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:

        async def ok(conn: Any) -> Any:
            _answers(conn, _resp(b"ok"))
            return await _wire.aexchange(conn, b"PING")

        conn = first.run_until_complete(_silent_conn(0.2))
        assert first.run_until_complete(ok(conn)) == b"ok"
        assert second.run_until_complete(ok(conn)) == b"ok"

        async def silent() -> int:
            _answers(conn, b"")
            await _read_times_out(conn)
            task = asyncio.current_task()
            assert task is not None
            return task.cancelling() if _WATCHES else 0

        assert first.run_until_complete(silent()) == 0
    finally:
        first.close()
        second.close()


async def test_a_shorter_timeout_cuts_the_next_read_at_its_own_deadline() -> None:
    conn = await _async_conn_on(_Stream(_resp(b"ok"), 64))
    conn.socket_timeout = 30.0
    assert await _wire.aexchange(conn, b"PING") == b"ok"  # a timer 30 s away
    _answers(conn, b"")
    conn.socket_timeout = 0.05
    await _read_times_out(conn)  # a 30 s wait would end in wait_for's own TimeoutError


def test_an_error_reply_raises_redis_pys_exception_and_keeps_the_connection() -> None:
    conn = _conn_on(_Chunks(b"-NOSCRIPT No matching script.\r\n", []))
    with pytest.raises(redis.exceptions.NoScriptError):
        _wire.read_reply(conn)
    conn = _conn_on(_Chunks(b"-ERR PLAINREDIS_WRONGTYPE string hash lg:x\r\n", []))
    with pytest.raises(redis.ResponseError, match="PLAINREDIS_WRONGTYPE"):
        _wire.read_reply(conn)
    assert conn.disconnected == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"$5\r\nab", "closed by server"),  # the server went away mid-reply
        (b":1\r\n:2\r\n", "4 bytes after a reply"),  # a stream out of step
        (b"!3\r\nabc\r\n", "not a RESP2 reply"),  # RESP3 on a RESP2 connection
    ],
)
def test_a_broken_reply_disconnects_and_says_why(data: bytes, message: str) -> None:
    conn = _conn_on(_Chunks(data, []))
    with pytest.raises((redis.ConnectionError, ValueError), match=message):
        _wire.read_reply(conn)
    assert conn.disconnected == [True]


class CountedReads(redis.Connection):
    reads = 0

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        CountedReads.reads += 1
        return super().read_response(*args, **kwargs)


@pytest.mark.standalone  # a cluster client always goes through execute_command
def test_a_connection_class_that_reads_for_itself_is_called(redis_url: str, prefix: str) -> None:
    with RedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        saver.put(cfg("raw"), checkpoint("x"), {}, {"m": 1})
        conn = saver.client.connection_pool.get_connection(*_wire.POOL_ARGS)
        assert _wire.plain_io(conn)  # its own connections are read by the saver
        saver.client.connection_pool.release(conn)
    with RedisSaver(
        redis_url, prefix=prefix, cluster=False, connection_class=CountedReads
    ) as counted:
        CountedReads.reads = 0
        counted.put(cfg("raw"), checkpoint("x"), {}, {"m": 1})
        assert counted.get_tuple(cfg("raw")) is not None
        assert CountedReads.reads >= 2
    probe = redis.Redis.from_url(redis_url, protocol=2)
    speaks_resp3 = _unpauses(probe)  # Redis 6+
    probe.close()
    if not speaks_resp3:
        return
    with RedisSaver(redis_url, prefix=prefix, cluster=False, protocol=3) as resp3:
        conn = resp3.client.connection_pool.get_connection(*_wire.POOL_ARGS)
        assert not _wire.plain_io(conn)  # RESP3 replies are redis-py's to read
        resp3.client.connection_pool.release(conn)
        assert resp3.get_tuple(cfg("raw")) is not None


@pytest.mark.standalone
def test_a_reply_that_comes_too_late_times_out_and_loses_nothing(
    redis_url: str, prefix: str
) -> None:
    """A server that stops answering (here CLIENT PAUSE) makes the read time out with
    redis-py's TimeoutError; with retries off the call fails, and the thread is intact."""
    probe = redis.Redis.from_url(redis_url, protocol=2)
    no_retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    with RedisSaver(
        redis_url, prefix=prefix, cluster=False, socket_timeout=1.0, retry=no_retry
    ) as saver:
        saver.put(cfg("late"), checkpoint("kept"), {}, {"m": 1})
        probe.execute_command("CLIENT", "PAUSE", PAUSE_MS)
        with pytest.raises(redis.TimeoutError, match="Timeout reading from"):
            saver.put(cfg("late"), checkpoint("late"), {}, {"m": 1})
        probe.execute_command("CLIENT", "UNPAUSE") if _unpauses(probe) else _wait_pause(probe)
        got = saver.get_tuple(cfg("late"))
        assert got is not None and got.checkpoint["channel_values"]["m"] in ("kept", "late")
        assert len(list(saver.list(cfg("late")))) in (1, 2)  # the late put ran whole or not
    probe.close()


@pytest.mark.standalone
async def test_an_async_reply_that_comes_too_late_times_out_and_loses_nothing(
    redis_url: str, prefix: str
) -> None:
    """The same for AsyncRedisSaver, whose reads share one timer per connection."""
    probe = redis.Redis.from_url(redis_url, protocol=2)
    no_retry = aioredis.retry.Retry(redis.backoff.NoBackoff(), 0)
    async with AsyncRedisSaver(
        redis_url, prefix=prefix, cluster=False, socket_timeout=1.0, retry=no_retry
    ) as saver:
        for n in range(20):  # the connection's timer is set, and outlives these reads
            await saver.aput(cfg(f"warm{n}"), checkpoint("x"), {}, {"m": 1})
        await saver.aput(cfg("alate"), checkpoint("kept"), {}, {"m": 1})
        probe.execute_command("CLIENT", "PAUSE", PAUSE_MS)
        with pytest.raises(redis.TimeoutError, match="Timeout reading from"):
            await saver.aput(cfg("alate"), checkpoint("late"), {}, {"m": 1})
        probe.execute_command("CLIENT", "UNPAUSE") if _unpauses(probe) else _wait_pause(probe)
        got = await saver.aget_tuple(cfg("alate"))
        assert got is not None and got.checkpoint["channel_values"]["m"] in ("kept", "late")
        assert len([t async for t in saver.alist(cfg("alate"))]) in (1, 2)
    probe.close()


def _unpauses(client: redis.Redis) -> bool:
    """Redis 6+ (CLIENT UNPAUSE, RESP3)."""
    return int(client.info("server")["redis_version"].split(".")[0]) >= 6


# The tests of a late reply time out after 1 s (room for a busy machine to answer every
# other call), so a paused call sent within 2 s of CLIENT PAUSE times out. Every command,
# the probe's too, waits for the pause to end: each of these tests takes as long as it.
PAUSE_MS = 3000


def _wait_pause(probe: redis.Redis) -> None:
    """Redis 5 has no CLIENT UNPAUSE; it pauses the probe too, so a command of the probe's
    answers once the pause has ended (no longer than it must)."""
    assert probe.ping()


@pytest.mark.standalone
async def test_replies_of_megabytes_read_back_whole_on_both_sides(
    redis_url: str, prefix: str
) -> None:
    import os

    big = os.urandom(3_000_000)  # incompressible: 3 MB on the wire
    values = {f"big{i}": big[i:] for i in range(3)}
    with RedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        for thread, value in values.items():
            cp = checkpoint("x")
            cp["channel_values"] = {"m": value}
            saver.put(cfg(thread), cp, {}, {"m": 1})
        for thread, value in values.items():
            got = saver.get_tuple(cfg(thread))
            assert got is not None and got.checkpoint["channel_values"]["m"] == value
        listed = [t.checkpoint["channel_values"]["m"] for t in saver.list(None)]
        assert sorted(listed) == sorted(values.values())
    async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False) as asaver:
        for thread, value in values.items():
            got = await asaver.aget_tuple(cfg(thread))
            assert got is not None and got.checkpoint["channel_values"]["m"] == value
        alisted = [t.checkpoint["channel_values"]["m"] async for t in asaver.alist(None)]
        assert sorted(alisted) == sorted(values.values())


def test_an_error_reply_that_redis_py_raises_as_a_connection_error_is_raised_and_drops() -> None:
    """A server still loading its data (or refusing credentials) answers with an error
    redis-py raises as a `ConnectionError`, wherever it sits, and the retry handles; it is
    never handed back as a value (a put that returned it would have stored nothing)."""
    for data in (
        b"-LOADING Redis is loading the dataset in memory\r\n",
        b"*2\r\n:1\r\n-LOADING x\r\n",
    ):
        conn = _conn_on(_Chunks(data, []))
        with pytest.raises(redis.exceptions.BusyLoadingError):
            _wire.read_reply(conn)
        assert conn.disconnected == [True]


def test_a_send_interrupted_half_way_drops_the_connection() -> None:
    class Interrupted:
        def sendall(self, data: bytes) -> None:
            raise KeyboardInterrupt

    conn = _conn_on(Interrupted())
    with pytest.raises(KeyboardInterrupt):
        _wire.send_raw(conn, b"*1\r\n$4\r\nPING\r\n")
    assert conn.disconnected == [True]


@pytest.mark.parametrize(
    ("cls", "plain"),
    [
        (redis.connection.Connection, True),
        (redis.connection.SSLConnection, True),
        (redis.connection.UnixDomainSocketConnection, True),
        (aioredis.connection.Connection, True),
        (aioredis.connection.SSLConnection, True),
        (redis.sentinel.SentinelManagedConnection, False),  # fails over in read_response
        (aioredis.sentinel.SentinelManagedConnection, False),
        (CountedReads, False),
    ],
)
def test_only_redis_pys_plain_connections_are_read_by_the_saver(cls: type, plain: bool) -> None:
    conn = object.__new__(cls)
    assert _wire.plain_io(conn) is plain


def test_reading_patched_into_the_connection_class_later_is_called_from_then_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tracing installed after the first calls (wrapt-style: the wrapper compares equal to
    what it wraps) takes over reading at once, and the saver reads again once it is gone."""

    class Traced(Connection):
        pass

    conn = object.__new__(Traced)
    assert _wire.plain_io(conn)
    original = Connection.read_response

    class Wrapper:
        def __init__(self, wrapped: Any) -> None:
            self.__wrapped__ = wrapped

        def __eq__(self, other: object) -> bool:
            return other == self.__wrapped__

        __hash__ = None  # type: ignore[assignment]

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return self.__wrapped__(*args, **kwargs)

    monkeypatch.setattr(Connection, "read_response", Wrapper(original))
    assert not _wire.plain_io(conn)
    monkeypatch.setattr(Connection, "read_response", original)
    assert _wire.plain_io(conn)


@pytest.mark.standalone
async def test_connection_methods_wrapped_in_place_see_every_script_call(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """APM agents patch redis-py's connection methods in place with `wrapt`, whose wrapper
    keeps the wrapped method's module and name (and adds `__wrapped__`, as `functools.wraps`
    does): the saver judged them redis-py's own, sent and read every call itself, and the
    traces had none of its traffic."""
    seen: list[str] = []

    def wrap(cls: Any, name: str) -> None:
        original = getattr(cls, name)
        if asyncio.iscoroutinefunction(original):

            @functools.wraps(original)
            async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                seen.append(name)
                return await original(self, *args, **kwargs)

        else:

            @functools.wraps(original)
            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                seen.append(name)
                return original(self, *args, **kwargs)

        assert wrapper.__module__ == original.__module__ and wrapper.__qualname__ == (
            original.__qualname__
        )
        monkeypatch.setattr(cls, name, wrapper)

    for one in ("send_packed_command", "read_response"):
        wrap(Connection, one)
        wrap(aioredis.connection.Connection, one)
    with RedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        saver.put(cfg("wrapped"), checkpoint("x"), {}, {"m": 1})
        seen.clear()
        assert saver.get_tuple(cfg("wrapped")) is not None
        assert "send_packed_command" in seen and "read_response" in seen
    async with AsyncRedisSaver(redis_url, prefix=prefix, cluster=False) as asaver:
        seen.clear()
        assert await asaver.aget_tuple(cfg("wrapped")) is not None
        assert "send_packed_command" in seen and "read_response" in seen
    monkeypatch.undo()
    for one in ("send_command", "pack_command"):  # the direct path's own check
        wrap(Connection, one)
        assert direct_pool(redis.Redis.from_url(redis_url), redis.Redis) is None
        monkeypatch.undo()
    assert direct_pool(redis.Redis.from_url(redis_url), redis.Redis) is not None


@pytest.mark.standalone
def test_a_kept_connection_read_by_redis_py_times_out_with_its_timeout(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """Reading patched in after a connection was kept (tracing installed later): redis-py
    reads that connection, and a late reply is its TimeoutError."""
    probe = redis.Redis.from_url(redis_url, protocol=2)
    with RedisSaver(
        redis_url, prefix=prefix, cluster=False, socket_timeout=1.0, retry=_drops_only()
    ) as saver:
        saver.put(cfg("traced"), checkpoint("x"), {}, {"m": 1})
        assert saver.get_tuple(cfg("traced")) is not None  # the server learns the script
        assert saver._idle is not None and len(saver._idle) == 1
        reads = [0]
        original = Connection.read_response

        def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
            reads[0] += 1
            return original(self, *args, **kwargs)

        monkeypatch.setattr(Connection, "read_response", traced)
        assert saver.get_tuple(cfg("traced")) is not None and reads == [1]
        probe.execute_command("CLIENT", "PAUSE", PAUSE_MS)
        with pytest.raises(redis.TimeoutError):
            saver.get_tuple(cfg("traced"))
        assert reads[0] >= 2  # redis-py read it (and may call itself again inside)
        probe.execute_command("CLIENT", "UNPAUSE") if _unpauses(probe) else _wait_pause(probe)
    probe.close()


@pytest.mark.standalone
def test_an_error_the_clients_retry_lists_is_retried_on_the_direct_path(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """`retry_on_error` (here READONLY, as during a failover) is honoured on the first
    attempt too: the retry policy sees every error, as with `execute_command`."""
    from langgraph_checkpoint_plainredis import _sync

    failures = [2]
    read = _wire.read_reply

    def flaky(conn: Any) -> Any:
        reply = read(conn)
        if failures[0]:
            failures[0] -= 1
            raise redis.exceptions.ReadOnlyError("You can't write against a read only replica.")
        return reply

    monkeypatch.setattr(_sync, "read_reply", flaky)
    retry = redis.retry.Retry(redis.backoff.NoBackoff(), 3)
    with RedisSaver(
        redis_url,
        prefix=prefix,
        cluster=False,
        retry=retry,
        retry_on_error=[redis.ConnectionError, redis.exceptions.ReadOnlyError],
    ) as saver:
        saver.setup()
        saver.put(cfg("ro"), checkpoint("x"), {}, {"m": 1})
        assert failures == [0]
        assert saver.get_tuple(cfg("ro")) is not None
    failures[0] = 1
    with RedisSaver(redis_url, prefix=prefix, cluster=False) as unlisted:  # not retried
        unlisted.setup()
        with pytest.raises(redis.exceptions.ReadOnlyError):
            unlisted.get_tuple(cfg("ro"))


@pytest.mark.standalone
def test_health_checks_stay_redis_pys_own(redis_url: str, prefix: str) -> None:
    """With `health_check_interval` the calls go through redis-py's send and read, which
    keep its clock: no PING before each call (redis-py 5 times it with time.time())."""
    probe = redis.Redis.from_url(redis_url, protocol=2)

    def pings() -> int:
        return int(probe.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))

    with RedisSaver(redis_url, prefix=prefix, cluster=False, health_check_interval=3600) as saver:
        saver.put(cfg("hc"), checkpoint("x"), {}, {"m": 1})
        before = pings()
        for _ in range(20):
            assert saver.get_tuple(cfg("hc")) is not None
        assert pings() == before
    probe.close()


@pytest.mark.standalone  # a cluster client always goes through execute_command
def test_instrumentation_installed_after_the_first_calls_sees_the_next_ones(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    """The saver remembers that its client may be served directly, and checks again when
    anything that decides it changes: a patched `execute_command` (class or instance),
    a script reply callback, redis-py's metrics switched on."""
    calls: list[str] = []
    with RedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        saver.put(cfg("late"), checkpoint("x"), {}, {"m": 1})
        assert saver.get_tuple(cfg("late")) is not None
        patched = _recording(calls, redis.Redis.execute_command, wraps=True)
        with monkeypatch.context() as patch:
            patch.setattr(redis.Redis, "execute_command", patched)
            assert saver.get_tuple(cfg("late")) is not None
            assert calls == ["EVALSHA"]
        bound = saver.client.execute_command

        def on_the_instance(*args: Any, **options: Any) -> Any:
            calls.append(args[0])
            return bound(*args, **options)

        with monkeypatch.context() as patch:
            patch.setattr(saver.client, "execute_command", on_the_instance)
            assert saver.get_tuple(cfg("late")) is not None
            assert calls == ["EVALSHA"] * 2
        assert saver._direct_pool() is not None
        with monkeypatch.context() as patch:
            patch.setattr(_wire, "_metrics_enabled", lambda: True)
            assert saver._direct_pool() is None
        assert saver._direct_pool() is not None
        saver.client.set_response_callback("EVALSHA", lambda reply, **options: reply)
        assert saver._direct_pool() is None
        del saver.client.response_callbacks["EVALSHA"]
        calls.clear()
        assert saver.get_tuple(cfg("late")) is not None  # all undone: direct again
        assert calls == []


class _WraptLike:
    """What wrapt's FunctionWrapper does that matters here: it compares equal to the
    function it wraps, and read from a class it is a new object each time."""

    def __init__(self, wrapped: Any, calls: list[str]) -> None:
        self.__wrapped__, self.calls = wrapped, calls

    def __eq__(self, other: object) -> bool:
        return bool(self.__wrapped__ == other)

    def __hash__(self) -> int:
        return hash(self.__wrapped__)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return _WraptLike(self.__wrapped__, self.calls)

        def bound(*args: Any, **options: Any) -> Any:
            self.calls.append(args[0])
            return self.__wrapped__(instance, *args, **options)

        return bound


@pytest.mark.standalone  # a cluster client always goes through execute_command
def test_a_wrapper_that_compares_equal_to_what_it_wraps_is_still_seen(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, prefix: str
) -> None:
    calls: list[str] = []
    with RedisSaver(redis_url, prefix=prefix, cluster=False) as saver:
        saver.put(cfg("wrapt"), checkpoint("x"), {}, {"m": 1})
        assert saver.get_tuple(cfg("wrapt")) is not None  # served directly, remembered
        wrapper = _WraptLike(vars(redis.Redis)["execute_command"], calls)
        monkeypatch.setattr(redis.Redis, "execute_command", wrapper)
        assert saver.get_tuple(cfg("wrapt")) is not None
        assert calls == ["EVALSHA"]


def test_the_remembered_check_sees_a_wrapper_that_compares_equal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = redis.Redis(protocol=2)  # never connected to
    direct = _wire.Direct(client, redis.Redis)
    assert direct.pool() is client.connection_pool  # remembered
    wrapper = _WraptLike(vars(redis.Redis)["execute_command"], [])
    monkeypatch.setattr(redis.Redis, "execute_command", wrapper)
    assert direct.pool() is None
    monkeypatch.undo()
    assert direct.pool() is client.connection_pool


class _Slotted:
    """A client wrapper without a __dict__ (the saver accepts anything with
    execute_command and pipeline): its calls go through its execute_command."""

    __slots__ = ("inner",)

    def __init__(self, inner: redis.Redis) -> None:
        self.inner = inner

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return self.inner.execute_command(*args, **options)

    def pipeline(self, *args: Any, **options: Any) -> Any:
        return self.inner.pipeline(*args, **options)

    def scan_iter(self, *args: Any, **options: Any) -> Any:
        return self.inner.scan_iter(*args, **options)


@pytest.mark.standalone
def test_a_client_without_a_dict_goes_through_execute_command(redis_url: str, prefix: str) -> None:
    inner = redis.Redis.from_url(redis_url, protocol=2)
    saver = RedisSaver(client=_Slotted(inner), prefix=prefix, cluster=False)  # type: ignore[arg-type]
    saver.put(cfg("slots"), checkpoint("x"), {}, {"m": 1})
    assert saver.get_tuple(cfg("slots")) is not None
    inner.close()


@pytest.mark.standalone
def test_one_async_saver_serves_one_event_loop_after_another(redis_url: str, prefix: str) -> None:
    """A saver kept from one `asyncio.run` to the next (a script, a notebook, a test per loop)
    reconnects the connections it kept on the closed loop: every call succeeds. Before, the
    first call on each new loop raised RuntimeError("Event loop is closed") after the server
    had run it."""
    saver = AsyncRedisSaver(redis_url, prefix=prefix)

    async def calls(n: int) -> list[Any]:
        configs = await aput_at_once(saver, 8, run_id=f"r{n}")
        got = [await saver.aget_tuple(c) for c in configs]
        await saver.adelete_for_runs([f"r{n - 1}"])
        return [t.config for t in got] == configs and [t async for t in saver.alist(None, limit=3)]

    try:
        for n in range(4):
            assert len(asyncio.run(calls(n))) == 3, n
    finally:
        asyncio.run(saver.aclose())


def test_one_async_saver_serves_loops_left_open_one_after_another(
    redis_url: str, prefix: str
) -> None:
    """Loops a framework keeps (`run_until_complete` on one, then on the next, none closed):
    the saver's own pool, whose lock callers waited on in the second loop, stayed bound to
    it, and the third loop's calls failed with "... is bound to a different event loop". A
    client of its own is built again on every new loop, as after a closed one."""
    saver = AsyncRedisSaver(redis_url, prefix=prefix)
    loops = []
    try:
        for n in range(3):
            loops.append(asyncio.new_event_loop())
            # more calls at once than the pool's 64 connections: callers wait on its lock
            stored = loops[-1].run_until_complete(aput_at_once(saver, 200, run_id=f"r{n}"))
            assert len(stored) == 200, n
    finally:
        for loop in loops:
            loop.close()
    got = asyncio.run(saver.aget_tuple(stored[0]))
    assert got is not None and got.config == stored[0]
    asyncio.run(saver.aclose())


def _named_connections(client: Any, name: str) -> int:
    """Connections the server holds for clients named `name` (on every node of a cluster)."""
    nodes = client.get_nodes() if isinstance(client, RedisCluster) else [None]
    listed = [
        c
        for node in nodes
        for c in (client.client_list(target_nodes=node) if node else client.client_list())
    ]
    return sum(1 for c in listed if c["name"] == name)


def _left_open(client: Any, name: str) -> int:
    """`_named_connections` once the server has seen the sockets shut down (it reads the
    news on its own time): the count, polled for up to 10 s until it is 0."""
    deadline = time.monotonic() + 10
    while (count := _named_connections(client, name)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return count


def test_one_async_saver_alternates_between_two_open_loops_without_leaking(
    redis_url: str, prefix: str, client: Any
) -> None:
    """Two loops a framework keeps, taking turns: each turn built the saver a new client and
    let the last one go unclosed (a ResourceWarning per connection, its connections open
    until collected; before that, a lock one loop waited on failed the next). Each loop now
    keeps a client of its own for its next turn, and `aclose` lets the server close them
    all (20 connections of the other loop's client stayed open)."""
    name = f"alt-{uuid.uuid4().hex[:8]}"
    saver = AsyncRedisSaver(redis_url, prefix=prefix, client_name=name)

    def opened() -> int:
        return _named_connections(client, name)

    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    gc.collect()  # what earlier tests left: only what this one lets go counts below
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            for turn in range(12):
                loop = first if turn % 2 else second
                assert len(loop.run_until_complete(aput_at_once(saver, 20, f"r{turn}"))) == 20
                assert opened() > 0
            gc.collect()
        assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
        second.run_until_complete(saver.aclose())
        assert _left_open(client, name) == 0
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("left", ["closed", "dropped"])
def test_the_clients_of_loops_left_behind_are_let_go(
    redis_url: str, redis_kind: str, prefix: str, client: Any, left: str
) -> None:
    """A new loop per step, the last one closed (or dropped unclosed) after the switch: the
    client kept for the loop left, in case it ran again, was never let go, and the server's
    connections grew by the pool's size every step (120 after 30 steps). A client whose loop
    has closed is let go, and at most four are kept."""
    name = f"left-{uuid.uuid4().hex[:8]}"
    # a cluster client's nodes refuse calls past max_connections instead of waiting
    pool = {} if redis_kind.endswith("-cluster") else {"max_connections": 4}
    saver = AsyncRedisSaver(redis_url, prefix=prefix, client_name=name, **pool)
    loops: list[asyncio.AbstractEventLoop] = []
    counts = []
    try:
        for step in range(12):
            loops.append(asyncio.new_event_loop())
            loops[-1].run_until_complete(aput_at_once(saver, 16, f"r{step}"))
            if left == "closed" and len(loops) > 1:
                loops[-2].close()
            counts.append(_named_connections(client, name))
        assert len(saver._parked) <= 4
        assert counts[-1] <= 2 * counts[4], counts
        loops[-1].run_until_complete(saver.aclose())
        assert _left_open(client, name) == 0
    finally:
        for loop in loops:
            loop.close()


def test_an_async_saver_serves_its_loop_after_aclose(redis_url: str, prefix: str) -> None:
    """On a cluster, calls at once after `aclose()` on the same loop failed (AttributeError
    from redis-py's connection): the closed client forgot its slot map and the saver did not
    have it read again before calls ran on it at once."""

    async def twice() -> None:
        assert len(await aput_at_once(saver, 40, "a")) == 40
        await saver.aclose()
        assert len(await aput_at_once(saver, 40, "b")) == 40
        await saver.aclose()

    saver = AsyncRedisSaver(redis_url, prefix=prefix)
    asyncio.run(twice())


def test_calls_left_in_flight_on_a_stopped_loop_go_on_with_its_own_client(
    redis_url: str, prefix: str
) -> None:
    """Calls begun on loop A, which stopped in the middle of them; loop B took the saver; A
    ran again. A's calls went on with B's client (its connections moved to A, its locks
    bound to A), and B's `aclose()` then failed with "attached to a different loop". Each
    round trip runs on the client of its own loop."""
    saver = AsyncRedisSaver(redis_url, prefix=prefix)
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        first.run_until_complete(aput_at_once(saver, 8, "a"))
        second.run_until_complete(aput_at_once(saver, 8, "b"))
        tasks = [
            first.create_task(saver.aput(cfg(f"t{i}"), checkpoint("x"), {}, {"m": 1}))
            for i in range(8)
        ]
        first.run_until_complete(asyncio.sleep(0))  # the calls begin, and A stops
        first.run_until_complete(asyncio.sleep(0))
        assert second.run_until_complete(saver.aget_tuple(cfg("none"))) is None  # B's now
        stored = first.run_until_complete(asyncio.gather(*tasks))
        assert [t["configurable"]["thread_id"] for t in stored] == [f"t{i}" for i in range(8)]
        second.run_until_complete(saver.aclose())
        assert len(second.run_until_complete(aput_at_once(saver, 8, "c"))) == 8
        second.run_until_complete(saver.aclose())
    finally:
        first.close()
        second.close()


@pytest.mark.standalone  # the pool's size bounds what the loop's client opens
def test_aclose_ends_a_parked_client_whose_loop_runs_in_another_thread(
    redis_url: str, prefix: str, client: Any
) -> None:
    """The saver ran on loop A, then on B (A's client kept for A), then A ran again in another
    thread: `aclose()` on B tore A's transports down from B's thread, and with A in debug
    mode they stayed open for good. Such a client is closed on its own loop."""
    name = f"run-{uuid.uuid4().hex[:8]}"
    saver = AsyncRedisSaver(redis_url, prefix=prefix, client_name=name, max_connections=4)
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    first.set_debug(True)
    first.run_until_complete(aput_at_once(saver, 40, "a"))
    second.run_until_complete(aput_at_once(saver, 40, "b"))
    worker = threading.Thread(target=first.run_forever, daemon=True)
    worker.start()
    try:
        assert _named_connections(client, name) == 8
        second.run_until_complete(saver.aclose())
        assert _left_open(client, name) == 0
    finally:
        first.call_soon_threadsafe(first.stop)
        worker.join(timeout=30)
        first.close()
        second.close()


@pytest.mark.standalone  # a cluster client's nodes refuse calls past max_connections
def test_an_async_saver_closed_on_a_new_loop_serves_the_next(redis_url: str, prefix: str) -> None:
    """`aclose` on a loop after the last call's loop had closed forgot that loop, so the next
    loop kept a client whose pool lock the first loops had bound: "... is bound to a
    different event loop" once calls waited on its pool."""
    saver = AsyncRedisSaver(redis_url, prefix=prefix, max_connections=4)
    for n in range(2):
        assert len(asyncio.run(aput_at_once(saver, 40, f"r{n}"))) == 40  # callers wait
    asyncio.run(saver.aclose())
    assert len(asyncio.run(aput_at_once(saver, 40, "r2"))) == 40
    asyncio.run(saver.aclose())


@pytest.mark.parametrize("wrap", [None, Forwarding, "subclass"])
def test_a_passed_async_client_of_any_kind_serves_one_loop_after_another(
    redis_url: str, redis_kind: str, prefix: str, wrap: Any
) -> None:
    """Only a plain `redis.asyncio.Redis` had the connections it kept from a closed loop
    opened again: a forwarding wrapper, a subclass or a cluster client failed every other
    `asyncio.run` with "Event loop is closed" (its pipeline too, as `copy_thread` uses)."""
    cluster = redis_kind.endswith("-cluster")
    base = aioredis.RedisCluster if cluster else aioredis.Redis

    class Sub(base):  # type: ignore[valid-type,misc]
        pass

    factory = Sub if wrap == "subclass" else base
    passed = factory.from_url(redis_url, protocol=2)
    saver = AsyncRedisSaver(
        client=Forwarding(passed) if wrap is Forwarding else passed, prefix=prefix
    )

    async def use(n: int) -> None:
        stored = await saver.aput(cfg(f"t{n}"), checkpoint("x"), {}, {"m": 1})
        assert [t.config async for t in saver.alist(cfg(f"t{n}"))] == [stored]
        await saver.acopy_thread(f"t{n}", f"u{n}")
        if n == 2:
            await passed.aclose()  # on its last loop: redis-py's own aclose cannot move

    for n in range(3):
        asyncio.run(use(n))


def test_an_async_saver_refuses_a_second_loop_while_the_first_still_runs(
    redis_url: str, prefix: str
) -> None:
    """A saver in use on a loop running in another thread is refused on a second running
    loop, naming the fix: its pool's locks and connections belong to the first loop, and
    sharing them hung for good or failed with redis-py's "bound to a different event loop".
    Once that loop has closed, the next loop takes the saver over as before."""
    saver = AsyncRedisSaver(redis_url, prefix=prefix)
    first = asyncio.new_event_loop()
    worker = threading.Thread(target=first.run_forever, daemon=True)
    worker.start()
    try:
        stored = asyncio.run_coroutine_threadsafe(
            saver.aput(cfg("t"), checkpoint("x"), {}, {"m": 1}), first
        ).result(timeout=30)
        with pytest.raises(RuntimeError, match="another event loop that is still running") as e:
            asyncio.run(saver.aget_tuple(stored))
        assert "one AsyncRedisSaver per event loop" in str(e.value)
        got = asyncio.run_coroutine_threadsafe(saver.aget_tuple(stored), first).result(30)
        assert got is not None  # the first loop's calls go on
    finally:
        first.call_soon_threadsafe(first.stop)
        worker.join(timeout=30)
        first.close()
    got = asyncio.run(saver.aget_tuple(stored))
    assert got is not None and got.checkpoint["channel_values"] == {"m": "x"}
    asyncio.run(saver.aclose())


def strict_serde() -> JsonPlusSerializer:
    """The serializer of LANGGRAPH_STRICT_MSGPACK=true (safe types only)."""
    return JsonPlusSerializer(allowed_msgpack_modules=None)


def test_a_copy_of_an_async_saver_shares_its_connections_across_loops(
    redis_url: str, prefix: str
) -> None:
    """With LANGGRAPH_STRICT_MSGPACK, LangGraph runs graphs on a shallow copy of the saver
    (`with_allowlist`). A graph run on the copy in one `asyncio.run`, then the application's
    own saver in the next: both are one saver. Before, the saver's own calls failed (a lock
    bound to the closed loop, or 'Event loop is closed'), and on a cluster its aclose left
    the copy's client open."""
    saver = AsyncRedisSaver(redis_url, prefix=prefix, serde=strict_serde())
    clone = saver.with_allowlist([("some.module", "Thing")])
    assert clone is not saver
    stored = asyncio.run(aput_at_once(clone, 8, run_id="r"))  # the pool's lock is contended

    async def reads() -> list[Any]:
        return list(await asyncio.gather(*(saver.aget_tuple(c) for c in stored)))

    assert [t.config for t in asyncio.run(reads())] == stored
    assert saver.client is clone.client
    asyncio.run(saver.aclose())


def test_a_copy_of_a_sync_saver_shares_its_client(redis_url: str, prefix: str) -> None:
    with RedisSaver(redis_url, prefix=prefix, serde=strict_serde()) as saver:
        clone = saver.with_allowlist([("some.module", "Thing")])
        assert clone is not saver
        stored = clone.put(cfg("t"), checkpoint("x"), {}, {"m": 1})  # learns the topology
        assert saver.client is clone.client
        assert saver.get_tuple(stored).checkpoint["channel_values"] == {"m": "x"}


@pytest.mark.standalone
async def test_an_async_put_that_timed_out_while_sending_never_runs_later(
    redis_kind: str,
) -> None:
    """A put whose send timed out (the server stopped reading) closed its transport gently,
    which went on sending the request: once the server read again it ran the put, after the
    caller had deleted the thread, and the thread came back. The unsent bytes are dropped."""
    from redis.asyncio.retry import Retry as AsyncRetry

    with servers.start(redis_kind) as server:
        pid = server._process.pid  # type: ignore[union-attr]
        async with AsyncRedisSaver(
            server.url,
            prefix="ghost",
            socket_timeout=0.3,
            retry=AsyncRetry(redis.backoff.NoBackoff(), 0),
        ) as saver:
            await saver.aput(cfg("g"), checkpoint("small"), {}, {"m": 1})
            big = os.urandom(10_000_000).hex()  # 20 MB that do not compress
            os.kill(pid, signal.SIGSTOP)
            try:
                with pytest.raises(redis.TimeoutError, match="Timeout writing to socket"):
                    await saver.aput(cfg("g"), checkpoint(big), {}, {"m": 2})
            finally:
                os.kill(pid, signal.SIGCONT)
            await saver.adelete_thread("g")
            await asyncio.sleep(1.0)  # time for a request still in flight to arrive
            assert await saver.aget_tuple(cfg("g")) is None
