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
from collections.abc import Sequence
from typing import Any

import redis

try:  # redis-py 7+: its own OpenTelemetry metrics, which count execute_command's calls
    from redis.observability.recorder import is_enabled as _metrics_enabled
except ImportError:  # pragma: no cover - older redis-py records no metrics

    def _metrics_enabled() -> bool:
        return False


__all__ = ["POOL_ARGS", "direct_pool", "gives_up", "pack"]

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
