"""The request bytes of a script call, and when a shell may send them itself.

Every saver call is one script call, and `Redis.execute_command` costs more client time
than planning it: redis-py encodes each argument through its encoder, records metrics and
builds closures for its retry loop. For a plain client the shells pack the request here
and run it on a connection of the client's own pool, under that connection's retry
policy, the way `execute_command` does. Any other client, and every command that is not
a script call, goes through `execute_command`.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis

# What redis.asyncio times its reads with: asyncio's own from 3.11.3, else the
# async-timeout package, which redis-py requires on those Pythons.
if sys.version_info >= (3, 11, 3):
    from asyncio import timeout as _async_timeout  # type: ignore[attr-defined,unused-ignore]
else:  # pragma: no cover
    from async_timeout import timeout as _async_timeout  # type: ignore[import-not-found,unused-ignore]

try:  # redis-py 7+: its own OpenTelemetry metrics, which count execute_command's calls
    from redis.observability.recorder import is_enabled as _metrics_enabled
except ImportError:  # pragma: no cover - older redis-py records no metrics

    def _metrics_enabled() -> bool:
        return False


__all__ = [
    "POOL_ARGS",
    "Direct",
    "Idle",
    "Replies",
    "aexchange",
    "direct_pool",
    "gives_up",
    "pack",
    "plain_io",
    "read_reply",
    "reconnects",
    "retries_drops",
    "send_raw",
]

# redis-py before 5.3 needs a command name to hand out a connection; later ones warn on it.
POOL_ARGS: tuple[str, ...] = (
    ("EVALSHA",) if tuple(int(part) for part in redis.__version__.split(".")[:2]) < (5, 3) else ()
)

# redis-py before 6 stops retrying a command at once unless the error is one the connection
# lists in `retry_on_error` (its `_disconnect_raise`); later ones leave it to the `Retry`.
_RAISES_UNLISTED = hasattr(redis.Redis, "_disconnect_raise")


def gives_up(conn: Any, error: BaseException) -> bool:
    """Whether `execute_command` would re-raise `error` instead of retrying, on this
    redis-py: the direct path's failure callback does what its own does."""
    listed = getattr(conn, "retry_on_error", None)
    return _RAISES_UNLISTED and (listed is None or not isinstance(error, tuple(listed)))


_DROPPED = redis.ConnectionError("closed by the server")  # never raised: only classified


def retries_drops(conn: Any) -> bool:
    """Whether a call on `conn` would be retried if the server had closed the connection:
    its `Retry` allows a retry, for `ConnectionError`, and (redis-py before 6) the
    connection lists that error in `retry_on_error`."""
    retry = getattr(conn, "retry", None)
    count = getattr(retry, "_retries", 0)  # redis-py before 6 has no get_retries()
    supported = tuple(getattr(retry, "_supported_errors", ()))
    return count != 0 and isinstance(_DROPPED, supported) and not gives_up(conn, _DROPPED)


# Time that also runs while the machine sleeps (Linux), so that a suspended process does
# not take an idle connection for a fresh one; elsewhere the monotonic clock.
_clock = (
    functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME)
    if hasattr(time, "CLOCK_BOOTTIME")
    else time.monotonic
)


_HEADS = [b"$%d" % n for n in range(4096)]  # bulk-string headers, without their CRLF


def pack(args: Sequence[str | bytes | int], errors: str = "strict") -> bytes:
    """One command as RESP: an array of bulk strings (the same in RESP2 and RESP3).

    `str` goes as UTF-8 (`errors` as the client's ``encoding_errors``), `int` in decimal.
    Every header and argument is one item of a CRLF join: no formatting per argument, and
    a long value (a channel's) is copied once, by the join.
    """
    parts = [b"*%d" % len(args)]
    append = parts.append
    for arg in args:
        # exact types first, without a call per argument: a put packs some thirty
        if type(arg) is str:
            data = arg.encode("utf-8", errors)
        elif type(arg) is bytes:
            data = arg
        elif type(arg) is int:
            data = b"%d" % arg
        elif isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode("utf-8", errors)
        elif isinstance(arg, int) and not isinstance(arg, bool):
            data = b"%d" % arg
        else:
            raise TypeError(f"a script argument must be str, bytes or int, got {arg!r}")
        size = len(data)
        append(_HEADS[size] if size < 4096 else b"$%d" % size)
        append(data)
    append(b"")  # the last argument's CRLF
    return b"\r\n".join(parts)


