"""What the sync and async shells share: construction checks and wrong-side errors."""

from __future__ import annotations

import codecs
import difflib
import functools
import inspect
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar
from urllib.parse import parse_qs, unquote, unquote_plus, urlsplit

import redis
import redis.asyncio as aioredis
from redis import cluster as redis_cluster
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import EqualJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import AuthenticationError, AuthorizationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ._core import Eval, Scan, client_example
from ._scripts import SCRIPTS

__all__ = [
    "AsyncSaverRetry",
    "SaverRetry",
    "check_database",
    "check_serde",
    "connect_options",
    "default_retry",
    "is_asyncio_client",
    "is_cluster_client",
    "is_final",
    "validate_client",
    "wire_args",
    "wrong_side",
]


def wire_args(command: Eval | Scan | tuple[Any, ...], fallback: bool = False) -> tuple[Any, ...]:
    """The arguments to send for one planned command.

    A script goes as EVALSHA, or as EVAL with its source when `fallback` is set
    (the server has not cached it yet).
    """
    if isinstance(command, Scan):
        raise TypeError("a Scan runs alone in its plan, through the client's scan_iter")
    if not isinstance(command, Eval):
        return command
    script = SCRIPTS[command.script]
    head = ("EVAL", script.source) if fallback else ("EVALSHA", script.sha)
    return (*head, len(command.keys), *command.keys, *command.args)


T = TypeVar("T")


def is_final(error: BaseException) -> bool:
    """Whether `error` is one no reconnect can fix: credentials or permissions the server
    refused, or a server certificate the client does not trust."""
    if isinstance(error, (AuthenticationError, AuthorizationError)):
        return True
    cause = error.__cause__ or error.__context__
    return isinstance(cause, ssl.SSLCertVerificationError)


class _Final(Exception):
    """Carries a final error through redis-py's retry loop, which retries its base class."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def _fail_once(fail: Callable[..., Any], error: BaseException, args: Any, kwargs: Any) -> Any:
    """Calls redis-py's failure handler (it disconnects) the way the loop would have."""
    with_count = kwargs.get("with_failure_count", args[1] if len(args) > 1 else False)
    return fail(error, 1) if with_count else fail(error)


class SaverRetry(Retry):
    """redis-py's `Retry`, except that a final error (see `is_final`) is raised at once."""

    def call_with_retry(self, do: Callable[[], T], fail: Any, *args: Any, **kwargs: Any) -> T:
        def attempt() -> T:
            try:
                return do()
            except Exception as exc:
                if is_final(exc):
                    raise _Final(exc) from exc
                raise

        try:
            return super().call_with_retry(attempt, fail, *args, **kwargs)
        except _Final as final:
            error = final.error
        _fail_once(fail, error, args, kwargs)
        raise error


class AsyncSaverRetry(AsyncRetry):
    """`SaverRetry` for redis.asyncio."""

    async def call_with_retry(
        self, do: Callable[[], Awaitable[T]], fail: Any, *args: Any, **kwargs: Any
    ) -> T:
        async def attempt() -> T:
            try:
                return await do()
            except Exception as exc:
                if is_final(exc):
                    raise _Final(exc) from exc
                raise

        try:
            return await super().call_with_retry(attempt, fail, *args, **kwargs)
        except _Final as final:
            error = final.error
        await _fail_once(fail, error, args, kwargs)
        raise error


def default_retry(asynchronous: bool = False) -> Any:
    """Reconnects for a few seconds (jittered backoff up to 1 s) after a dropped
    connection: every saver call is idempotent, so repeating one is safe. Refused
    credentials and untrusted certificates are reported at once."""
    factory = AsyncSaverRetry if asynchronous else SaverRetry
    # EqualJitterBackoff exists from redis-py 4 on (the floor is 5.0.1).
    return factory(EqualJitterBackoff(cap=1.0, base=0.01), 10)


