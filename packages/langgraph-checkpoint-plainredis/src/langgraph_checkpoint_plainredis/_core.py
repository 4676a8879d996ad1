"""The I/O-free core shared by `RedisSaver` and `AsyncRedisSaver`.

Every operation is a generator of *plans*: it yields a list of commands (`Eval` or
a plain command tuple), receives the list of replies, and finally returns its result.
A list operation also yields `CheckpointTuple`s between plans. The sync and async
shells only run plans (one round trip each) and feed the replies back.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import signal
import threading
import uuid
import zlib
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import INTERRUPT
from redis.exceptions import (
    AskError,
    ClusterCrossSlotError,
    ClusterDownError,
    MovedError,
    NoPermissionError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)

from ._codec import (
    Known,
    StoredCheckpoint,
    decode_blob,
    decode_blobs,
    decode_checkpoint,
    decode_write,
    encode_blob,
    encode_checkpoint,
    encode_write,
)
from ._deflate import COMPRESS_MIN, LEVEL, ValueMemo
from ._errors import (
    ArgumentTypeError,
    CorruptDataError,
    LegacyKeyspaceError,
    PlainRedisError,
    WrongTypeError,
)
from ._keys import (
    KeySpace,
    LegacyKeys,
    ThreadKeys,
    blob_channel,
    blob_suffix,
    escape,
    escape_run,
    index_tag,
    listed_namespace,
    listed_thread,
    member_text,
    parse_run_member,
    unescape,
    write_field,
)
from ._scripts import SCRIPTS

_V = TypeVar("_V")

__all__ = [
    "CLUSTER_RETRY_DELAYS",
    "Eval",
    "Plan",
    "SaverCore",
    "Scan",
    "Shared",
    "Step",
    "client_example",
    "cluster_retries",
    "info_refused",
    "interrupted",
    "refuses_resp3",
    "resp2_needed",
    "translate_error",
]


@dataclass(frozen=True)
class Eval:
    """One call of a named Lua script."""

    script: str
    keys: tuple[str, ...]
    args: tuple[str | bytes | int, ...]


@dataclass(frozen=True)
class Scan:
    """Every key matching `pattern`, on every master (SCAN, never KEYS)."""

    pattern: str


Command = Eval | Scan | tuple[Any, ...]
Plan = list[Command]
# What an operation generator yields: a plan to run, or (for list) a result.
Step = Plan | CheckpointTuple

# Channel versions are "<zero-padded counter>.<48 random bits>": string order follows
# the counter, and two forks from one parent never pick the same version.
VERSION_DIGITS = 10
# While a cluster migrates a thread's slot, a multi-key script is refused (TRYAGAIN, or
# "TTL exhausted" once redis-py gives up redirecting) until the slot has moved. Every
# script is idempotent, so the shells retry a refused plan after these pauses (seconds).
CLUSTER_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
_REGISTRY_PAGE = 500  # threads per ZSCAN call of list(None)
_log = logging.getLogger("langgraph_checkpoint_plainredis")
_LIST_PAGE = 128
_DECODE_AHEAD = 16  # list entries whose blobs are decoded together, ahead of their tuples
_BATCH_THREADS = 64
_HISTORY_HOPS = 256  # ancestors one DeltaChannel history call reads at most (a script's time)
# Metadata LangGraph writes in every checkpoint of a graph with a DeltaChannel: the channels'
# update counters since their last snapshot (none once all snapshot), or LangGraph.js's mark.
_DELTA_COUNTERS = "counters_since_delta_snapshot"
_DELTA_JS = "delta_writes_versioned"
# What a serializer may raise on good bytes: reported as it is, not as damage to the key
# (whose error tells the user to delete it).
_NOT_THE_DATA = (MemoryError, RecursionError, TimeoutError)
_INDEX_PAGE = 128  # threads per page of an indexed list(None)
# On a cluster a query checks a thread's namespace key in its slot, then drops the thread's
# index member in another: only a member this old (ms), which no put can have re-added in
# between (a put adds its thread at the index node's clock before it writes), goes.
_INDEX_GRACE_MS = 60_000
_REINDEX_PAGE = 1024  # checkpoints per light list call of reindex
_UUID_EPOCH = 0x01B21DD213814000  # 100 ns steps from 1582-10-15 to 1970-01-01
_DELTA_SEEN = 4096  # (thread, namespace) pairs whose DeltaChannels a saver remembers
_PAUSED_THREADS = 1024  # threads whose paused subgraphs a saver remembers, at most
_NS_SEP = "|"  # LangGraph joins a subgraph's namespace to its parent's with it


def cluster_retries(error: Exception) -> bool:
    """Whether a cluster refused a plan for a while only: every script is idempotent, so
    the shells send it again after a pause (`CLUSTER_RETRY_DELAYS`).

    - The thread's slot is being migrated: scripts build some key names themselves (a
      checkpoint's blobs); while the slot moves, a node may hold only part of the thread and
      refuses such a script. It runs once the slot has moved.
    - A node restarts or fails over: redis-py before 6 gives up after its own three tries
      ("The cluster is down"), whatever the client's retry policy.
    """
    if isinstance(error, (TryAgainError, ClusterDownError)):
        return True
    text = str(error)
    return "TRYAGAIN" in text or "non local key" in text or "TTL exhausted" in text


def parked_check(prefix: str) -> tuple[str, str]:
    """The command that reads whether a migration from 0.1.0 under `prefix` is unfinished:
    it parks 0.1.0's registry while it works (`refuse_parked` reads its reply)."""
    return ("EXISTS", LegacyKeys(prefix).stash)


def refuse_parked(prefix: str, exists: Any) -> None:
    """Raises `LegacyKeyspaceError` when `parked_check`'s reply says the registry is parked."""
    if exists:
        raise LegacyKeyspaceError(prefix, parked=LegacyKeys(prefix).stash)


def interrupted(serde: Any, typed: tuple[str, bytes], error: Exception, key: str) -> None:
    """Raises when `error`, from decoding `typed` (the value of `key`) with `serde`, hides
    an interruption, not damage to the bytes: ormsgpack turns whatever its ``ext_hook``
    raises into ``ValueError('ext_hook failed')``, without the exception (LangGraph's hook
    runs most of a decode), so a Ctrl-C's ``KeyboardInterrupt`` or a signal handler's
    timeout read as damage. When a second decode of the same bytes succeeds, they are sound
    and the first was interrupted: `KeyboardInterrupt` where only Ctrl-C can have done it
    (`_only_ctrl_c`), else `PlainRedisError` saying so (a transient `MemoryError` in the
    hook reads as Ctrl-C there too: nothing tells them apart). Else returns, and the bytes
    are taken as damaged."""
    if not (isinstance(error, ValueError) and str(error) == "ext_hook failed"):
        return
    try:
        serde.loads_typed(typed)
    except Exception:
        return
    if _only_ctrl_c():
        raise KeyboardInterrupt from None
    raise PlainRedisError(
        f"reading Redis key {key!r} was interrupted: an exception inside the serializer's "
        "ext_hook (a signal handler's, say), which ormsgpack does not pass on; the stored "
        "bytes are sound, so the call can be made again"
    ) from None


def _only_ctrl_c() -> bool:
    """Whether an exception raised inside a decode by a signal can only be Ctrl-C's: in the
    main thread (signal handlers run there only), with Python's own SIGINT handler (or
    asyncio.run's, whose second Ctrl-C raises `KeyboardInterrupt`) and no Python handler for
    any other signal (a timeout's SIGALRM, a SIGTERM's exit)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (OSError, ValueError):  # pragma: no cover - a signal Python cannot ask about
            continue
        if number == signal.SIGINT:
            if handler is not signal.default_int_handler and not _asyncio_sigint(handler):
                return False
        elif callable(handler):
            return False
    return True


def _asyncio_sigint(handler: Any) -> bool:
    """Whether `handler` is the SIGINT handler `asyncio.run` installs (Python 3.11+): a
    partial of its runner's `_on_sigint`."""
    method = getattr(handler, "func", handler)
    owner = getattr(method, "__self__", None)
    return getattr(method, "__name__", "") == "_on_sigint" and type(owner).__name__ == "Runner"


def refuses_resp3(error: BaseException) -> bool:
    """Whether `error` is a server's answer to redis-py's ``HELLO 3``: the server predates
    RESP3 (Redis 5), and the client must speak RESP2 (``protocol=2``)."""
    message = str(error)
    return "HELLO" in message and "unknown command" in message.lower()


def _resp3_refusal(error: BaseException) -> BaseException | None:
    """The server's refusal of ``HELLO 3`` that `error` is, or, for redis-py's cluster
    client, was raised from: it reports the refusal as "Cluster mode is not enabled on this
    node", with the refusal only in the exception's chain. Never one of the package's own
    errors (whose text quotes the refusal), nor anything an error was raised while handling,
    for any other error."""
    if isinstance(error, PlainRedisError):
        return None
    if refuses_resp3(error):
        return error
    if not isinstance(error, RedisClusterException):
        return None
    seen: set[int] = set()
    todo: list[BaseException | None] = [error.__cause__, error.__context__]
    while todo:
        cause = todo.pop()
        if cause is None or id(cause) in seen or isinstance(cause, PlainRedisError):
            continue
        seen.add(id(cause))
        if refuses_resp3(cause):
            return cause
        todo += [cause.__cause__, cause.__context__]
    return None


def resp2_needed(error: BaseException, fix: str) -> PlainRedisError:
    """The package's error for a client that speaks RESP3 to a server without it (see
    `refuses_resp3`), ending with `fix`."""
    return PlainRedisError(
        f"the server does not speak RESP3 (Redis before 6 answers {str(error)!r}): {fix}"
    )


def client_example(cls: str, cluster: bool = False) -> str:
    """How to build a client saver `cls` takes (a cluster client when `cluster`), for a
    message: with protocol=2, which Redis 5 needs (redis-py 8 speaks RESP3 by default)."""
    asynchronous = cls.startswith("Async")
    if cluster:
        name = (
            "redis.asyncio.cluster.RedisCluster" if asynchronous else "redis.cluster.RedisCluster"
        )
    else:
        name = "redis.asyncio.Redis" if asynchronous else "redis.Redis"
    return f"{name}.from_url(url, protocol=2)"