_RECV = 65536


class Replies:
    """One RESP2 reply, parsed from bytes as they come: feed them, then `parse()`.

    `parse()` returns True once the reply is whole (then `value` holds it and `rest()`
    counts the bytes fed past its end), False while it needs more: `missing` is then how
    many more bytes are known to be needed (the rest of a bulk string), or 0 when only
    the next byte is. It resumes where it stopped, so a reply fed in many pieces is read
    once. Arrays and bulk strings come back as lists and bytes, integers as int, simple
    strings as bytes, a nil as None; an error reply as the exception `error(text)` makes,
    in place (the caller raises one at the top), except that one of redis-py's
    `ConnectionError`s (a server still loading, refused credentials) is raised at once.
    """

    __slots__ = ("buf", "error", "missing", "pos", "stack", "value")

    def __init__(self, error: Any) -> None:
        self.buf = b""
        self.pos = 0
        self.missing = 0
        self.stack: list[tuple[list[Any], int]] = []  # open arrays: (items, length)
        self.error = error
        self.value: Any = None

    def feed(self, data: bytes) -> None:
        self.buf = self.buf[self.pos :] + data if self.pos < len(self.buf) else data
        self.pos = 0

    def parse(self) -> bool:
        buf, pos, stack = self.buf, self.pos, self.stack
        while True:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                self.pos, self.missing = pos, 0
                return False
            kind = buf[pos]
            value: Any
            if kind == 0x24:  # $ bulk string
                size = int(buf[pos + 1 : end])
                if size < 0:
                    value, pos = None, end + 2
                else:
                    stop = end + 2 + size
                    if stop + 2 > len(buf):
                        self.pos, self.missing = pos, stop + 2 - len(buf)
                        return False
                    value, pos = buf[end + 2 : stop], stop + 2
            elif kind == 0x2A:  # * array
                count = int(buf[pos + 1 : end])
                pos = end + 2
                if count > 0:
                    stack.append(([], count))
                    continue
                value = None if count < 0 else []
            elif kind == 0x3A:  # : integer
                value, pos = int(buf[pos + 1 : end]), end + 2
            elif kind == 0x2B:  # + simple string
                value, pos = buf[pos + 1 : end], end + 2
            elif kind == 0x2D:  # - error
                value, pos = self.error(buf[pos + 1 : end].decode("utf-8", "replace")), end + 2
                if isinstance(value, redis.ConnectionError):  # LOADING, NOAUTH, too many clients
                    raise value  # as redis-py's parser does: the connection is dropped
            else:
                raise ValueError(f"not a RESP2 reply: {buf[pos : pos + 40]!r}")
            while stack:  # the value ends an element of the innermost open array
                items, length = stack[-1]
                items.append(value)
                if len(items) < length:
                    break
                stack.pop()
                value = items
            else:
                self.pos, self.value = pos, value
                return True

    def take(self, data: bytes) -> bool:
        """Feeds what a read gave (nothing: the server closed the connection) and parses:
        True once the reply is whole, which must end where the bytes do."""
        if not data:
            raise redis.ConnectionError("Connection closed by server.")
        self.feed(data)
        if not self.parse():
            return False
        if self.rest():
            raise redis.ConnectionError(f"{self.rest()} bytes after a reply: out of step")
        return True

    def result(self) -> Any:
        """The reply, or the error reply raised."""
        if isinstance(self.value, Exception):
            raise self.value
        return self.value

    def rest(self) -> int:
        return len(self.buf) - self.pos