def connect_options(
    url: Any, protocol: Any, options: dict[str, Any], cls: str, cluster: bool | None = None
) -> dict[str, Any]:
    """Checks `url`, `protocol` and the connection options, and returns the client
    options, with a default retry."""
    if not isinstance(url, str):
        raise TypeError(
            f"{cls} url must be a str like 'redis://127.0.0.1:6379/0', got "
            f"{type(url).__name__} {url!r}"
        )
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(
            f"{cls} url {redacted(url)!r} is not a Redis URL: use redis://host:port/db, "
            "rediss:// for TLS, or unix:///path/to.sock"
        )
    check_database(url, f"{cls} url")
    if isinstance(cluster, (str, bytes)):  # 'no' is true
        raise TypeError(
            f"{cls} cluster must be True, False or None (ask the server), got "
            f"{type(cluster).__name__} {cluster!r}"
        )
    if protocol not in (2, 3):
        raise ValueError(f"protocol={protocol!r}: use 2 (RESP2, any Redis 5+) or 3 (Redis 6+)")
    # The URL's query may set options too; redis-py reads them, and "0", "f", "false", "n",
    # "no" (any case) or nothing as false.
    query = {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}
    given = {**query, **options}
    decodes = given.get("decode_responses")
    if isinstance(decodes, str):
        decodes = decodes.upper() not in ("", "0", "F", "FALSE", "N", "NO")
    _check_codec(cls, decodes, given.get("encoding"), given.get("encoding_errors"), cluster is True)
    retry = default_retry(asynchronous=cls.startswith("Async"))
    # redis-py before 6 retries only the errors a connection lists here, whatever `retry`.
    listed = [RedisConnectionError, RedisTimeoutError]
    connect = {"protocol": protocol, "retry": retry, "retry_on_error": listed, **options}
    try:
        _check_keywords(url, connect, query, cls, cluster)
    except ValueError as error:  # redis-py's parse of the URL, which may quote its password
        raise ValueError(f"{cls} url {redacted(url)!r}: {scrubbed(str(error), url)}") from None
    return connect


_HIDDEN_OPTIONS = ("password", "username")  # query options redis-py logs in with


def secret_option(name: str) -> bool:
    """Whether the query option `name` may hold a credential: a login option, one named like
    a secret, or a misspelling of a login option (``pasword``)."""
    lowered = name.lower()
    return (
        lowered == "pw"
        or any(part in lowered for part in ("pass", "pwd", "secret", "token", "user", "auth"))
        or bool(difflib.get_close_matches(lowered, _HIDDEN_OPTIONS, n=1, cutoff=0.75))
    )


_HOST = re.compile(r"[\w.\-\[\]:%]*")  # what may follow the user info: host[:port]


def _user_info(url: str) -> tuple[str, str, str] | None:
    """``(scheme, user info, the rest)`` of `url`, or None without user info. The user info
    ends at the last ``@`` of the part `urlsplit` takes as the host's, when its path holds
    no ``@``; otherwise at the last ``@`` followed by what can be a host. A password may
    hold ``/``, ``?``, ``#`` or ``@``, which end that part early (such a URL is an error to
    report, without its password), while an ``@`` in a query value (``?name=me@work&...``)
    is no such."""
    scheme, sep, after = url.partition("://")
    if not sep:
        return None
    host_part = re.split(r"[/?#]", after, maxsplit=1)[0]
    path = re.split(r"[?#]", after[len(host_part) :], maxsplit=1)[0]
    if "@" in host_part and "@" not in path:
        userinfo = host_part.rpartition("@")[0]
        return scheme, userinfo, after[len(userinfo) + 1 :]
    for at in reversed([i for i, c in enumerate(after) if c == "@"]):
        if _HOST.fullmatch(re.split(r"[/?#]", after[at + 1 :], maxsplit=1)[0]):
            return scheme, after[:at], after[at + 1 :]
    return None


def shown_option(name: str, value: Any) -> str:
    """``name=value`` of a query or keyword option for a message, the value masked when
    `secret_option` says it may be a credential."""
    return f"{name}=***" if secret_option(name) else f"{name}={value!r}"


def redacted(url: str) -> str:
    """`url` for a message: the password of its user info masked, and the values of query
    options that may hold a credential (`secret_option`). The user info ends at the last
    ``@`` of the URL: a password may hold ``/``, ``?`` or ``#``, which end the host part for
    `urlsplit` (such a URL is an error to report, and its password must not be in it)."""
    base, mark, rest = url.partition("?")
    if mark:
        query, hash_mark, fragment = rest.partition("#")
        items = [
            f"{item.partition('=')[0]}=***"
            if secret_option(unquote_plus(item.partition("=")[0]))
            else item
            for item in query.split("&")
        ]
        url = base + "?" + "&".join(items) + hash_mark + fragment
    found = _user_info(url)
    if found is None:
        return url
    scheme, userinfo, rest = found
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}:***@{rest}" if colon else url


def scrubbed(text: str, url: str) -> str:
    """`text`, an error about `url` (redis-py's, say, which quotes the part of the URL it
    could not parse), with each quoted value that is a credential of `url`, or a piece of
    its password that urlsplit cut at a ``/``, ``?``, ``#`` or ``:``, masked: its password
    (see `_user_info`) and the values of its secret query options (`secret_option`)."""
    secrets: set[str] = set()
    found = _user_info(url)
    if found is not None and ":" in found[1]:
        password = found[1].partition(":")[2]
        for whole in (password, unquote(password)):
            secrets |= {whole, *re.split(r"[/?#:@]", whole)}
    for item in url.partition("?")[2].partition("#")[0].split("&"):
        name, _, value = item.partition("=")
        if value and secret_option(unquote_plus(name)):
            secrets |= {value, unquote_plus(value)}
    secrets.discard("")

    def mask(quoted: re.Match[str]) -> str:
        return f"{quoted[1]}***{quoted[1]}" if quoted[2] in secrets else quoted[0]

    return re.sub(r"""(['"])(.*?)\1""", mask, text) if secrets else text


