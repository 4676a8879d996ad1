"""The request bytes of a script call, and when a shell may send them itself.

Every saver call is one script call, and `Redis.execute_command` costs more client time
than planning it: redis-py encodes each argument through its encoder, records metrics and
builds closures for its retry loop. For a plain client the shells pack the request here
and run it on a connection of the client's own pool, under that connection's retry
policy, the way `execute_command` does. Any other client, and every command that is not
a script call, goes through `execute_command`.
"""

from __future__ import annotations

import codecs
import functools
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis

try:  # redis-py 7+: its own OpenTelemetry metrics, which count execute_command's calls
    from redis.observability.recorder import is_enabled as _metrics_enabled
except ImportError:  # pragma: no cover - older redis-py records no metrics

    def _metrics_enabled() -> bool:
        return False


__all__ = [
    "POOL_ARGS",
    "Idle",
    "direct_pool",
    "gives_up",
    "pack",
    "reconnects",
    "retries_drops",
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


def retries_drops(conn: Any) -> bool:
    """Whether a call on `conn` would be retried if the server had closed the connection:
    its `Retry` allows a retry, for `ConnectionError`, and (redis-py before 6) the
    connection lists that error in `retry_on_error`."""
    retry = getattr(conn, "retry", None)
    count = getattr(retry, "_retries", 0)  # redis-py before 6 has no get_retries()
    supported = tuple(getattr(retry, "_supported_errors", ()))
    dropped = redis.ConnectionError("closed by the server")
    return count != 0 and isinstance(dropped, supported) and not gives_up(conn, dropped)


# Time that also runs while the machine sleeps (Linux), so that a suspended process does
# not take an idle connection for a fresh one; elsewhere the monotonic clock.
_clock = (
    functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME)
    if hasattr(time, "CLOCK_BOOTTIME")
    else time.monotonic
)


def pack(args: Sequence[str | bytes | int], errors: str = "strict") -> bytes:
    """One command as RESP: an array of bulk strings (the same in RESP2 and RESP3).

    `str` goes as UTF-8 (`errors` as the client's ``encoding_errors``), `int` in decimal.
    """
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode("utf-8", errors)
        elif isinstance(arg, int) and not isinstance(arg, bool):
            data = b"%d" % arg
        else:
            raise TypeError(f"a script argument must be str, bytes or int, got {arg!r}")
        parts += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(parts)


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
    callbacks = getattr(client, "response_callbacks", {})
    if "EVALSHA" in callbacks or "EVAL" in callbacks:
        return None  # the client reshapes script replies: let it
    if getattr(client, "connection", None) is not None or getattr(
        client, "single_connection_client", False
    ):
        return None
    pool = getattr(client, "connection_pool", None)
    if pool is None or getattr(pool, "cache", None) is not None:
        return None
    connection = getattr(pool, "connection_class", None)
    for method in ("send_command", "pack_command"):  # overridden: it watches commands
        module = getattr(getattr(connection, method, None), "__module__", None) or ""
        if not module.startswith("redis."):  # unknown counts as overridden
            return None
    options = getattr(pool, "connection_kwargs", {})
    if codecs.lookup(options.get("encoding", "utf-8")).name != "utf-8":
        return None
    return pool


def reconnects(conn: Any) -> bool:
    """Whether redis-py 7+ marked `conn` to reconnect before its next command (its server
    is moving); older redis-py never does."""
    return bool(getattr(conn, "should_reconnect", bool)())


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
    while one of the saver's calls waits for the pool. Nothing is kept with a credential
    provider either: redis-py re-authenticates a connection when it returns to the pool. A
    forked child starts empty, as the pool itself does after a fork: the parent's sockets
    are not its to use.
    """

    KEEP = 4
    FRESH = 0.5  # seconds idle under which a kept connection is reused without a poll

    def __init__(self, client: Any) -> None:
        pool = getattr(client, "connection_pool", None)  # a cluster client has none: keep none
        size = getattr(pool, "max_connections", 0) or 0
        reauth = (getattr(pool, "connection_kwargs", None) or {}).get("credential_provider")
        self._limit = self.KEEP if size >= 8 * self.KEEP and reauth is None else 0
        self._pid = os.getpid()
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
        """Forgets the parent's connections in a forked child (without closing them)."""
        if self._pid == os.getpid():
            return False
        with self._lock:
            self._pid, self._kept, self._waiting = os.getpid(), [], 0
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