# Per connection class: the I/O methods it was judged by, and whether they are plain.
_PLAIN_IO: dict[type, tuple[tuple[Any, ...], bool]] = {}
_PLAIN_IO_CLASSES = 64  # classes remembered at most (test doubles come and go)
# Where redis-py's plain connections (TCP, TLS, unix socket) get their I/O methods; the
# sentinel-managed and client-side-caching connections override them, so they are not.
_IO_MODULES = ("redis.connection", "redis.asyncio.connection")


def plain_io(conn: Any) -> bool:
    """Whether `send_raw` and `read_reply` may stand in for `conn`'s own sending and
    reading: it speaks RESP2 (a RESP3 connection may also carry push messages), and its
    class does I/O as redis-py's plain connections do (a subclass overriding it, to count,
    trace or drop commands, or to fail over as a sentinel-managed one does, is called
    instead). The verdict per class holds while its methods stay the same objects: one
    patched later (tracing installed after the first call) is called from then on."""
    cls = type(conn)
    methods = (
        getattr(cls, "send_packed_command", None),
        getattr(cls, "read_response", None),
        getattr(cls, "connect", None),
        getattr(cls, "disconnect", None),
    )
    known = _PLAIN_IO.get(cls)
    if (
        known is None
        or known[0][0] is not methods[0]
        or known[0][1] is not methods[1]
        or known[0][2] is not methods[2]
        or known[0][3] is not methods[3]
    ):
        plain = all(_redis_own(m) for m in methods)
        if len(_PLAIN_IO) >= _PLAIN_IO_CLASSES:
            _PLAIN_IO.clear()
        known = _PLAIN_IO[cls] = (methods, plain)
    return known[1] and getattr(conn, "protocol", 2) in (2, "2")


def _redis_own(method: Any) -> bool:
    """Whether `method` is redis-py's own I/O method of a plain connection: defined on its
    `AbstractConnection`, not wrapped (`wrapt`, which APM agents patch redis-py with, keeps
    the wrapped method's module and name but adds `__wrapped__`)."""
    return (
        getattr(method, "__module__", None) in _IO_MODULES
        and (getattr(method, "__qualname__", None) or "").startswith("AbstractConnection.")
        and not hasattr(method, "__wrapped__")
    )


def read_reply(conn: Any) -> Any:
    """One reply read straight off the socket of redis-py connection `conn` (RESP2).

    What `conn.read_response()` does for a script call, without its per-call layers: the
    same exceptions (a timeout or a socket error disconnects `conn` and raises redis-py's
    `TimeoutError` or `ConnectionError`; an error reply raises the `ResponseError`
    subclass redis-py's parser picks, and keeps the connection). A connection is lent
    with nothing unread (the pool checks), and replies come one per request, so nothing
    is left over when the reply ends; anything else is a broken stream: disconnected.
    """
    sock = conn._sock
    replies = Replies(conn._parser.parse_error)
    try:
        while not replies.take(
            # inside a long bulk string, all the rest of it at once
            _recv_exactly(sock, replies.missing) if replies.missing > _RECV else sock.recv(_RECV)
        ):
            pass
    except TimeoutError:
        conn.disconnect()
        raise redis.TimeoutError(f"Timeout reading from {_address(conn)}") from None
    except redis.RedisError:
        conn.disconnect()
        raise
    except OSError as error:
        conn.disconnect()
        raise redis.ConnectionError(
            f"Error while reading from {_address(conn)}: {error.args}"
        ) from error
    except BaseException:
        conn.disconnect()
        raise
    return replies.result()