def translate_error(
    error: Exception, prefix: str, client: str | None = client_example("RedisSaver")
) -> PlainRedisError | None:
    """Maps an error reply to the package's exception, or None for other errors.
    `client` shows how to build the client the saver takes (`client_example`), named in the
    fix of a RESP3 client on a server without RESP3; None when the saver built its client
    from a URL, and `protocol=3` is to be left out."""
    message = str(error)
    # The reply starts the message, or follows redis-py 5's note on which command of a
    # pipeline failed (its async client quotes the reply as a tuple: "('MOVED ...',)").
    reply = message.rpartition("caused error: ")[2].lstrip("('\"")
    first_word = reply.split(" ", 1)[0]
    if isinstance(error, (ClusterCrossSlotError, MovedError, AskError)) or first_word in {
        "CROSSSLOT",
        "MOVED",
        "ASK",
    }:
        return PlainRedisError(
            f"{type(error).__name__}: {message}. The server is a cluster node but the saver "
            "talks to it as a standalone server (a user without INFO cannot tell): pass "
            "cluster=True"
        )
    refusal = _resp3_refusal(error)
    if refusal is not None:
        if client is None:
            return resp2_needed(
                refusal, "leave protocol=3 out: the saver's default, protocol=2, works on any Redis"
            )
        return resp2_needed(
            refusal,
            f"build the client with protocol=2, e.g. {client} (redis-py 8 defaults to 3), or "
            "pass url= and leave the saver's protocol at its default 2",
        )
    if "script can't run this command" in message:  # Redis 6 and 7 word it so
        return PlainRedisError(
            f"{message}: the saver's Redis user may not run a command its scripts call; grant "
            "the commands docs/operations/access.md lists. Redis stops a script at the first "
            "refused command, and a write script may have written part of its call by then: "
            "rerun the call once the user may"
        )
    # The reply starts the message, or follows redis-py's note on which command of a pipeline
    # failed, which may quote that command whole: a script sent as EVAL carries the codes in
    # its source.
    noted = message.find("caused error: PLAINREDIS_")
    at = message.find("PLAINREDIS_", max(noted, 0))
    if at < 0:
        return None
    code, _, rest = message[at:].partition(" ")
    if code == "PLAINREDIS_LEGACY":
        return LegacyKeyspaceError(prefix)
    if code == "PLAINREDIS_WRONGTYPE":
        found, expected, key = (rest.split(" ", 2) + ["", "", ""])[:3]
        return WrongTypeError(key, found, expected)
    if code == "PLAINREDIS_UNINDEXED":
        what, _, field = rest.partition(" ")
        return unindexed_error(what, prefix, [field])
    return None


def unindexed_error(
    what: str, prefix: str, missing: Iterable[str], indexing: tuple[str, ...] | None = None
) -> PlainRedisError:
    """The refusal of a write that a complete metadata index of the `missing` fields would
    miss: the saver does not index them. `indexing` is its `index_metadata` when it refused
    the write itself, from the marker it read first; None when the put script found a field
    marked complete since (by reindex()), having stored nothing."""
    fields = sorted(missing)
    names = ", ".join(map(repr, fields))
    late = indexing is None
    fix = (
        f"index_metadata with {names}"
        if indexing is None
        else f"index_metadata={tuple(sorted({*indexing, *fields}))!r}"
    )
    return PlainRedisError(
        f"{what}: the metadata index of {names} under prefix {prefix!r} is complete"
        f"{' (marked so by reindex() after this saver started)' if late else ''}, but this "
        f"saver does not index {'that field' if len(fields) == 1 else 'those fields'}"
        f"{'' if indexing is None else f' (index_metadata={indexing!r})'}: its writes would "
        f"be missing from it{', so it stored nothing' if late else ''}. Pass {fix} to every "
        "writer, or call reindex() on a saver with the fields you want indexed (it drops the "
        "index of the others)"
    )


def info_refused(
    error: ResponseError, prefix: str, client: str | None = client_example("RedisSaver")
) -> bool:
    """Whether the server is a cluster node, after `INFO cluster` failed with `error`: a user
    without INFO (NOPERM) or a server that renamed it away ("unknown command") is taken as
    standalone (pass cluster= to choose). A server that does not speak the protocol asked
    for raises the package's error; any other error is raised as it came."""
    if isinstance(error, NoPermissionError):
        return False
    mapped = translate_error(error, prefix, client)
    if mapped is not None:
        raise mapped from None
    if "unknown command" in str(error).lower():
        return False
    raise error


# A blob value in a put script call meaning "the channel is absent at this version": the
# script deletes any value stored there and writes no key. (A value of b"" means "only
# refresh its TTL"; an encoded blob is never empty and never starts with a NUL byte.)
ABSENT = b"\x00"


def _delta_counted(metadata: Any) -> tuple[list[str], bool]:
    """The DeltaChannels whose updates since their last snapshot a checkpoint's `metadata`
    counts (none once all snapshot), and whether it marks DeltaChannels without naming them
    (LangGraph.js's mark, or counters of another shape)."""
    if not isinstance(metadata, Mapping):
        return [], False
    counters = metadata.get(_DELTA_COUNTERS) or {}
    if not isinstance(counters, Mapping):
        return [], True
    return [str(channel) for channel in counters], _DELTA_JS in metadata


def _configurable(config: RunnableConfig | None, what: str) -> Mapping[str, Any]:
    if not isinstance(config, Mapping):
        raise TypeError(
            f"{what} needs a config dict like {{'configurable': {{'thread_id': '...'}}}}, "
            f"got {type(config).__name__} {config!r}"
        )
    conf = config.get("configurable")
    if not isinstance(conf, Mapping) or conf.get("thread_id") is None:
        raise ValueError(
            f"config['configurable']['thread_id'] is missing in {what}: pass "
            "config={'configurable': {'thread_id': 'my-thread'}} (got "
            f"{dict(conf) if isinstance(conf, Mapping) else conf!r})"
        )
    return conf


def _utf8(value: str, what: str) -> str:
    """`value`, when UTF-8 can encode it (keys are UTF-8); a lone surrogate, which a JSON
    escape like \\ud800 makes, cannot be, and is refused before anything is sent."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"{what}: {value!r} cannot be part of a Redis key: UTF-8 cannot encode "
                f"{value[error.start : error.end]!r} (a lone surrogate) at position "
                f"{error.start}; pass valid Unicode text"
            ) from None
    return value


def _str_field(conf: Mapping[str, Any], name: str, default: str | None = None) -> str:
    value = conf.get(name, default)
    if value is None:
        state = "is None" if name in conf else "is missing"
        root = " ('' for the root graph)" if name == "checkpoint_ns" else ""
        raise ValueError(f"config['configurable'][{name!r}] {state}: pass a str{root}")
    if isinstance(value, str):
        return _utf8(value, f"config['configurable'][{name!r}]")
    # Not a bool: `delete_thread(True)` refuses it, so such a thread could not be deleted.
    if (isinstance(value, int) and not isinstance(value, bool)) or type(value).__name__ == "UUID":
        return str(value)
    raise TypeError(
        f"config['configurable'][{name!r}] must be a str, got {type(value).__name__} "
        f"{value!r}: convert it with str()"
    )


def _named_id(config: RunnableConfig | None, what: str) -> Any:
    """The checkpoint id `config` names (None: none), when it can be part of a key."""
    value = get_checkpoint_id(config) if config else None
    return _id_value(value, f"{what}: config['configurable']['checkpoint_id']")


def _bound(config: RunnableConfig | None, what: str) -> str | None:
    """The checkpoint id `config` names as a bound of a listing, as stored (an int id is
    stored as its string); None when it names none ('' and 0 included, as in InMemorySaver)."""
    value = _named_id(config, what)
    return str(value) if value else None


def _id_value(value: Any, what: str) -> Any:
    """A checkpoint id as given (a str, or an int as InMemorySaver keeps it), or None."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        return _utf8(value, what)
    raise TypeError(
        f"{what} must be a str, got {type(value).__name__} {value!r}: pass the id of a "
        "checkpoint (LangGraph's are str)"
    )


def _no_id(value: Any) -> bool:
    """Whether a checkpoint id names no checkpoint: None, '' or 0, which a config reads as
    "the newest" (as InMemorySaver and LangGraph do)."""
    return value is None or (not isinstance(value, bool) and value in ("", 0))


def _put_arguments(checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
    """Refuses a `put` LangGraph would never make, before anything is sent: returns the
    checkpoint's id."""
    if not isinstance(checkpoint, Mapping):
        raise TypeError(
            f"put: checkpoint must be a dict (a LangGraph Checkpoint), got "
            f"{type(checkpoint).__name__} {checkpoint!r}"
        )
    if _no_id(checkpoint.get("id")):
        # '' or 0 in a config names no checkpoint: one stored under it could never be read
        # by its id
        state = "is missing" if "id" not in checkpoint else f"is {checkpoint['id']!r}"
        raise ValueError(
            f"put: checkpoint['id'] {state}: pass a checkpoint LangGraph made "
            "(empty_checkpoint() and create_checkpoint() give it a fresh id)"
        )
    cid = _id_value(checkpoint["id"], "put: checkpoint['id']")
    versions = checkpoint.get("channel_versions")
    for name, value in (
        ("checkpoint['channel_versions']", versions),
        ("new_versions", new_versions),
    ):
        if not isinstance(value, Mapping):
            raise TypeError(
                f"put: {name} must be a dict of channel name -> version, got "
                f"{type(value).__name__} {value!r}: pass {{}} when there is none"
            )
        for channel in value:
            if not isinstance(channel, str):
                raise TypeError(
                    f"put: {name} has a channel name that is not a str: "
                    f"{type(channel).__name__} {channel!r}"
                )
            _utf8(channel, f"put: a channel name in {name}")
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"put: metadata must be a dict (CheckpointMetadata), got {type(metadata).__name__} "
            f"{metadata!r}: pass {{}} for none"
        )
    return cid


# The longest ttl, in seconds (about 31 years), far below where a script's PEXPIRE fails:
# redis.call spells a number of 1e17 (ms) or more with an exponent, not an integer.
MAX_TTL = 10**9


def _ttl_ms(ttl: float | None) -> int:
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise ArgumentTypeError(
            f"ttl must be seconds as int or float, or None; got {type(ttl).__name__} {ttl!r}: "
            "pass e.g. ttl=7 * 24 * 3600"
        )
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(
            f"ttl={ttl!r} is not a positive number of seconds: pass e.g. ttl=7 * 24 * 3600, "
            "or ttl=None to keep threads forever"
        )
    if ttl > MAX_TTL:
        raise ValueError(
            f"ttl={ttl!r} is more than {MAX_TTL:,} seconds (about 31 years), more than a "
            "Redis expiry can say: pass ttl=None to keep threads forever"
        )
    return max(1, int(ttl * 1000))


def _passes(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """`list`'s filter: every key of `filter` is in the metadata with an equal value."""
    return all(metadata.get(k) == v for k, v in filter.items())


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat: Sequence[Any] | Mapping[Any, Any] | None) -> list[tuple[bytes, bytes]]:
    """Normalises an HGETALL reply (flat list from a script, or a dict)."""
    if not flat:
        return []
    if isinstance(flat, Mapping):
        return [(_b(k), _b(v)) for k, v in flat.items()]
    return [(_b(flat[i]), _b(flat[i + 1])) for i in range(0, len(flat), 2)]