def check_database(url: str, subject: str) -> None:
    """Refuses a redis:// or rediss:// URL whose path redis-py would not read as a database
    number (it quietly uses database 0 then), unless the query names the database. `subject`
    names the URL in the message, which leaves the URL out (it may hold a password)."""
    parts = urlsplit(url)
    if url.startswith("unix://") or "db" in parse_qs(parts.query):
        return
    if not url.startswith(("redis://", "rediss://")):  # else the whole URL reads as a path
        raise ValueError(
            f"{subject} does not start with redis://, rediss:// or unix://: write it as "
            "redis://host:6379/0 (rediss:// for TLS, unix:///path/to/redis.sock for a socket)"
        )
    path = unquote(parts.path).replace("/", "")
    if "@" in path:  # a '/' in the user info ended the host early
        raise ValueError(f"{subject} has a '/' in its username or password: write it as %2F")
    try:
        database = int(path) if path else 0
    except ValueError:
        database = -1
    if database < 0:
        raise ValueError(
            f"{subject} names database {path!r}, which is not a number: a Redis database "
            "is a number, as in redis://host:6379/0 (or leave the path out for database 0)"
        )


_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")
# What a blocking RedisCluster hands on to its nodes' clients; it drops any other keyword.
_CLUSTER_PASSES = frozenset(getattr(redis_cluster, "REDIS_ALLOWED_KEYS", ()))


@functools.lru_cache(maxsize=64)
def _parameters(*classes: type) -> frozenset[str]:
    """The keyword names the `__init__` of `classes` and their bases declare."""
    names: set[str] = set()
    for klass in classes:
        for base in klass.__mro__[:-1]:  # not object
            init = vars(base).get("__init__")
            if init is not None:
                names.update(inspect.signature(init).parameters)
    return frozenset(names - {"self", "args", "kwargs", "connection_kwargs"})


def _check_keywords(
    url: str, options: dict[str, Any], query: dict[str, str], cls: str, cluster: bool | None
) -> None:
    """Refuses, naming it, a misspelt or misplaced connection option, which would fail at
    the first call (or, on a blocking cluster client, be dropped silently). Names the
    connection, its pool and the client declare pass at once; any other is tried on one
    connection object (no socket) built as the saver's pool will, which is what decides.
    A `RedisCluster` option needs ``cluster=True``."""
    asynchronous = cls.startswith("Async")
    side: Any = aioredis if asynchronous else redis
    # The pools the savers build (`_new_client`): the async one is blocking (`timeout=`).
    pool_class = aioredis.BlockingConnectionPool if asynchronous else redis.ConnectionPool
    cluster_named = _parameters(AsyncRedisCluster if asynchronous else RedisCluster)
    cluster_takes = cluster_named | (frozenset() if asynchronous else _CLUSTER_PASSES)
    # What the blocking client's from_url takes itself, and its pool's client-side cache,
    # which it registers for its metrics and never hands on (redis.asyncio takes neither:
    # its connections are given them, and refuse them).
    consumed = set() if asynchronous else {"single_connection_client", "cache", "cache_config"}
    connection_class = (
        options.get("connection_class")
        or side.connection.parse_url(url).get("connection_class")
        or side.Connection
    )
    known = _parameters(connection_class, pool_class) | consumed
    if cluster:
        known |= cluster_takes
    if all(name in known for name in (*options, *query)):
        return
    left = {name: value for name, value in options.items() if name not in consumed}
    while True:
        pool = pool_class.from_url(url, **left)
        try:
            pool.connection_class(**pool.connection_kwargs)
            return
        except TypeError as error:
            found = _UNEXPECTED.search(str(error))
            if found is None or found.group(1) not in {**query, **left}:
                raise
            name = found.group(1)
        if cluster and name in cluster_takes:
            if name not in left:  # in the query, which the cluster client reads itself
                return
            del left[name]  # the cluster client's own, not its connections'
            continue
        where = shown_option(name, left[name] if name in left else query[name]) + (
            "" if name in left else " in the url"
        )
        if name == "connection_pool":
            fix = "to use a pool of your own, pass client=redis.Redis(connection_pool=pool)"
        elif name in _parameters(side.Redis):
            fix = (
                "it is an option of the client, which the saver builds on a pool of its "
                "own: build the client with it and pass client="
            )
        elif name in cluster_named:
            fix = "it is an option of RedisCluster: pass cluster=True for a cluster"
        else:
            close = difflib.get_close_matches(name, sorted(known | cluster_named), n=1)
            fix = (f"did you mean {close[0]}=? " if close else "") + (
                "Check its spelling, or build the client yourself and pass client="
            )
        raise TypeError(
            f"{cls} got {where}, which redis-py's "
            f"{pool.connection_class.__name__} does not take: {fix}"
        )