def _recv_exactly(sock: Any, count: int) -> bytes:
    chunks: list[bytes] = []
    while count > 0:
        chunk: bytes = sock.recv(min(count, 1 << 20))
        if not chunk:
            raise redis.ConnectionError("Connection closed by server.")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def send_raw(conn: Any, data: bytes) -> None:
    """Sends `data` on the open socket of `conn`, as `send_packed_command` does once
    connected and with no health check due (the same exceptions). The socket's own timeout
    bounds the whole send, however often a signal interrupts it."""
    try:
        conn._sock.sendall(data)
    except TimeoutError:
        conn.disconnect()
        raise redis.TimeoutError("Timeout writing to socket") from None
    except OSError as error:
        conn.disconnect()
        raise redis.ConnectionError(f"Error while writing to socket: {error.args}") from error
    except BaseException:  # interrupted half way: the rest of the command never follows
        conn.disconnect()
        raise


_WATCH = "_plainredis_watch"  # set on a redis.asyncio connection: its `_Watch`


class _Watch:
    """The read timeout of one redis.asyncio connection, kept by one timer that is set
    again only when it fires.

    `asyncio.timeout` schedules a timer and cancels it for every read; in a chat turn that
    costs about a tenth of the saver's client time. Here a read records its deadline and its
    task; the connection's one timer, when it fires, cancels the task of a read past its
    deadline (or whose deadline it was set for: a loop that rounds its timers, as uvloop does
    to the millisecond, may run it a little early), else is set for the current read's
    deadline, or lapses when no read is under way (the next read sets it). While the
    connection is busy it fires once per `socket_timeout` at most; a read whose deadline falls
    before the pending timer's (a lowered `socket_timeout`) sets it earlier. A fired timer
    means what it means to `asyncio.timeout`: the task is cancelled, and the read turns the
    cancellation into a timeout unless something else cancelled the task too
    (`Task.uncancel`, Python 3.11+). Only the timer set last acts: one left on a loop the
    connection has moved from does nothing, should it come back.
    """

    __slots__ = ("at", "cancelling", "due", "fired", "handle", "loop", "task", "timer")

    def __init__(self) -> None:
        self.loop: Any = None  # the loop the timer is set on, while it is set
        self.handle: Any = None  # the timer (uvloop's for a deadline due now has no when())
        self.timer = 0  # counts the timers set: only the last one acts
        self.due = 0.0  # the deadline the timer was set for
        self.task: Any = None  # the read's asyncio.Task (3.11+: cancelling()), if under way
        self.at = 0.0  # the read's deadline
        self.cancelling = 0
        self.fired = False

    def start(self, task: Any, timeout: float) -> None:
        loop = task.get_loop()
        self.task, self.at, self.fired = task, loop.time() + timeout, False
        self.cancelling = task.cancelling()
        if self.handle is None or self.loop is not loop or self.due > self.at:
            if self.handle is not None and self.loop is loop:
                self.handle.cancel()
            self._set(loop)

    def _set(self, loop: Any) -> None:
        self.timer += 1
        self.due = self.at
        self.loop, self.handle = loop, loop.call_at(self.at, self._due, self.timer)

    def _due(self, timer: int) -> None:
        if timer != self.timer:  # replaced by a timer set since
            return
        task, loop = self.task, self.loop
        if task is None:  # no read under way: lapse until the next read sets a timer
            self.loop = self.handle = None
        elif self.due >= self.at or loop.time() >= self.at:  # this read's own deadline
            self.loop = self.handle = None
            self.fired = True
            task.cancel()
        else:  # set for an earlier read: wait on for this one's
            self._set(loop)

    def stop(self) -> bool:
        """Ends the read: whether its cancellation is the timer's alone (a timeout)."""
        task, self.task = self.task, None
        if not self.fired or task is None:
            return False
        self.fired = False
        return bool(task.uncancel() <= self.cancelling)


def _watch(conn: Any, timeout: Any) -> _Watch | None:
    """The started `_Watch` of `conn` for a read under `timeout` seconds, or None where
    `asyncio.timeout` does it (no positive timeout, a task without `uncancel`)."""
    if type(timeout) is not float and type(timeout) is not int or timeout <= 0:
        return None
    task = asyncio.current_task()
    if task is None or not hasattr(task, "uncancel"):
        return None
    watch: _Watch | None = getattr(conn, _WATCH, None)
    if watch is None:
        watch = _Watch()
        setattr(conn, _WATCH, watch)
    watch.start(task, timeout)
    return watch