class Shared(Generic[_V]):
    """An attribute of a saver's connection state, kept in its `_state`: a shallow copy of the
    saver goes on sharing it. LangGraph makes such copies (`with_allowlist`, for strict
    msgpack) and runs graphs on them, while the application closes, or calls, its own."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, saver: Any, owner: type | None = None) -> _V:
        return saver._state[self.name]  # type: ignore[no-any-return]

    def __set__(self, saver: Any, value: _V) -> None:
        saver._state[self.name] = value


class SaverCore:
    """Plans and reply parsing for one keyspace; holds no connection."""

    _SIDE = "RedisSaver"  # the shell class, whatever a subclass is called (client_example)

    serde: SerializerProtocol
    # Set by the shell once it knows the server. On a cluster, scripts touch only the
    # thread's hash slot: run sets are written by plain commands, and the registry is
    # not kept (a cross-slot write cannot be atomic with the thread's own keys, so a
    # delete racing a put could orphan a thread); list(None) scans namespace keys.
    _cluster = Shared[bool]()
    # The metadata fields whose index is complete, as the first call read them (see
    # `_ready_plan`); updated by reindex.
    _indexed = Shared[frozenset[str]]()
    # Whether the first call's checks ran (see the shells' `_get_ready`); cleared to run them
    # again.
    _ready = Shared[bool]()

    def _init_core(
        self,
        prefix: str,
        ttl: float | None,
        refresh_on_read: bool,
        compress: bool,
        index_metadata: Sequence[str] = (),
    ) -> None:
        self._state: dict[str, Any] = {}  # see Shared
        self.index_metadata = _index_fields(index_metadata)
        self._indexed = frozenset()
        self._unmarked_seen: set[str] = set()  # fields whose incomplete index it logged
        # per (thread, namespace), the DeltaChannels of the last checkpoint it put or read
        self._delta_seen: dict[tuple[str, str], tuple[str, ...]] = {}
        self._delta_lock = threading.Lock()  # a blocking saver's threads put at once
        self.keyspace = KeySpace(prefix)
        self.prefix = prefix
        self.ttl = ttl
        self._ttl_ms = _ttl_ms(ttl)
        if not isinstance(refresh_on_read, bool):
            raise TypeError(f"refresh_on_read must be True or False, got {refresh_on_read!r}")
        self.refresh_on_read = refresh_on_read
        if not isinstance(compress, bool):
            raise TypeError(f"compress must be True or False, got {compress!r}")
        self.compress = compress
        # The last value written per channel, to compress the next from it and read it
        # back without inflating it (see `_deflate`).
        self._memo = ValueMemo() if compress else None
        self._cluster = False
        self._migrating = False  # the migration's own saver (see `_ready_plan`)
        # With a TTL: per thread, the subgraph namespaces this saver saw pause on an interrupt,
        # each with the checkpoint it paused at and those of its ancestors then (LangGraph's
        # checkpoint_map). Writes to the thread refresh it while that ancestor's step runs (a
        # sibling branch may run on long after the pause); a later checkpoint of the ancestor,
        # or of the namespace itself, ends the pause.
        self._paused: dict[str, dict[str, tuple[str, dict[str, str]]]] = {}
        self._paused_lock = threading.Lock()  # puts and writes of one thread run at once

    # -- helpers -------------------------------------------------------------------------

    @property
    def _client_example(self) -> str | None:
        """How to build the client this saver takes, for the fix an error names; None when it
        built its own from a URL (`translate_error`)."""
        if getattr(self, "_owns_client", False):
            return None
        return client_example(self._SIDE, self._cluster)

    def _raise_translated(self, error: Exception) -> None:
        """Raises the package's error for `error` (an error reply, or one of redis-py's
        cluster errors: see `translate_error`); returns when there is none, and the caller
        raises `error` as it came."""
        mapped = translate_error(error, self.prefix, self._client_example)
        if mapped is None:
            return
        if isinstance(mapped, LegacyKeyspaceError):
            # The next call checks again: a migration may have parked the registry since.
            self._ready = False
        raise mapped from None

    def _paused_under(self, thread_id: str, ns: str) -> list[str]:
        """The namespaces paused below `ns` (not `ns` itself) in thread `thread_id`."""
        paused = self._paused.get(thread_id)
        if not paused:
            return []
        head = f"{ns}{_NS_SEP}" if ns else ""
        return [sub for sub in list(paused) if sub != ns and sub.startswith(head)]

    def _held_by(self, thread_id: str, ns: str) -> list[str]:
        """The other namespaces whose newest checkpoints a write to `ns` keeps alive, as the
        steps that wait on it: those above it (its parents, whose step is running it), and
        every subgraph of the thread paused in a step still running."""
        parts = ns.split(_NS_SEP) if ns else []
        above = [_NS_SEP.join(parts[:i]) for i in range(len(parts))]
        paused = [sub for sub in list(self._paused.get(thread_id) or ()) if sub != ns]
        return list(dict.fromkeys([*above, *paused]))

    def _pause(self, thread_id: str, ns: str, cid: str, conf: Mapping[str, Any]) -> None:
        ancestors = conf.get("checkpoint_map")
        at = {k: v for k, v in ancestors.items() if isinstance(v, str)} if ancestors else {}
        with self._paused_lock:
            self._paused.setdefault(thread_id, {})[ns] = (cid, at)
            while len(self._paused) > _PAUSED_THREADS:  # the threads seen longest ago go first
                self._paused.pop(next(iter(self._paused)), None)

    def _step_ended(self, thread_id: str, ns: str, cid: str) -> None:
        """Checkpoint `cid` of `ns` stored: a pause it comes after is over (checkpoint ids
        sort in time; a put still landing from before the pause ends nothing)."""
        if not self._paused.get(thread_id):
            return
        with self._paused_lock:
            paused = self._paused.get(thread_id, {})
            for sub in [ns, *self._paused_under(thread_id, ns)]:
                entry = paused.get(sub)
                if entry is not None:
                    then = entry[0] if sub == ns else entry[1].get(ns)
                    if then is None or cid > then:
                        del paused[sub]
            if not paused:
                self._paused.pop(thread_id, None)

    def _ready_plan(self) -> Plan:
        """What the first call reads once the topology is known: whether a migration from
        0.1.0 was left unfinished (it parks 0.1.0's registry while it works; the threads it
        has not reached yet would read as empty; a cluster keeps no registry), whether the
        keyspace is still 0.1.0's (its registry is a hash: the scripts that read one thread
        look at the registry only when they find nothing, so a thread of the current layout
        under it would read as if the keyspace were migrated), and which metadata fields
        have a complete index (`reindex` marks them)."""
        if self._migrating:
            return []
        if self._cluster:
            return [("HKEYS", self.keyspace.index_marker)]
        return [
            parked_check(self.prefix),
            ("TYPE", self.keyspace.threads),
            ("HKEYS", self.keyspace.index_marker),
        ]

    def _check_ready(self, replies: list[Any]) -> None:
        if not replies:
            return
        if self._cluster:
            fields = replies[0]
        else:
            parked, registry, fields = replies
            refuse_parked(self.prefix, parked)
            if _s(registry) == "hash":
                raise LegacyKeyspaceError(self.prefix)
        self._indexed = frozenset(_s(f) for f in fields or ())

    def _check_indexing(self, what: str) -> None:
        """Refuses a write that would leave a complete metadata index incomplete: this
        saver does not index a field the keyspace's marker names complete."""
        if self._indexed and not self._indexed.issubset(self.index_metadata):
            missing = self._indexed.difference(self.index_metadata)
            raise unindexed_error(what, self.prefix, missing, self.index_metadata)

    def _index_tags(self, metadata: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The (field, tag) pairs of the indexed fields of `metadata` with an indexable value,
        for the value a reader of the checkpoint gets back (filters compare those): a value of
        a type the serializer may turn into another goes through it first."""
        tags: list[tuple[str, str]] = []
        for field in self.index_metadata:
            if field not in metadata:
                continue
            value = metadata[field]
            if type(value) not in (str, int, float, bool, type(None)):
                try:
                    value = self.serde.loads_typed(self.serde.dumps_typed(value))
                except Exception:  # noqa: BLE001 - the put's own dump reports it
                    continue
            tag = index_tag(value)
            if tag is not None:
                tags.append((field, tag))
        return tags

    @property
    def _registry(self) -> tuple[str, ...]:
        """The registry as a script key, or nothing on a cluster (it is in another slot)."""
        return () if self._cluster else (self.keyspace.threads,)

    def _after_thread_scripts(self, done: Iterable[tuple[ThreadKeys, Any]]) -> Plan:
        """On a cluster: the run-set removals that thread scripts reported, a script per run
        set and up to 500 members (a foreign value at a run set is named, not Redis's bare
        WRONGTYPE).

        A removal that never happens leaves a member naming a deleted checkpoint, which
        `delete_for_runs` tolerates.
        """
        if not self._cluster:
            return []
        leaving: dict[Any, list[Any]] = {}
        for _, reply in done:
            runs = reply[1] or []
            for i in range(0, len(runs), 2):
                leaving.setdefault(runs[i], []).append(runs[i + 1])
        return [
            Eval("run_leave", (_s(key),), tuple(members[i : i + 500]))
            for key, members in leaving.items()
            for i in range(0, len(members), 500)
        ]

    def _dump(self, value: Any, what: str) -> tuple[str, bytes]:
        """`value` serialized, or a `TypeError` naming what it is (the serializer's own names
        only the type), before anything is sent."""
        try:
            return self.serde.dumps_typed(value)
        except TypeError as exc:
            raise TypeError(
                f"{what} cannot be serialized by {type(self.serde).__name__}: {exc}. Store "
                "values it can serialize, or pass serde= a serializer that handles them"
            ) from exc

    def _loads(self, typed: tuple[str, bytes], key: str) -> Any:
        try:
            return self.serde.loads_typed(typed)
        except _NOT_THE_DATA:  # out of memory, too deep, a signal's timeout: not the bytes'
            raise
        except Exception as exc:  # the serializer raises many types on bad bytes
            interrupted(self.serde, typed, exc, key)
            raise CorruptDataError(key, f"{type(exc).__name__}: {exc}") from exc

    def _tuple(
        self,
        tk: ThreadKeys,
        ns: str,
        cid: str,
        entry: Sequence[Any],
        shared: dict[str, tuple[str, bytes]] | None = None,
        asked: RunnableConfig | None = None,
        stored: StoredCheckpoint | None = None,
        shown: Any = None,
    ) -> CheckpointTuple:
        """Builds a `CheckpointTuple` from one entry ``[id, payload, writes, blobs]``.

        `shared` holds the blobs of a list reply decoded already, by key (some ahead, by
        `_decode_window`): the script sends each blob once per reply, and ``b""`` where it
        repeats; `stored` is the entry's payload decoded already. `asked` is the config of a
        read by id, which comes back as given (as from `InMemorySaver`); `shown` is the
        thread id as the caller gave it (an int or a UUID, say), for the configs built here.
        """
        cp_key = tk.cp(ns, cid)
        if stored is None:
            stored = decode_checkpoint(_b(entry[1]), cp_key)
        checkpoint = cast(Checkpoint, self._loads(stored.checkpoint, cp_key))
        if not isinstance(checkpoint, dict):
            raise CorruptDataError(cp_key, "checkpoint is not a mapping")
        values: dict[str, Any] = {}
        for suffix, raw in zip(stored.refs, entry[3] or (), strict=False):
            if raw is None or raw is False:
                continue
            blob_key = tk.blob_at(ns, suffix)
            channel = blob_channel(suffix)
            if shared is not None and blob_key in shared:
                typed = shared[blob_key]  # each tuple still gets objects of its own
            else:
                typed = decode_blob(_b(raw), blob_key, self._memo_reader(tk, ns, suffix))
                if shared is not None:
                    shared[blob_key] = typed
            if typed[0] != "empty":
                values[channel] = self._loads(typed, blob_key)
        wr_key = tk.wr(ns, cid)
        writes = sorted(
            (decode_write(value, wr_key) for _, value in _pairs(entry[2])),
            key=lambda w: (w.task_path, w.task_id, w.idx),
        )
        pending: list[PendingWrite] = [
            (w.task_id, w.channel, self._loads(w.value, wr_key)) for w in writes
        ]
        thread_id = tk.thread_id if shown is None else shown
        return CheckpointTuple(
            config=asked
            or {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": cid,
                }
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=cast(CheckpointMetadata, self._loads(stored.metadata, cp_key)),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": stored.parent_id,
                    }
                }
                if stored.parent_id
                else None
            ),
            pending_writes=pending,
        )

    def _memo_reader(self, tk: ThreadKeys, ns: str, suffix: str) -> Known | None:
        """What the memo can tell of the stored bytes of blob `suffix` without inflating."""
        if self._memo is None:
            return None
        return functools.partial(
            self._memo.decompressed, (tk.thread_id, ns, blob_channel(suffix)), suffix
        )

    def _decode_window(
        self,
        tk: ThreadKeys,
        entries: Sequence[Any],
        shared: dict[str, tuple[str, bytes]],
    ) -> list[tuple[str, StoredCheckpoint] | None]:
        """The namespaces and payloads of list reply entries ``[N, [id, payload, writes,
        blobs]]``, decoded ahead of the tuples built from them, and their blobs into
        `shared`, by key (the versions of a channel inflated together: `decode_blobs`).
        Whatever fails to decode is left out (None, absent): `_tuple` decodes it again and
        reports it for its own checkpoint, after the ones before it."""
        decoded: list[tuple[str, StoredCheckpoint] | None] = []
        blobs: list[tuple[bytes, str, Known | None, tuple[str, str]]] = []
        for ns_e, entry in entries:
            try:
                ns = listed_namespace(ns_e, tk.ns)
                stored = decode_checkpoint(
                    _b(entry[1]), tk.cp(ns, member_text(entry[0], tk.idx(ns)))
                )
            except Exception:  # noqa: BLE001 - raised again, in order, by its own tuple
                decoded.append(None)
                continue
            decoded.append((ns, stored))
            for suffix, raw in zip(stored.refs, entry[3] or (), strict=False):
                if raw is None or raw is False or raw == b"":
                    continue
                group = (ns, blob_channel(suffix))  # the versions of one channel
                blobs.append(
                    (_b(raw), tk.blob_at(ns, suffix), self._memo_reader(tk, ns, suffix), group)
                )
        for item, typed in zip(blobs, decode_blobs(blobs), strict=True):
            if typed is not None:
                shared[item[1]] = typed
        return decoded

    # -- versions ------------------------------------------------------------------------

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:
        """Returns a version greater than `current`, unique to this call.

        The random tail keeps a fork from an older checkpoint from reusing the
        version, and so the blob key, of the branch it forked from.
        """
        if current is None:
            major = 0
        elif isinstance(current, (int, float)):
            major = int(current)
        else:
            major = int(current.split(".", 1)[0])
        return f"{major + 1:0{VERSION_DIGITS}}.{random.getrandbits(48):012x}"

    # -- put -----------------------------------------------------------------------------

    def _put_steps(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Generator[Step, list[Any], RunnableConfig]:
        conf = _configurable(config, "put")
        thread_id = _str_field(conf, "thread_id")
        ns = _str_field(conf, "checkpoint_ns", "")
        cid = _put_arguments(checkpoint, metadata, new_versions)
        tk = self.keyspace.thread(thread_id)
        parent_id = _str_field(conf, "checkpoint_id") if conf.get("checkpoint_id") else None

        copy: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = copy.pop("channel_values", None) or {}
        meta = get_checkpoint_metadata(config, metadata)
        run_id = meta.get("run_id")
        run = (  # "" and 0 are runs too
            escape_run(_utf8(str(run_id), "put: metadata['run_id']")) if run_id is not None else ""
        )

        written: dict[str, bytes] = {}
        memo = self._memo
        for channel, version in new_versions.items():
            suffix = blob_suffix(channel, version)
            if channel in values:
                typed = self._dump(values[channel], f"put: the value of channel {channel!r}")
                if memo is not None and len(typed[1]) >= COMPRESS_MIN:
                    slot = (thread_id, ns, channel)
                    stream = memo.compress(slot, suffix, typed[0], typed[1])
                    written[suffix] = encode_blob(typed, stream=stream)
                else:
                    written[suffix] = encode_blob(typed)
            else:  # absent at this version: no key, which reads back as absent
                written[suffix] = ABSENT
        refs = [blob_suffix(ch, v) for ch, v in checkpoint["channel_versions"].items()]
        payload = encode_checkpoint(
            parent_id,
            run,
            refs,
            self._dump(copy, "put: the checkpoint"),
            self._dump(meta, "put: the metadata"),
        )
        run_key = self.keyspace.run(str(run_id)) if run else None
        self._check_indexing("put")
        index = [self.keyspace.index(f, t) for f, t in self._index_tags(meta)]
        if self._cluster:
            # Run sets and index zsets live in other slots: the thread joins them first, so a
            # crash in between leaves a member naming nothing, never a checkpoint none names.
            before = self._run_plan(run_key, tk.run_member(ns, cid)) if run_key else []
            before += [Eval("index_add", (key,), (tk.component, "")) for key in index]
            if before:
                yield before
            index = []
        # With a TTL, the older checkpoints its DeltaChannels are rebuilt from live as long as
        # it does: refreshed by a script sent after the put's, in its round trip.
        chain = self._refresh_chain(tk, ns, cid, self._remember_delta(thread_id, ns, meta))
        put = self._put_eval(tk, ns, cid, payload, refs, written, run_key, index)
        replies = yield [put, chain] if chain else [put]
        chained = replies[1] if chain else None
        versions = checkpoint["channel_versions"]
        while self._resend_lost(replies[0], refs, versions, values, written):
            replies = yield [self._put_eval(tk, ns, cid, payload, refs, written, run_key, index)]
        self._step_ended(thread_id, ns, cid)
        follow = self._after_thread_scripts(zip([tk], replies[:1], strict=True))
        if follow := follow + self._chain_runs(tk, ns, chained):
            yield follow
        return {
            "configurable": {
                "thread_id": conf["thread_id"],  # as given (an int or a UUID stays one)
                "checkpoint_ns": ns,
                "checkpoint_id": cid,
            }
        }

    def _resend_lost(
        self,
        reply: Any,
        refs: Sequence[str],
        channels: Iterable[str],
        values: Mapping[str, Any],
        written: dict[str, bytes],
    ) -> bool:
        """Adds to `written` the blobs a PUT `reply` names as expired (it wrote nothing):
        the checkpoint reads them (`refs`, of `channels` in order) but the put only refreshed
        them. Each is sent again from `values`, or as absent where the channel has none.
        False when the put was done."""
        lost = _lost_blobs(reply)
        by_suffix = dict(zip(refs, channels, strict=True)) if lost else {}
        for suffix in lost:
            if suffix in written or suffix not in by_suffix:
                raise RuntimeError(f"PUT script named blob {suffix!r} it was not asked to refresh")
            channel = by_suffix[suffix]
            if channel not in values:
                written[suffix] = ABSENT
                continue
            typed = self.serde.dumps_typed(values[channel])
            stream = None
            if self._memo is not None and len(typed[1]) >= COMPRESS_MIN:
                stream = zlib.compress(typed[1], LEVEL)  # whole: it is no channel's last value
            written[suffix] = encode_blob(typed, stream=stream)
        return bool(lost)

    def _put_eval(
        self,
        tk: ThreadKeys,
        ns: str,
        cid: str,
        payload: bytes,
        refs: Sequence[str],
        written: Mapping[str, bytes],
        run_key: str | None,
        index: Sequence[str] = (),
    ) -> Eval:
        """The script call storing one encoded checkpoint and its encoded new blobs; on a
        standalone server it also adds the thread to the metadata index zsets `index`."""
        # Blobs the checkpoint reads but this put did not write only need their TTL
        # refreshed: without a TTL they are left out of the call.
        suffixes = list(dict.fromkeys([*refs, *written] if self._ttl_ms else written))
        ns_e = escape(ns)
        escape_run = self.keyspace.escaped_run_of(run_key) if run_key else ""
        if self._cluster:
            run_key = None  # added to its run set before the script, in its own slot
        keys = [tk.cp(ns, cid), tk.idx(ns), tk.keys(ns), tk.ns]
        keys += [tk.blob_at(ns, s) for s in suffixes]
        keys += [run_key] if run_key else []
        if self._registry:  # standalone: the script checks the index marker too
            keys += [*self._registry, self.keyspace.index_marker]
        keys += index
        args: list[str | bytes | int] = [
            cid,
            payload,
            self._ttl_ms,
            ns_e,
            tk.component,
            tk.run_member(ns, cid),
            1 if run_key else 0,
            len(suffixes),
            tk.wr_prefix,
            tk.cp_prefix,
            tk.blob_prefix,
            0 if self._cluster else 1,
            escape_run,
            self.keyspace.run_prefix,
        ]
        for s in suffixes:
            args += [s, written.get(s, b"")]
        args.append(len(index))
        if index:
            args += self.keyspace.ns_affixes
        if not self._cluster:
            args += self.index_metadata
        return Eval("put", tuple(keys), tuple(args))

    def _refresh_chain(
        self,
        tk: ThreadKeys,
        ns: str,
        cid: str,
        channels: Sequence[str] | None,
        newest_too: bool = False,
    ) -> Eval | None:
        """With a TTL, the call refreshing the older checkpoints that LangGraph rebuilds the
        DeltaChannels `channels` (a superset will do) of checkpoint `cid` (``''``: the
        newest) from, and with `newest_too` those of the timeline's newest when that is
        another (refreshed alone, an older checkpoint would outlive it, and read as the
        newest once it expired, as GET refreshes both); or None."""
        if not (self._ttl_ms and channels):
            return None
        args: tuple[str | int, ...] = (
            cid,
            escape(ns),
            tk.cp_prefix,
            tk.wr_prefix,
            tk.blob_prefix,
            self._ttl_ms,
            tk.component,
            self.keyspace.run_prefix,
            1 if newest_too else 0,
            *[escape(str(channel)) for channel in channels],
        )
        return Eval("refresh_chain", (tk.idx(ns), tk.keys(ns), tk.ns, *self._registry), args)

    def _chain_refreshes(
        self, tk: ThreadKeys, ns: str, cid: str, channels: Sequence[str] | None
    ) -> Plan:
        """With a TTL, the call refreshing the chains of DeltaChannels `channels` of
        checkpoint `cid` (``''``: the newest) and of the timeline's newest (see
        `_refresh_chain`), as a plan: empty when there is nothing to refresh."""
        chain = self._refresh_chain(tk, ns, cid, channels, newest_too=bool(cid))
        return [chain] if chain is not None else []

    def _remember_delta(self, thread_id: str, ns: str, metadata: Any) -> list[str]:
        """Every DeltaChannel this saver saw counted in the metadata of a checkpoint of the
        thread's namespace (one that snapshotted them all counts none): `put_writes`, which
        reads no metadata, and the refresh of a timeline's newest follow them. Kept for the
        last `_DELTA_SEEN` (thread, namespace) pairs used."""
        counted, _ = _delta_counted(metadata)
        slot = (thread_id, ns)
        with self._delta_lock:
            known = self._delta_seen.pop(slot, ())
            if counted:
                known = tuple(dict.fromkeys([*known, *counted]))
            if known:
                self._delta_seen[slot] = known  # last used last
                while len(self._delta_seen) > _DELTA_SEEN:
                    self._delta_seen.pop(next(iter(self._delta_seen)))
        return list(known)

    def _chain_runs(self, tk: ThreadKeys, ns: str, reply: Any) -> Plan:
        """On a cluster: the run sets of the checkpoints a REFRESH_CHAIN reply refreshed,
        which live in other slots, refreshed too (if they are there)."""
        flat = list(reply or ()) if self._cluster else []
        return [
            self._run_join(self.keyspace.run_escaped(_s(run)), tk.run_member(ns, _s(cid)), True)
            for run, cid in zip(flat[0::2], flat[1::2], strict=True)
        ]

    def _run_plan(self, run_key: str, member: str) -> Plan:
        """A cluster client adds a checkpoint to its run set before the thread script, so
        a crash in between leaves a member naming nothing, never a checkpoint no run set
        names."""
        return [self._run_join(run_key, member)]

    def _run_join(self, run_key: str, member: str, keep_only: bool = False) -> Eval:
        """On a cluster: checkpoint `member` in its run set, which lives at least this
        saver's TTL (for ever without one); with `keep_only`, only if it is there already."""
        return Eval("run_join", (run_key,), (member, self._ttl_ms, 1 if keep_only else 0))

    def _put_writes_steps(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Generator[Step, list[Any], None]:
        conf = _configurable(config, "put_writes")
        thread_id = _str_field(conf, "thread_id")
        ns = _str_field(conf, "checkpoint_ns", "")
        cid = _str_field(conf, "checkpoint_id")
        if _no_id(conf["checkpoint_id"]):
            raise ValueError(
                f"put_writes: config['configurable']['checkpoint_id'] is "
                f"{conf['checkpoint_id']!r}, which names no checkpoint: pass the config the "
                "put of the checkpoint returned"
            )
        if not writes:
            return
        self._check_indexing("put_writes")
        for what, value in (("task_id", task_id), ("task_path", task_path)):
            if not isinstance(value, str):
                raise TypeError(
                    f"put_writes: {what} must be a str, got {type(value).__name__} {value!r}: "
                    "pass the id of the task that made the writes as a str"
                )
            _utf8(value, f"put_writes: {what}")
        if isinstance(writes, (str, bytes, Mapping)):
            raise TypeError(
                f"put_writes: writes must be a sequence of (channel name, value) pairs, got "
                f"{type(writes).__name__} {writes!r}: pass e.g. [('messages', value)]"
            )
        writes = list(writes)  # read twice: a generator would be spent by the checks
        for i, write in enumerate(writes):
            if not isinstance(write, (tuple, list)) or len(write) != 2:
                raise TypeError(
                    f"put_writes: write #{i} must be a (channel name, value) pair, got "
                    f"{type(write).__name__} {write!r}"
                )
            channel = write[0]
            if not isinstance(channel, str):
                raise TypeError(
                    f"put_writes: a write's channel must be a str, got "
                    f"{type(channel).__name__} {channel!r}: pass (channel name, value) pairs"
                )
            _utf8(channel, f"put_writes: write #{i}'s channel")
        tk = self.keyspace.thread(thread_id)
        held = self._held_by(thread_id, ns) if self._ttl_ms else []
        args: list[str | bytes | int] = [
            cid,
            escape(ns),
            tk.component,
            self._ttl_ms,
            tk.cp_prefix,
            tk.wr_prefix,
            tk.blob_prefix,
            self.keyspace.run_prefix,
            len(held),
            *[escape(other) for other in held],
        ]
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            args += [
                write_field(task_id, idx),
                encode_write(
                    task_id,
                    idx,
                    task_path,
                    channel,
                    self._dump(value, f"put_writes: the value written to {channel!r}"),
                ),
                1 if idx < 0 else 0,
            ]
        keys = (tk.wr(ns, cid), tk.keys(ns), tk.ns, tk.cp(ns, cid), tk.idx(ns), *self._registry)
        # It keeps the checkpoint and the newest alive: with a TTL, the chains their
        # DeltaChannels are rebuilt from too, in its round trip (those this saver last saw).
        chains = self._chain_refreshes(tk, ns, cid, self._delta_seen.get((thread_id, ns)))
        reply, *chained = yield [Eval("put_writes", keys, tuple(args)), *chains]
        if follow := [r for c in chained for r in self._chain_runs(tk, ns, c)]:
            yield follow
        if self._ttl_ms and ns and any(channel == INTERRUPT for channel, _ in writes):
            self._pause(thread_id, ns, cid, conf)
        if isinstance(reply, list) and reply:
            # On a cluster, the checkpoints the writes refreshed (with a TTL) or now keep for
            # ever (without one, on a timeline another writer gave one): their run sets live
            # in other slots, and must live as long. Kept for ever, only members still there.
            keep = not self._ttl_ms
            yield [
                self._run_join(self.keyspace.run_escaped(_s(run)), _s(member), keep)
                for run, member in reply
            ]

    # -- get -----------------------------------------------------------------------------

    def _get_steps(
        self, config: RunnableConfig
    ) -> Generator[Step, list[Any], CheckpointTuple | None]:
        conf = _configurable(config, "get_tuple")
        thread_id = _str_field(conf, "thread_id")
        ns = _str_field(conf, "checkpoint_ns", "")
        cid = _named_id(config, "get_tuple") or ""
        tk = self.keyspace.thread(thread_id)
        refresh = self._ttl_ms if self.refresh_on_read else 0
        keys = (tk.idx(ns), tk.keys(ns), tk.ns, *self._registry)
        args = (
            cid,
            escape(ns),
            tk.cp_prefix,
            tk.wr_prefix,
            tk.blob_prefix,
            refresh,
            tk.component,
            self.keyspace.run_prefix,
        )
        (entry,) = yield [Eval("get", keys, args)]
        if not entry:
            return None
        found = member_text(entry[0], tk.idx(ns))
        stored = None
        if refresh and self._cluster:  # the script refreshed all but run sets (other slots)
            stored = decode_checkpoint(_b(entry[1]), tk.cp(ns, found))
            joins = [(stored.run, tk.run_member(ns, found))] if stored.run else []
            if len(entry) > 4 and entry[4]:  # the newest, refreshed with one read by id
                joins.append((_s(entry[4][0]), tk.run_member(ns, _s(entry[4][1]))))
            # the newest checkpoints of subgraphs paused in the step read, refreshed with it
            for run, member in entry[6] if len(entry) > 6 and entry[6] else ():
                joins.append((_s(run), _s(member)))
            if joins:
                yield [
                    self._run_join(self.keyspace.run_escaped(run), member) for run, member in joins
                ]
        asked = config if cid else None
        tup = self._tuple(tk, ns, found, entry, asked=asked, stored=stored, shown=conf["thread_id"])
        channels = self._remember_delta(thread_id, ns, tup.metadata)
        if len(entry) > 5 and entry[5]:  # the newest, refreshed with one read by id
            newest_key = tk.cp(ns, _s(entry[5][0]))
            newest = decode_checkpoint(_b(entry[5][1]), newest_key)
            channels = self._remember_delta(thread_id, ns, self._loads(newest.metadata, newest_key))
        if not refresh:
            return tup
        # The DeltaChannels of what it read (and of the newest) are rebuilt from older
        # checkpoints: kept alive with it, one more round trip for such a graph. So are those
        # of the subgraphs paused in the step read, whose newest checkpoints it refreshed.
        chains = [(ns, c) for c in self._chain_refreshes(tk, ns, cid and found, channels)]
        for sub, sub_cid, payload in entry[7] if len(entry) > 7 and entry[7] else ():
            sub_ns = unescape(_s(sub))
            sub_key = tk.cp(sub_ns, _s(sub_cid))
            metadata = self._loads(decode_checkpoint(_b(payload), sub_key).metadata, sub_key)
            sub_channels = self._remember_delta(thread_id, sub_ns, metadata)
            chains += [(sub_ns, c) for c in self._chain_refreshes(tk, sub_ns, "", sub_channels)]
        if chains:
            replies = yield [call for _, call in chains]
            follow = [
                run
                for (chain_ns, _), reply in zip(chains, replies, strict=True)
                for run in self._chain_runs(tk, chain_ns, reply)
            ]
            if follow:
                yield follow
        return tup

    # -- DeltaChannel history ------------------------------------------------------------

    def _delta_history_steps(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Generator[Step, list[Any], dict[str, Any]]:
        """LangGraph's `get_delta_channel_history`: per channel, the writes of the ancestors
        of the checkpoint `config` names (parent first, back to the nearest one holding the
        channel's value, whose writes count too) in replay order, and that value as
        ``seed``. One script walks the chain server-side, `_HISTORY_HOPS` ancestors a
        round trip, where the default walks it a `get_tuple` (every blob) per ancestor."""
        names = list(dict.fromkeys(channels))
        if not names:
            return {}
        conf = _configurable(config, "get_delta_channel_history")
        tk = self.keyspace.thread(_str_field(conf, "thread_id"))
        ns = _str_field(conf, "checkpoint_ns", "")
        chunks: dict[str, list[list[PendingWrite]]] = {ch: [] for ch in names}
        seeds: dict[str, Any] = {}
        cursor, start = get_checkpoint_id(config) or "", "0"
        while True:
            still = [ch for ch in names if ch not in seeds]
            args: tuple[str | int, ...] = (
                cursor,
                start,
                escape(ns),
                tk.cp_prefix,
                tk.wr_prefix,
                tk.blob_prefix,
                _HISTORY_HOPS,
                len(still),
                *[escape(ch) for ch in still],
                *still,
            )
            ((ancestors, more),) = yield [Eval("delta_history", (tk.idx(ns),), args)]
            for ancestor in ancestors:
                cid = _s(ancestor[0])
                if len(ancestor) > 3:  # its payload is damaged: raises, naming the key
                    decode_checkpoint(_b(ancestor[3]), tk.cp(ns, cid))
                wr_key = tk.wr(ns, cid)
                writes = sorted(
                    (decode_write(value, wr_key) for _, value in _pairs(ancestor[1])),
                    key=lambda w: (w.task_path, w.task_id, w.idx),
                )
                per: dict[str, list[PendingWrite]] = {ch: [] for ch in still if ch not in seeds}
                for w in writes:
                    if w.channel in per:
                        per[w.channel].append((w.task_id, w.channel, self._loads(w.value, wr_key)))
                for ch, got in per.items():
                    chunks[ch].append(got)
                found = ancestor[2]
                for i in range(0, len(found), 3):
                    blob_key = tk.blob_at(ns, _s(found[i + 1]))
                    typed = decode_blob(_b(found[i + 2]), blob_key)
                    seeds[still[int(found[i]) - 1]] = self._loads(typed, blob_key)
            if not more:
                break
            cursor, start = _s(more), "1"
        # A read with refresh_on_read keeps alive what it read: here the whole chain.
        followed = [*names, *self._remember_delta(tk.thread_id, ns, None)]
        if self.refresh_on_read and (
            chains := self._chain_refreshes(
                tk, ns, get_checkpoint_id(config) or "", list(dict.fromkeys(followed))
            )
        ):
            replies = yield chains
            if follow := [r for reply in replies for r in self._chain_runs(tk, ns, reply)]:
                yield follow
        history: dict[str, Any] = {}
        for ch in channels:
            entry: dict[str, Any] = {"writes": [w for chunk in reversed(chunks[ch]) for w in chunk]}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            history[ch] = entry
        return history

    # -- list ----------------------------------------------------------------------------

    def _list_steps(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Generator[Step, list[Any], None]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(f"limit must be an int or None, got {limit!r}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit={limit} is negative: pass a count of 0 or more, or None")
        if filter is not None and not isinstance(filter, Mapping):
            raise TypeError(
                f"filter must be a dict of metadata keys to values, got {type(filter).__name__} "
                f"{filter!r}: pass e.g. filter={{'source': 'loop'}}"
            )
        if before is not None and not isinstance(before, Mapping):
            raise TypeError(
                f"before must be a config like {{'configurable': {{'checkpoint_id': ...}}}}, "
                f"got {type(before).__name__} {before!r}"
            )
        remaining = limit if limit is not None else -1
        if remaining == 0:
            return
        if isinstance(config, Mapping) and not config:
            config = None  # {} lists every thread, as InMemorySaver and PostgresSaver do
        before_id = _bound(before, "list: before")
        if config is None and filter and (usable := self._usable_index(filter)):
            if (yield from self._list_indexed(*usable, before_id, filter, remaining)):
                return
            # the marker says the index is incomplete: every thread is walked
        if config is None and self._cluster:
            (found,) = yield [Scan(self.keyspace.ns_pattern)]
            for key in sorted({_s(k) for k in found}):  # SCAN may return a key twice
                tk = self.keyspace.thread_from_ns_key(key)
                remaining = yield from self._list_thread(
                    tk, None, None, before_id, filter, remaining
                )
                if remaining == 0:
                    return
            return
        if config is None:
            # ZSCAN returns every thread registered for the whole walk, however the registry
            # changes meanwhile (a put moves its thread), some of them twice: hence `seen`.
            seen: set[str] = set()
            cursor = "0"
            while True:
                (reply,) = yield [
                    Eval("registry_page", (self.keyspace.threads,), (cursor, _REGISTRY_PAGE))
                ]
                cursor, tks = self._registry_page(reply, seen)
                for tk in tks:
                    remaining = yield from self._list_thread(
                        tk, None, None, before_id, filter, remaining
                    )
                    if remaining == 0:
                        return
                if cursor == "0":
                    return
        conf = _configurable(config, "list")
        thread_id = _str_field(conf, "thread_id")
        ns = conf.get("checkpoint_ns")
        only = _bound(config, "list")  # '': no checkpoint named, as in get_tuple
        yield from self._list_thread(
            self.keyspace.thread(thread_id),
            None if ns is None else _str_field(conf, "checkpoint_ns"),
            only,
            before_id,
            filter,
            remaining,
            shown=conf["thread_id"],
        )

    def _list_thread(
        self,
        tk: ThreadKeys,
        ns: str | None,
        only: str | None,
        before_id: str | None,
        filter: dict[str, Any] | None,
        remaining: int,
        shown: Any = None,
    ) -> Generator[Step, list[Any], int]:
        """Lists one thread (one namespace, or all); returns how many may still follow.
        `shown`: the thread id as the caller gave it, for the configs yielded."""
        if only is not None and before_id is not None and not only < before_id:
            return remaining
        page = _LIST_PAGE if filter or remaining < 0 else min(remaining, _LIST_PAGE * 8)
        namespaces: list[str] | None = None if ns is None else [escape(ns)]
        upper = "(" + before_id if before_id is not None else "+"
        resume = ""
        # With a filter, pages carry payloads only; writes and blobs are read for matches.
        light = bool(filter)
        while True:
            args: list[str | bytes | int] = [
                tk.cp_prefix,
                tk.wr_prefix,
                tk.blob_prefix,
                tk.idx_prefix,
                upper,
                page,
                only or "",
                resume,
                1 if light else 0,
                *(namespaces or ()),
            ]
            (reply,) = yield [Eval("list", (tk.ns, *self._registry), tuple(args))]
            walked = [member_text(n, tk.ns) for n in reply[0]]
            entries = reply[1]
            todo = [e for e in entries if self._matches(tk, e, filter or {})] if light else entries
            while todo:
                if light:  # as many as may still be yielded, each blob once per reply
                    chunk, todo = (
                        (todo[:remaining], todo[remaining:]) if remaining > 0 else (todo, [])
                    )
                    pairs = [part for ns_e, entry in chunk for part in (ns_e, entry[0])]
                    fetch = (tk.cp_prefix, tk.wr_prefix, tk.blob_prefix, *pairs)
                    (full,) = yield [Eval("entries", (tk.ns,), fetch)]
                else:
                    full, todo = todo, []
                shared: dict[str, tuple[str, bytes]] = {}
                decoded: list[tuple[str, StoredCheckpoint] | None] = []
                for k, (ns_e, entry) in enumerate(full):
                    if k % _DECODE_AHEAD == 0:  # the first tuple waits for a window, not a page
                        decoded = self._decode_window(tk, full[k : k + _DECODE_AHEAD], shared)
                    ahead = decoded[k % _DECODE_AHEAD]
                    if ahead is None:  # fails again here, for this checkpoint
                        ns_of = listed_namespace(ns_e, tk.ns)
                        cid = member_text(entry[0], tk.idx(ns_of))
                        tup = self._tuple(tk, ns_of, cid, entry, shared, shown=shown)
                    else:
                        cid = member_text(entry[0], tk.idx(ahead[0]))
                        tup = self._tuple(
                            tk, ahead[0], cid, entry, shared, stored=ahead[1], shown=shown
                        )
                    if filter and not _passes(tup.metadata, filter):
                        continue  # rewritten since the page was read
                    yield tup
                    if remaining > 0:
                        remaining -= 1
                        if remaining == 0:
                            return 0
            if len(entries) < page:
                return remaining
            if light or remaining < 0:  # pages double: O(log n) round trips for a long walk
                page = min(page * 2, _LIST_PAGE * (32 if light else 8))
            last_ns, last_entry = entries[-1]
            last = _s(last_ns)
            if only is not None:
                # One entry per namespace at most: go on after the last one that had it.
                namespaces = walked[walked.index(last) + 1 :]
                if not namespaces:
                    return remaining
                continue
            namespaces = walked[walked.index(last) :]
            resume = "(" + _s(last_entry[0])

    def _usable_index(self, filter: Mapping[str, Any]) -> tuple[str, str] | None:
        """The (field, tag) of a metadata index a filtered list(None) may read: a field this
        saver indexes, or one the marker named complete at its first call, whose value has a
        tag. A field marked complete comes first; the query reads the marker again."""
        usable: list[tuple[str, str]] = []
        for field, value in filter.items():
            if not isinstance(field, str) or value is None:
                continue  # None also matches metadata without the field: no index names those
            if field not in self.index_metadata and field not in self._indexed:
                continue
            tag = index_tag(value)
            if tag is not None:
                usable.append((field, tag))
        usable.sort(key=lambda pair: pair[0] not in self._indexed)
        return usable[0] if usable else None

    def _list_indexed(
        self,
        field: str,
        tag: str,
        before_id: str | None,
        filter: dict[str, Any],
        remaining: int,
    ) -> Generator[Step, list[Any], bool]:
        """list(None) with a filter through the metadata index of `field` (its value's tag
        `tag`): the threads it names, newest first, each listed as list(None) lists it.
        False, having yielded nothing, when the marker says the index is incomplete.

        Pages go down by score. A put during the walk moves its thread above the page read
        last: once at the bottom, a walk of more than one page reads again the members scored
        since it started (at the server's clock), until a pass finds no thread it had not
        listed, so a thread named throughout is listed once, as by the registry walk."""
        key = self.keyspace.index(field, tag)
        marker = self.keyspace.index_marker
        seen: set[str] = set()
        first = True
        lower = "-inf"
        while True:  # passes
            upper, started, fresh, pages = "+inf", None, False, 0
            while True:  # pages
                pages += 1
                keys = (key,) if self._cluster else (key, marker)
                page = Eval("index_page", keys, (field, upper, lower, _INDEX_PAGE))
                if first and self._cluster:  # the marker lives in another slot
                    marked, reply = yield [("HGET", marker, field), page]
                else:
                    (reply,) = yield [page]
                    marked = reply[0]
                if first:
                    if not marked:
                        if field in self.index_metadata and field not in self._unmarked_seen:
                            self._unmarked_seen.add(field)
                            _log.warning(
                                "the metadata index of %r under prefix %r is not marked "
                                "complete: filtered list(None) calls walk every thread until "
                                "reindex() runs once (cheap while the prefix is empty)",
                                field,
                                self.prefix,
                            )
                        return False
                    first = False
                now, scored = _index_page(reply, key)
                started = started or str(now)
                unused: list[tuple[str, str]] = []
                for member, score in scored:
                    if member in seen:
                        continue
                    seen.add(member)
                    fresh = True
                    tk = listed_thread(self.keyspace, member, key)
                    threads = self._list_thread(tk, None, None, before_id, filter, remaining)
                    listed, answer = False, cast(list[Any], None)  # None starts it
                    while True:
                        try:
                            step = threads.send(answer)
                        except StopIteration as stop:
                            remaining = stop.value
                            break
                        listed = listed or not isinstance(step, list)
                        answer = yield step
                    if not listed:
                        unused.append((member, score))
                    if remaining == 0:
                        break
                yield from self._drop_unused(key, unused, now)
                if remaining == 0:
                    return True
                if len(scored) < _INDEX_PAGE:
                    break
                upper = "(" + scored[-1][1]
            # A pass read in one page holds every member as it was at one instant.
            if pages == 1 or not fresh:
                return True
            lower = started

    def _drop_unused(
        self, key: str, unused: Sequence[tuple[str, str]], now: int
    ) -> Generator[Step, list[Any], None]:
        """Takes out of index `key` the members (with the scores a page read) a query found
        no checkpoint for, whose thread is gone (deleted, or expired): see INDEX_DROP. A
        thread still there stays, though nothing of it matches now; on a cluster, so does a
        member added less than `_INDEX_GRACE_MS` ago (a put or `copy_thread` there adds its
        thread a round trip before it writes it)."""
        head, tail = self.keyspace.ns_affixes
        grace = _INDEX_GRACE_MS if self._cluster else 0
        if self._cluster:  # the namespace keys live in other slots: checked from here
            old = [(m, sc) for m, sc in unused if float(sc) < now - grace]
            if not old:
                return
            tks = [self.keyspace.thread_from_component(m) for m, _ in old]
            found = yield [("EXISTS", tk.ns) for tk in tks]
            unused = [pair for pair, there in zip(old, found, strict=True) if not int(there)]
        if unused:
            args: list[str | bytes | int] = [head, tail, grace, 0 if self._cluster else 1]
            for member, score in unused:
                args += [member, score]
            yield [Eval("index_drop", (key,), tuple(args))]

    # -- reindex -------------------------------------------------------------------------

    def _reindex_steps(self) -> Generator[Step, list[Any], None]:
        """Builds the metadata index of this saver's `index_metadata` from every thread, then
        marks it complete; drops the index (and the mark) of every other field first."""
        fields = self.index_metadata
        marker = self.keyspace.index_marker
        (marked,) = yield [("HKEYS", marker)]
        stale = [f for f in (_s(m) for m in marked or ()) if f not in fields]
        if stale:  # unmarked first: a query in between walks every thread
            yield [("HDEL", marker, *stale)]
        (found,) = yield [Scan(self.keyspace.index_pattern)]
        drop = sorted(
            {
                k
                for k in map(_s, found)
                if (f := self.keyspace.index_field(k)) is not None and f not in fields
            }
        )
        for i in range(0, len(drop), _REGISTRY_PAGE):
            yield [Eval("index_clear", (k,), ()) for k in drop[i : i + _REGISTRY_PAGE]]
        own = sorted(
            {k for k in map(_s, found) if self.keyspace.index_field(k) in fields} - set(drop)
        )
        # Members of threads gone (deleted, expired) leave first. A key of a keyspace nested
        # under `{prefix}:by` may look like one: only zsets are indexes.
        for i in range(0, len(own), _REGISTRY_PAGE):
            page = own[i : i + _REGISTRY_PAGE]
            kinds = yield [("TYPE", key) for key in page]
            for key, kind in zip(page, kinds, strict=True):
                if _s(kind) == "zset":
                    yield from self._sweep_index(key)
        if fields:
            batch: list[ThreadKeys] = []
            for tk in (yield from self._every_thread()):
                batch.append(tk)
                if len(batch) == _BATCH_THREADS:
                    yield from self._reindex_threads(batch)
                    batch = []
            if batch:
                yield from self._reindex_threads(batch)
            yield [("HSET", marker, *[x for f in fields for x in (f, "1")])]
        self._indexed = frozenset(fields)

    def _every_thread(self) -> Generator[Step, list[Any], list[ThreadKeys]]:
        """Every live thread of the keyspace, as list(None) walks them."""
        if self._cluster:
            (found,) = yield [Scan(self.keyspace.ns_pattern)]
            return [self.keyspace.thread_from_ns_key(k) for k in sorted({_s(k) for k in found})]
        seen: set[str] = set()
        live: list[ThreadKeys] = []
        cursor = "0"
        while True:
            (reply,) = yield [
                Eval("registry_page", (self.keyspace.threads,), (cursor, _REGISTRY_PAGE))
            ]
            cursor, tks = self._registry_page(reply, seen)
            live += tks
            if cursor == "0":
                return live

    def _registry_page(self, reply: Any, seen: set[str]) -> tuple[str, list[ThreadKeys]]:
        """A REGISTRY_PAGE reply: the cursor to go on from, and the threads of the page that
        are live (by the server's clock) and not in `seen`, which they join."""
        cursor, flat, now = _s(reply[0]), reply[1], float(_s(reply[2]))
        tks = []
        for i in range(0, len(flat), 2):
            component = member_text(flat[i], self.keyspace.threads)
            if component not in seen and float(flat[i + 1]) >= now:  # new, and not expired
                seen.add(component)
                tks.append(listed_thread(self.keyspace, component, self.keyspace.threads))
        return cursor, tks

    def _sweep_index(self, key: str) -> Generator[Step, list[Any], None]:
        """Takes the members of threads gone out of index zset `key`, a page at a time (see
        `_drop_unused`): the index of a value no put writes any more (a user whose threads all
        expired) is met by no put's two-member look, so only a query on that value or this
        sweep ever empties it, and an empty zset is no key."""
        field = self.keyspace.index_field(key) or ""
        upper = "+inf"
        while True:
            (reply,) = yield [Eval("index_page", (key,), (field, upper, "-inf", _INDEX_PAGE))]
            now, scored = _index_page(reply, key)
            yield from self._drop_unused(key, scored, now)
            if len(scored) < _INDEX_PAGE:
                return
            upper = "(" + scored[-1][1]

    def _reindex_threads(self, tks: Sequence[ThreadKeys]) -> Generator[Step, list[Any], None]:
        """Adds threads `tks` to the index of each (field, value) their checkpoints' metadata
        hold, at the time of the newest such checkpoint (a LangGraph checkpoint id is a
        UUID v6, which holds it; otherwise the server's clock)."""
        added: dict[str, dict[str, int | None]] = {}
        # thread, namespaces left (None: all), resume bound
        todo: list[tuple[ThreadKeys, list[str] | None, str]] = [(tk, None, "") for tk in tks]
        while todo:
            calls: Plan = []
            for tk, namespaces, resume in todo:
                args = (
                    tk.cp_prefix,
                    tk.wr_prefix,
                    tk.blob_prefix,
                    tk.idx_prefix,
                    "+",
                    _REINDEX_PAGE,
                    "",
                    resume,
                    1,
                    *(namespaces or ()),
                )
                calls.append(Eval("list", (tk.ns, *self._registry), args))
            replies = yield calls
            later: list[tuple[ThreadKeys, list[str] | None, str]] = []
            for (tk, _, _), reply in zip(todo, replies, strict=True):
                walked = [member_text(n, tk.ns) for n in reply[0]]
                entries = reply[1]
                for ns_e, (cid, payload) in entries:
                    cp_key = tk.cp(listed_namespace(ns_e, tk.ns), _s(cid))
                    at = _uuid6_ms(_s(cid))
                    for field, tag in self._index_tags(self._metadata_of(cp_key, payload)):
                        members = added.setdefault(self.keyspace.index(field, tag), {})
                        known = members.get(tk.component, 0)
                        # None: the server's clock, for a thread with an id of another kind
                        members[tk.component] = (
                            None if at is None or known is None else max(at, known)
                        )
                if len(entries) == _REINDEX_PAGE:
                    last_ns, last_entry = entries[-1]
                    last = _s(last_ns)
                    later.append((tk, walked[walked.index(last) :], "(" + _s(last_entry[0])))
            todo = later
        calls = []
        for key, members in added.items():
            flat = [x for m, at in members.items() for x in (m, "" if at is None else at)]
            calls += [
                Eval("index_add", (key,), tuple(flat[i : i + 1000]))
                for i in range(0, len(flat), 1000)
            ]
        for i in range(0, len(calls), _REGISTRY_PAGE):
            yield calls[i : i + _REGISTRY_PAGE]

    def _metadata_of(self, cp_key: str, payload: Any) -> Mapping[str, Any]:
        """The metadata of checkpoint payload `payload` (at `cp_key`); {} for one that is no
        mapping."""
        metadata = self._loads(decode_checkpoint(_b(payload), cp_key).metadata, cp_key)
        return metadata if isinstance(metadata, Mapping) else {}

    def _matches(self, tk: ThreadKeys, light: Sequence[Any], filter: Mapping[str, Any]) -> bool:
        """Whether the metadata of a light list entry ``[N, [id, payload]]`` passes."""
        ns_e, (cid, payload) = light
        key = tk.cp(listed_namespace(ns_e, tk.ns), _s(cid))
        metadata = self._loads(decode_checkpoint(_b(payload), key).metadata, key)
        return isinstance(metadata, Mapping) and _passes(metadata, filter)

    # -- delete, prune, runs, copy -------------------------------------------------------

    def _prefix_args(self, tk: ThreadKeys) -> tuple[str, ...]:
        return (
            tk.component,
            tk.cp_prefix,
            tk.wr_prefix,
            tk.blob_prefix,
            tk.idx_prefix,
            tk.keys_prefix,
            self.keyspace.run_prefix,
        )

    def _delete_thread_steps(self, thread_id: str) -> Generator[Step, list[Any], None]:
        tk = self.keyspace.thread(_thread_arg(thread_id, "delete_thread"))
        replies = yield [Eval("delete_thread", (tk.ns, *self._registry), self._prefix_args(tk))]
        if follow := self._after_thread_scripts(zip([tk], replies, strict=True)):
            yield follow

    def _prune_steps(
        self, thread_ids: Sequence[str], strategy: str
    ) -> Generator[Step, list[Any], None]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(
                f"prune strategy {strategy!r} is not supported: use 'keep_latest' "
                "(keep the newest checkpoint per namespace) or 'delete' (remove the threads)"
            )
        _id_list(thread_ids, "prune", "thread ids")
        script = "prune_keep_latest" if strategy == "keep_latest" else "delete_thread"
        tks = [self.keyspace.thread(_thread_arg(t, "prune")) for t in thread_ids]
        calls = [((tk.ns, *self._registry), self._prefix_args(tk)) for tk in tks]
        batches = range(0, len(tks), _BATCH_THREADS)
        if strategy == "keep_latest":
            unknown: list[str] = []
            for s in batches:
                group = tks[s : s + _BATCH_THREADS]
                heads = yield [
                    Eval("heads", (tk.ns,), (tk.cp_prefix, tk.idx_prefix)) for tk in group
                ]
                for i, (tk, h) in enumerate(zip(group, heads, strict=True), start=s):
                    plans = self._head_plans(tk, h)
                    if plans is None:
                        unknown.append(tk.thread_id)
                    else:
                        calls[i] = (calls[i][0], (*calls[i][1], *plans))
            if unknown:
                raise _delta_refused(unknown)
        # The prune script keeps, beside each newest checkpoint, the older ones its
        # DeltaChannels are rebuilt from (as planned above). A newest checkpoint written since,
        # by a graph with one (marks in its bytes), makes it refuse the thread: {'delta'},
        # having changed nothing of it.
        if len(tks) > 1:  # a script per thread: all are checked before any changes one
            for s in batches:
                batch = calls[s : s + _BATCH_THREADS]
                replies = yield [Eval(f"{script}_check", keys, args) for keys, args in batch]
                group = tks[s : s + _BATCH_THREADS]
                raced = [tk.thread_id for tk, r in zip(group, replies, strict=True) if _is_delta(r)]
                if raced:
                    raise _delta_raced(raced, "Nothing was pruned")
        refused: list[str] = []
        for s in batches:
            batch = calls[s : s + _BATCH_THREADS]
            replies = yield [Eval(script, keys, args) for keys, args in batch]
            group = tks[s : s + _BATCH_THREADS]
            refused += [tk.thread_id for tk, r in zip(group, replies, strict=True) if _is_delta(r)]
            done = [(tk, r) for tk, r in zip(group, replies, strict=True) if not _is_delta(r)]
            if follow := self._after_thread_scripts(done):
                yield follow
        if refused:
            raise _delta_raced(refused, "These were not pruned (the others were)")

    def _head_plans(self, tk: ThreadKeys, heads: Sequence[Any] | None) -> list[str] | None:
        """What the prune script needs of the newest checkpoint of each timeline of the
        thread (a HEADS reply), flat: N, its id, k and the k escaped channels of the
        DeltaChannels its metadata counts updates of since their last snapshot (LangGraph's
        ``counters_since_delta_snapshot``), whose chain back to a value the script keeps.
        None when a DeltaChannel's marks name no channels (LangGraph.js's
        ``delta_writes_versioned``). A head that does not decode is left out: the script
        searches its bytes for the marks, and refuses it when it finds them."""
        flat = list(heads or ())
        plans: list[str] = []
        for ns_e, cid, payload in zip(flat[0::3], flat[1::3], flat[2::3], strict=True):
            cp_key = tk.cp(listed_namespace(ns_e, tk.ns), _s(cid))
            try:
                metadata = self._loads(decode_checkpoint(_b(payload), cp_key).metadata, cp_key)
            except CorruptDataError:
                continue
            if not isinstance(metadata, Mapping):
                continue
            counted, unnamed = _delta_counted(metadata)
            if unnamed:
                return None
            plans += [_s(ns_e), _s(cid), str(len(counted)), *map(escape, counted)]
        return plans

    def _delete_for_runs_steps(self, run_ids: Sequence[str]) -> Generator[Step, list[Any], None]:
        _id_list(run_ids, "delete_for_runs", "run ids")
        run_keys = [self.keyspace.run(_thread_arg(r, "delete_for_runs")) for r in run_ids]
        if not run_keys:
            return
        # A script per run set (each may be in its own cluster slot), to name a foreign value.
        members = yield [Eval("run_members", (k, *self._registry), ()) for k in run_keys]
        by_thread: dict[str, list[str]] = {}
        named: dict[str, ThreadKeys] = {}
        for run_key, reply in zip(run_keys, members, strict=True):
            run = self.keyspace.escaped_run_of(run_key)  # a checkpoint put again since by
            for member in reply or ():  # another run is that run's: the script keeps it
                thread_c, ns_e, cid = parse_run_member(member_text(member, run_key), run_key)
                if thread_c not in named:
                    named[thread_c] = listed_thread(self.keyspace, thread_c, run_key)
                by_thread.setdefault(thread_c, []).extend([ns_e, cid, run])
        tks = list(named.values())
        calls = [
            ((tk.ns, *self._registry), (*self._prefix_args(tk), *triples))
            for tk, triples in zip(tks, by_thread.values(), strict=True)
        ]
        if len(calls) > 1:  # a script per thread: all are checked before any changes one
            yield [Eval("remove_checkpoints_check", keys, args) for keys, args in calls]
        plan: Plan = [Eval("remove_checkpoints", keys, args) for keys, args in calls]
        replies = (yield plan) if plan else []
        # On a standalone server each thread's script took the members read out of their
        # run sets, with their checkpoints. On a cluster, where the run sets live in other
        # slots, they leave only once every script went through (a refused one leaves the
        # run sets to retry with): only the members read (the set goes with its last one),
        # so a checkpoint the run wrote since stays found by it, unless the run put one of
        # those again in between. A script per run set and 500 members.
        if self._cluster:
            yield self._after_thread_scripts(zip(tks, replies, strict=True)) + [
                Eval("run_leave", (run_key,), tuple(reply[i : i + 500]))
                for run_key, reply in zip(run_keys, members, strict=True)
                for i in range(0, len(reply or ()), 500)
            ]

    def _copy_thread_steps(
        self, source_thread_id: str, target_thread_id: str
    ) -> Generator[Step, list[Any], None]:
        src = self.keyspace.thread(_thread_arg(source_thread_id, "copy_thread"))
        dst = self.keyspace.thread(_thread_arg(target_thread_id, "copy_thread"))
        if src == dst:
            return
        self._check_indexing("copy_thread")
        (exported,) = yield [
            Eval(
                "export_thread",
                (src.ns, *self._registry),
                (src.cp_prefix, src.wr_prefix, src.blob_prefix, src.keys_prefix),
            )
        ]
        if not exported:
            return
        args: list[str | bytes | int] = [
            *self._prefix_args(dst),
            self._ttl_ms,
            len(self.index_metadata),
            *self.index_metadata,
        ]
        for ns_e, items in exported:
            pairs = list(zip(items[::2], items[1::2], strict=True))
            args += [_b(ns_e), len(pairs)]
            for member, value in pairs:
                if _b(member)[:1] == b"w":
                    flat = [x for pair in _pairs(value) for x in pair]
                    args += [_b(member), len(flat), *flat]
                else:
                    args += [_b(member), 1, _b(value)]
        # The copy joins the metadata index of what the source's checkpoints hold.
        index: set[str] = set()
        if self.index_metadata:
            for ns_e, items in exported:
                ns = listed_namespace(ns_e, src.ns)
                for member, value in zip(items[::2], items[1::2], strict=True):
                    if _b(member)[:1] == b"c":
                        metadata = self._metadata_of(src.cp(ns, _b(member)[1:].decode()), value)
                        tags = self._index_tags(metadata)
                        index.update(self.keyspace.index(f, t) for f, t in tags)
        # On a standalone server the import adds the copy to those indexes, with its
        # checkpoints; on a cluster they live in other slots, so it joins them first (a
        # query spares a member that young).
        marker = () if self._cluster else (self.keyspace.index_marker,)
        keys = (dst.ns, *self._registry, *marker, *([] if self._cluster else sorted(index)))
        if self._cluster:
            runs: Plan = [Eval("index_add", (key,), (dst.component, "")) for key in sorted(index)]
            # run sets live in other slots too: add the copies' members first
            for ns_e, items in exported:
                for member, value in zip(items[::2], items[1::2], strict=True):
                    if _b(member)[:1] == b"c":
                        cid = _b(member)[1:].decode()
                        ns = listed_namespace(ns_e, src.ns)
                        run = decode_checkpoint(_b(value), dst.cp(ns, cid)).run
                        if run:
                            run_key = self.keyspace.run_escaped(run)
                            runs += self._run_plan(run_key, dst.run_member(ns, cid))
            if runs:
                yield runs
        replies = yield [Eval("import_thread", keys, tuple(args))]
        if follow := self._after_thread_scripts(zip([dst], replies, strict=True)):
            yield follow


def _index_page(reply: Any, key: str) -> tuple[int, list[tuple[str, str]]]:
    """An INDEX_PAGE reply from index `key`: the server's clock (ms) and the page's (member,
    score) pairs, highest score first."""
    flat = reply[2] or []
    return int(_s(reply[1])), [
        (member_text(flat[i], key), _s(flat[i + 1])) for i in range(0, len(flat), 2)
    ]


def _index_fields(value: Any) -> tuple[str, ...]:
    """`index_metadata` as a tuple of distinct field names, in order."""
    if isinstance(value, str):
        raise TypeError(
            f"index_metadata must be a sequence of metadata keys, got the str {value!r}: pass "
            f"a tuple, e.g. index_metadata=({value!r},)"
        )
    if not isinstance(value, Iterable):
        raise TypeError(
            f"index_metadata must be a sequence of metadata keys, got {type(value).__name__} "
            f"{value!r}: pass e.g. index_metadata=('user_id',)"
        )
    fields = tuple(value)
    for field in fields:
        if not isinstance(field, str):
            raise TypeError(
                f"index_metadata holds {type(field).__name__} {field!r}; metadata keys are "
                f"str: pass e.g. index_metadata=('user_id',)"
            )
        if not field:
            raise ValueError(
                f"index_metadata={fields!r} holds an empty field name: pass the metadata keys "
                "to index, e.g. index_metadata=('user_id',)"
            )
        _utf8(field, "index_metadata")
    return tuple(dict.fromkeys(fields))


def _uuid6_ms(checkpoint_id: str) -> int | None:
    """The Unix time in ms a UUID v6 (LangGraph's checkpoint ids) holds; None for another id."""
    try:
        u = uuid.UUID(checkpoint_id)
    except ValueError:
        return None
    if u.version != 6:
        return None
    steps = ((u.int >> 80) << 12) | ((u.int >> 64) & 0x0FFF)
    return max(0, (steps - _UUID_EPOCH) // 10_000)


def _is_delta(reply: Any) -> bool:
    """Whether a prune script refused its thread as a DeltaChannel's (``['delta']``)."""
    return isinstance(reply, list) and len(reply) == 1 and reply[0] in (b"delta", "delta")


def _delta_refused(threads: Sequence[str]) -> NotImplementedError:
    return NotImplementedError(
        f"prune(strategy='keep_latest') refuses threads whose DeltaChannel marks name no "
        f"channels ({_DELTA_JS!r}, as LangGraph.js writes): {', '.join(map(repr, threads))}. "
        "Their newest state is rebuilt from older checkpoints and writes, and the marks do not "
        "say which. Nothing was pruned: leave these threads out, or remove them whole with "
        "strategy='delete'."
    )


def _delta_raced(threads: Sequence[str], outcome: str) -> PlainRedisError:
    return PlainRedisError(
        f"prune(strategy='keep_latest'): a graph with a DeltaChannel wrote a newer checkpoint "
        f"to {', '.join(map(repr, threads))} during the call, whose older checkpoints it did "
        f"not plan to keep. {outcome}: run it again."
    )


def _lost_blobs(reply: Any) -> list[str]:
    """The blob suffixes a PUT reply names as expired (``['lost', [suffix, ...]]``)."""
    if isinstance(reply, list) and len(reply) == 2 and reply[0] in (b"lost", "lost"):
        return [_s(suffix) for suffix in reply[1]]
    return []


def _id_list(values: Any, what: str, kind: str) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(
            f"{what} takes a list of {kind}, got {type(values).__name__} {values!r}: "
            f"pass [{values!r}] for one"
        )


def _thread_arg(value: Any, what: str) -> str:
    if isinstance(value, str):
        return _utf8(value, what)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if type(value).__name__ == "UUID":
        return str(value)
    raise TypeError(f"{what} takes str ids, got {type(value).__name__} {value!r}")


def script_sources() -> dict[str, tuple[str, str]]:
    """Name -> (sha, source) of every script, for loading."""
    return {name: (s.sha, s.source) for name, s in SCRIPTS.items()}