def check_serde(serde: Any) -> None:
    """Rejects a `serde` that is not a LangGraph serializer, before LangGraph wraps it."""
    if serde is None or hasattr(serde, "dumps_typed") or hasattr(serde, "dumps"):
        return
    raise TypeError(
        f"serde must be a LangGraph SerializerProtocol (dumps_typed/loads_typed), got "
        f"{type(serde).__name__}: pass e.g. JsonPlusSerializer(), or leave it out"
    )


def _codec_name(encoding: Any) -> str:
    try:
        return codecs.lookup(str(encoding)).name
    except LookupError:
        return str(encoding)


def _check_codec(cls: str, decodes: Any, encoding: Any, errors: Any, cluster: bool = False) -> None:
    """Refuses a client (or URL options) that decodes replies or encodes keys in anything
    but strict UTF-8, naming the fix (a client of the kind `cls` takes, a cluster client
    when `cluster`)."""
    if decodes:
        raise ValueError(
            f"{cls} stores raw bytes and needs a client with decode_responses=False; give "
            "the saver a client of its own, with a pool of its own (the pool carries the "
            f"setting), e.g. client={client_example(cls, cluster)}, or pass url= without it"
        )
    if _codec_name(encoding or "utf-8") != "utf-8":
        raise ValueError(
            f"{cls} keeps its keys in UTF-8 and needs a client with encoding='utf-8', got "
            f"encoding={encoding!r}: savers on other encodings would build other keys for "
            "the same thread; give the saver a client of its own, or pass url= without it"
        )
    if errors not in (None, "strict"):
        raise ValueError(
            f"{cls} needs a client with encoding_errors='strict', got encoding_errors="
            f"{errors!r}: it would store ids UTF-8 cannot encode under the key of another "
            "id; give the saver a client of its own, or pass url= without it"
        )


def is_asyncio_client(client: Any) -> bool:
    """Whether `client` is a `redis.asyncio` client: by its class (a subclass, a user's or
    instrumentation's, counts as its base), by the class it reports (a transparent proxy's),
    or by a coroutine `execute_command` (a wrapper that hands calls on)."""
    return (
        isinstance(client, (aioredis.Redis, AsyncRedisCluster))
        or any(k.__module__.startswith("redis.asyncio") for k in type(client).__mro__)
        or inspect.iscoroutinefunction(getattr(client, "execute_command", None))
    )


def is_cluster_client(client: Any) -> bool:
    """Whether `client` is a redis-py cluster client, blocking or asyncio: by its class, by
    the class it reports, or by the node map a wrapper hands on."""
    return isinstance(client, (RedisCluster, AsyncRedisCluster)) or hasattr(client, "nodes_manager")


def validate_client(client: Any, cls: str, expected: str) -> None:
    """Rejects clients the saver cannot use, naming the fix."""
    if not (hasattr(client, "execute_command") and hasattr(client, "pipeline")):
        raise TypeError(
            f"{cls} client must be a redis-py client, got {type(client).__name__}: pass "
            "client=redis.Redis(...) (or redis.asyncio.Redis for AsyncRedisSaver), or url="
        )
    # What the client encodes and decodes with: its encoder (a cluster client's too), else
    # what its pool gives each connection.
    encoder = client.get_encoder() if hasattr(client, "get_encoder") else None
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    decodes = getattr(encoder, "decode_responses", kwargs.get("decode_responses"))
    _check_codec(
        cls,
        decodes,
        getattr(encoder, "encoding", kwargs.get("encoding")),
        getattr(encoder, "encoding_errors", kwargs.get("encoding_errors")),
        is_cluster_client(client),
    )
    is_async = is_asyncio_client(client)
    if expected == "async" and not is_async:
        raise TypeError(
            f"{cls} needs a redis.asyncio client, got {type(client).__module__}."
            f"{type(client).__name__}: use RedisSaver for a blocking client"
        )
    if expected == "sync" and is_async:
        raise TypeError(
            f"{cls} needs a blocking redis client, got {type(client).__module__}."
            f"{type(client).__name__}: use AsyncRedisSaver for a redis.asyncio client"
        )


def wrong_side(cls: str, method: str, other: str, usage: str) -> NoReturn:
    raise NotImplementedError(
        f"{cls}.{method}() is not available: {cls} is {usage}. Use {other} "
        f"(from langgraph_checkpoint_plainredis import {other}) for this calling style."
    )