async def _read(reader: Any, replies: Replies) -> None:
    while not replies.take(
        # inside a long bulk string, all the rest of it at once
        await reader.readexactly(replies.missing)
        if replies.missing > _RECV
        else await reader.read(_RECV)
    ):
        pass


async def aexchange(conn: Any, packed: bytes) -> Any:
    """`send_packed_command` then `read_response` of a redis.asyncio connection `conn`,
    for a script call on an open RESP2 connection with no health check due (see
    `plain_io`; the shell checks): one write, and the reply parsed straight off its
    stream, each under the connection's `socket_timeout` (the read's kept by a `_Watch`),
    with redis-py's exceptions (a failed or timed-out exchange disconnects `conn`; an
    error reply keeps it). A failed exchange drops what the transport had not sent yet:
    closed gently, it would send the rest of a request the caller was told failed, and the
    server would run it after whatever the caller did next."""
    writer, reader = conn._writer, conn._reader
    replies = Replies(conn._parser.parse_error)
    sending = False
    try:
        writer.write(packed)
        if writer.transport.get_write_buffer_size():  # else nothing waits in the transport
            sending = True
            async with _async_timeout(conn.socket_timeout):  # the send and the reply each
                await writer.drain()  # get the whole timeout, as in redis-py
        sending = False
        watch = _watch(conn, conn.socket_timeout)
        if watch is None:
            async with _async_timeout(conn.socket_timeout):
                await _read(reader, replies)
        else:
            try:
                await _read(reader, replies)
            except asyncio.CancelledError:
                if watch.stop():
                    raise asyncio.TimeoutError from None
                raise
            finally:
                watch.stop()
    except asyncio.TimeoutError:
        await _drop(conn, writer)
        if sending:
            raise redis.TimeoutError("Timeout writing to socket") from None
        raise redis.TimeoutError(f"Timeout reading from {_address(conn)}") from None
    except redis.RedisError:
        await _drop(conn, writer)
        raise
    except OSError as error:
        await _drop(conn, writer)
        raise redis.ConnectionError(
            f"Error while reading from {_address(conn)}: {error.args}"
        ) from error
    except asyncio.IncompleteReadError:
        await _drop(conn, writer)
        raise redis.ConnectionError("Connection closed by server.") from None
    except BaseException:
        await _drop(conn, writer)
        raise
    return replies.result()


async def _drop(conn: Any, writer: Any) -> None:
    """Disconnects `conn` after a failed exchange on `writer`, its unsent bytes discarded."""
    writer.transport.abort()
    await conn.disconnect(nowait=True)


def _address(conn: Any) -> str:
    path = getattr(conn, "path", None)
    return str(path) if path else f"{getattr(conn, 'host', '?')}:{getattr(conn, 'port', '?')}"


def direct_pool(client: Any, plain: type) -> Any | None:
    """The pool of `client` when the shell may run a script call on it directly, else None.

    Only for a client of exactly the class `plain` (`redis.Redis` or
    `redis.asyncio.Redis`) whose `execute_command` is redis-py's own, on the class and on
    the instance (so instrumentation such as OpenTelemetry or Sentry, or a mock, sees every
    command), as are its connections' `send_command` and `pack_command`; without response
    callbacks for scripts, a single shared connection or a client-side cache; encoding
    text as UTF-8; and while redis-py's own metrics are off.
    """
    if type(client) is not plain or _metrics_enabled() or "execute_command" in vars(client):
        return None
    execute = getattr(plain, "execute_command", None)
    if getattr(execute, "__module__", None) != plain.__module__ or hasattr(execute, "__wrapped__"):
        return None
    callbacks = getattr(client, "response_callbacks", None)
    if callbacks and _reshapes_scripts(callbacks):
        return None  # the client reshapes script replies: let it
    if getattr(client, "connection", None) is not None or getattr(
        client, "single_connection_client", False
    ):
        return None
    pool = getattr(client, "connection_pool", None)
    if pool is None or getattr(pool, "cache", None) is not None:
        return None
    connection = getattr(pool, "connection_class", None)
    for name in ("send_command", "pack_command"):  # overridden or wrapped: it watches commands
        method = getattr(connection, name, None)
        module = getattr(method, "__module__", None) or ""
        if not module.startswith("redis.") or hasattr(method, "__wrapped__"):
            return None  # unknown counts as overridden
    options = getattr(pool, "connection_kwargs", {})
    if codecs.lookup(options.get("encoding", "utf-8")).name != "utf-8":
        return None
    return pool


class Direct:
    """`direct_pool` of one client, its full check made again only when something it
    depends on that a running program may change is no longer the same object: the
    client's class and instance `execute_command` (instrumentation installed later), the
    pool and its connection class and that class's methods. Each is compared by identity (a
    wrapt wrapper compares equal to what it wraps; read from the class it is a new object
    each time, so it is always checked in full). Script reply callbacks and redis-py's
    metrics, which turn the direct path off whatever else holds, are looked at on every
    call."""

    __slots__ = ("_client", "_memo", "_plain")

    def __init__(self, client: Any, plain: type) -> None:
        self._client, self._plain = client, plain
        # (pool, its connection class, the class's and the instance's execute_command,
        # the connection class's send_command and pack_command, the verdict)
        self._memo: tuple[Any, ...] | None = None

    def serves(self, client: Any) -> bool:
        return client is self._client

    def pool(self) -> Any | None:
        client, plain = self._client, self._plain
        if type(client) is not plain or _metrics_enabled():
            return None
        callbacks = getattr(client, "response_callbacks", None)
        if callbacks and _reshapes_scripts(callbacks):
            return None
        pool = getattr(client, "connection_pool", None)
        cls = getattr(pool, "connection_class", None)
        memo = self._memo
        if (
            memo is not None
            and memo[0] is pool
            and memo[1] is cls
            and memo[2] is getattr(plain, "execute_command", None)
            and memo[3] is (getattr(client, "__dict__", None) or {}).get("execute_command")
            and memo[4] is getattr(cls, "send_command", None)
            and memo[5] is getattr(cls, "pack_command", None)
        ):
            return memo[6]
        verdict = direct_pool(client, plain)
        self._memo = (  # one store: no tearing
            pool,
            cls,
            getattr(plain, "execute_command", None),
            (getattr(client, "__dict__", None) or {}).get("execute_command"),
            getattr(cls, "send_command", None),
            getattr(cls, "pack_command", None),
            verdict,
        )
        return verdict


def _reshapes_scripts(callbacks: Any) -> bool:
    """Whether reply callbacks for EVALSHA or EVAL are set. redis-py keeps them in a
    `CaseInsensitiveDict`, a dict whose keys it stores in capitals: looked up in the dict
    itself, without the case-folding method each call would run."""
    if isinstance(callbacks, dict):
        return dict.__contains__(callbacks, "EVALSHA") or dict.__contains__(callbacks, "EVAL")
    return "EVALSHA" in callbacks or "EVAL" in callbacks


def reconnects(conn: Any) -> bool:
    """Whether redis-py 7+ marked `conn` to reconnect before its next command (its server
    is moving); older redis-py never does."""
    return bool(getattr(conn, "should_reconnect", bool)())


_FORK_LOCK = threading.Lock()  # replaced in every forked child, so never inherited held
_FORKS = 0  # forks this process descends from: a child sees a count its parent never had


def _renew_fork_lock() -> None:
    global _FORK_LOCK, _FORKS
    _FORK_LOCK = threading.Lock()
    _FORKS += 1


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere no process forks
    os.register_at_fork(after_in_child=_renew_fork_lock)


class Idle:
    """Connections a saver keeps between its script calls, for a pool only it uses.

    redis-py's pool hands a connection out under a lock, with observability hooks, and takes
    it back the same way; with LangGraph saving from worker threads that costs more per call
    than the rest of the client's work. A saver that made its own client keeps here each
    connection whose call ended cleanly (its reply read whole) and takes it again without the
    pool, last in first out. Before reuse the shell reconnects one redis-py marked to
    reconnect (a server moving) and, once it has been idle for over `FRESH` seconds, does
    what the pool does: it polls the connection and reconnects it if the server closed it.
    A connection used more recently is not polled when its call would be retried: the
    poll's system calls would each let another thread take the GIL, and the server closes
    an idle client only after its `timeout` of whole seconds; what else closes one in that
    half second (a crash, a kill) the retry handles, as for a connection lost during a call.
    With retries off it is polled every time. A call that failed, or was cancelled, gives
    its connection back to the pool.

    Kept connections stay "in use" to the pool, so they must not starve anyone of it: at
    most `KEEP` are kept, none from a pool of fewer than `8 * KEEP` connections, and none
    while one of the saver's calls waits for the pool; the shells give them all back before
    a call that borrows from the pool itself (a pipeline, a scan, any other command).
    Nothing is kept with a credential provider either: redis-py re-authenticates a
    connection when it returns to the pool. A forked child starts empty, as the pool itself
    does after a fork: the parent's sockets are not its to use.
    """

    KEEP = 4
    FRESH = 0.5  # seconds idle under which a kept connection is reused without a poll

    def __init__(self, client: Any) -> None:
        pool = getattr(client, "connection_pool", None)  # a cluster client has none: keep none
        size = getattr(pool, "max_connections", 0) or 0
        reauth = (getattr(pool, "connection_kwargs", None) or {}).get("credential_provider")
        self._limit = self.KEEP if size >= 8 * self.KEEP and reauth is None else 0
        self._forks = _FORKS
        self._kept: list[tuple[Any, float]] = []  # (connection, when its last call ended)
        self._waiting = 0
        self._lock = threading.Lock()

    @classmethod
    def of(cls, client: Any) -> Idle | None:
        """An `Idle` for the pool of `client`, or None when it may keep nothing: then the
        shell borrows from the pool as before, without taking, counting or keeping."""
        idle = cls(client)
        return idle if idle._limit else None

    def _forked(self) -> bool:
        """Forgets the parent's connections in a forked child (without closing them).

        The child gets a lock of its own: the parent's may have been held by a thread that
        does not exist in the child, and would stay locked for good. One thread of the
        child resets, under a lock that is new in every child."""
        if self._forks == _FORKS:  # no system call: a call takes this on every call
            return False
        with _FORK_LOCK:
            if self._forks != _FORKS:
                self._lock = threading.Lock()
                self._forks, self._kept, self._waiting = _FORKS, [], 0
        return True

    def take(self) -> tuple[Any, bool] | None:
        """A kept connection and whether to poll it before use (idle over `FRESH`, or
        without a retry), or None when none is kept (the pool gives one then)."""
        self._forked()
        try:
            conn, since = self._kept.pop()  # one bytecode: safe between threads
        except IndexError:
            return None
        return conn, _clock() - since > self.FRESH or not retries_drops(conn)

    def waiting(self, change: int) -> None:
        """A call starts (+1) or stops (-1) asking the pool for a connection."""
        with self._lock:
            self._waiting += change

    def keep(self, conn: Any) -> bool:
        """Keeps `conn` unless enough are kept or a call waits for the pool; False: the
        caller gives it back to the pool."""
        with self._lock:
            if self._waiting or len(self._kept) >= self._limit:
                return False
            self._kept.append((conn, _clock()))
            return True

    def __len__(self) -> int:
        return len(self._kept)

    def drain(self) -> list[Any]:
        """Every kept connection, no longer kept: for the pool to take back (none in a
        forked child, whose pool never lent them)."""
        if self._forked():
            return []
        with self._lock:
            kept, self._kept = self._kept, []
        return [conn for conn, _ in kept]
