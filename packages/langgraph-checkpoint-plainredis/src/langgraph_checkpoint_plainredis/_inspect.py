"""What `plainredis` reads and deletes: threads, history, one checkpoint, memory per thread.

Checkpoints are read and deleted through `RedisSaver`; every key is named by `KeySpace`,
so nothing here knows the separator. Members of a timeline's ``keys`` zset are
``c<checkpoint id>``, ``w<checkpoint id>`` and ``b<blob suffix>`` (see `_scripts`).
Nothing prints: callers get data and, for long walks, progress callbacks.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import difflib
import enum
import math
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlsplit

import redis
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from ._core import _s, info_refused, parked_check, refuse_parked
from ._errors import LegacyKeyspaceError, WrongTypeError
from ._keys import SEP, LegacyKeys, ThreadKeys, listed_namespace, listed_thread, member_text
from ._shell import _parameters, check_database, is_cluster_client, shown_option
from ._sync import RedisSaver, close_client

__all__ = [
    "Inspector",
    "HistoryEntry",
    "Progress",
    "ThreadInfo",
    "ThreadUsage",
    "Usage",
    "describe",
    "jsonable",
]

# Called as progress(phase, done, total); total is None while it is unknown (SCAN).
Progress = Callable[[str, int, int | None], None]

_PAGE = 500  # registry members per round trip
_BATCH = 1000  # commands per pipeline
_MEMBERS = 1000  # timeline members per ZRANGE (and keys per EXISTS) when counting
_PAGES_HELD = 50  # such pages read (and checked) per step: 50,000 ids held at most
# The type each command the inspector pipelines reads at its first key (a WRONGTYPE reply
# is named by `_wrong_type`); MEMORY USAGE reads any type.
_READS = {"ZRANGE": "zset", "ZCARD": "zset"}
_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")


@dataclass(frozen=True)
class ThreadInfo:
    """One thread: its namespaces, how many checkpoints it holds, when it expires."""

    thread_id: str
    namespaces: tuple[str, ...]
    checkpoints: int
    expires_ms: float | None  # epoch ms; None: no TTL


@dataclass(frozen=True)
class HistoryEntry:
    """One checkpoint of a thread's history."""

    checkpoint_id: str
    ts: str
    step: int | None
    source: str | None
    parent_id: str | None
    writes: int


@dataclass(frozen=True)
class ThreadUsage:
    """Keys and bytes (``MEMORY USAGE``) one thread holds."""

    thread_id: str
    namespaces: int
    checkpoints: int
    keys: int
    bytes: int


@dataclass
class Usage:
    """What `Inspector.usage` found.

    `run_keys`, `run_bytes`, `index_keys`, `index_bytes` (the metadata index: its zsets and
    its marker hash) and `orphans` are only known after a SCAN (`scanned`). `expired`
    counts the registry entries of threads that expired under a TTL (no namespace left, the
    entry's expiry passed; a later put sweeps it): they are not in `threads`, as no read
    lists them.
    """

    threads: list[ThreadUsage]
    registry_bytes: int | None  # None: no registry (a cluster keeps none)
    scanned: bool
    cluster: bool = False
    run_keys: int = 0
    run_bytes: int = 0
    index_keys: int = 0
    index_bytes: int = 0
    orphans: list[tuple[str, int]] = field(default_factory=list)
    expired: int = 0


def jsonable(value: Any, _seen: frozenset[int] = frozenset()) -> Any:
    """Turns a decoded channel value into something `json.dumps` accepts.

    LangChain messages become ``{"type", "content", "id", ...}`` (fields left at their
    defaults omitted); dataclasses and pydantic models become objects; objects it does
    not know become their `repr`.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if id(value) in _seen:
        return f"<cycle: {type(value).__name__}>"
    seen = _seen | {id(value)}
    if isinstance(value, BaseMessage):
        return _message(value, seen)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, seen) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, seen) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return "base64:" + base64.b64encode(bytes(value)).decode()
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value, seen)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return jsonable(fields, seen)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(), seen)
        except Exception:  # a model that cannot dump itself is shown as its repr
            pass
    return repr(value)


def _message(message: BaseMessage, seen: frozenset[int]) -> dict[str, Any]:
    fields = message.model_dump()
    out: dict[str, Any] = {
        "type": message.type,
        "content": jsonable(message.content, seen),
        "id": message.id,
    }
    for name, value in fields.items():
        # Not `value in (None, "", [], {})`: that compares with `==`, whose answer a field
        # of any type (a numpy array artifact) need not give as a bool.
        if name in out or value is None or value is False:
            continue
        if type(value) in (str, list, dict) and not value:
            continue
        out[name] = jsonable(value, seen)
    return out


def _clock_ms(reply: tuple[Any, Any]) -> float:
    """The server's clock in ms from a ``TIME`` reply (seconds, microseconds)."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) / 1000


def _utf8(member: bytes) -> str | None:
    """A timeline member as text; None for one that is not UTF-8."""
    try:
        return member.decode()
    except UnicodeDecodeError:
        return None


def _without_protocol(url: str) -> str:
    """`url` without the ``protocol`` options of its query; the rest is kept as written
    (rebuilding it with `urlunsplit` turned ``unix:///path`` into ``unix:/path``)."""
    base, mark, rest = url.partition("?")
    if not mark:
        return url
    query, hash_mark, fragment = rest.partition("#")
    kept = [
        item
        for item in query.split("&")
        if item and unquote_plus(item.partition("=")[0]) != "protocol"
    ]
    return base + ("?" + "&".join(kept) if kept else "") + hash_mark + fragment


def describe(tup: CheckpointTuple) -> dict[str, Any]:
    """One checkpoint as a JSON-able document: ids, parent, metadata, values, writes."""
    conf = tup.config["configurable"]
    checkpoint = dict(tup.checkpoint)
    values = checkpoint.pop("channel_values", None) or {}
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return {
        "thread_id": conf["thread_id"],
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf["checkpoint_id"],
        "parent_checkpoint_id": parent,
        "metadata": jsonable(tup.metadata),
        "checkpoint": jsonable(checkpoint),
        "channel_values": jsonable(values),
        "pending_writes": [
            {"task_id": task_id, "channel": channel, "value": jsonable(value)}
            for task_id, channel, value in tup.pending_writes or ()
        ],
    }


class Inspector:
    """Reads a keyspace for people: through `saver`, with keys named by its `KeySpace`.

    Threads are found in the registry on a standalone server, and by SCAN over the
    namespace keys on a cluster, which keeps no registry.
    """

    def __init__(self, saver: RedisSaver, *, owns_client: bool = False) -> None:
        self.saver = saver
        self.keyspace = saver.keyspace
        self.client: Any = saver.client
        self.cluster = is_cluster_client(self.client)
        self._owns_client = owns_client

    @classmethod
    def connect(cls, url: str, prefix: str, **connection: Any) -> Inspector:
        """An inspector on its own client: a `RedisCluster` when `url` names a cluster node.

        Raises:
            ValueError: redis-py cannot parse `url`, its database is not a number, or its
                query has an option redis-py's connections do not take.
        """
        check_database(url, "it")
        cls.check_url_options(url)
        # Its reads parse RESP2 replies: a `protocol` in the URL's query would override the
        # argument.
        url = _without_protocol(url)
        probe = redis.Redis.from_url(url, protocol=2, **connection)
        try:
            try:
                cluster = bool(probe.info("cluster").get("cluster_enabled"))
            except ResponseError as error:  # standalone, as the savers take it
                cluster = info_refused(error, prefix)
        finally:
            probe.close()
        factory: Any = RedisCluster if cluster else redis.Redis
        client = factory.from_url(url, protocol=2, **connection)
        return cls(RedisSaver(client=client, prefix=prefix), owns_client=True)

    @staticmethod
    def check_url_options(url: str) -> None:
        """Refuses, naming it, an option in `url`'s query that redis-py's connections do not
        take (a misspelt one), which redis-py would only raise as a `TypeError` at the first
        command. A connection object (no socket) is built as redis-py's pool will build it.

        Raises:
            ValueError: such an option, or one whose value redis-py cannot parse.
        """
        pool = redis.ConnectionPool.from_url(url)
        try:
            pool.connection_class(**pool.connection_kwargs)
        except TypeError as error:
            query = {k: v[-1] for k, v in parse_qs(urlsplit(url).query).items()}
            found = _UNEXPECTED.search(str(error))
            if found is None or found.group(1) not in query:
                raise
            name = found.group(1)
            known = _parameters(pool.connection_class, redis.ConnectionPool)
            close = difflib.get_close_matches(name, sorted(known), n=1)
            raise ValueError(
                f"it has the option {shown_option(name, query[name])} in its query, which "
                "redis-py's "
                f"{pool.connection_class.__name__} does not take"
                + (f" (did you mean {close[0]}?)" if close else "")
                + ": correct its spelling, or remove it from the URL"
            ) from None
        finally:
            pool.disconnect()

    def close(self) -> None:
        """Closes the client when `connect` made it."""
        if self._owns_client:
            close_client(self.client)

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def registry_exists(self) -> bool | None:
        """Whether the thread registry exists (one EXISTS, never a SCAN); None on a cluster,
        which keeps none."""
        return None if self.cluster else bool(self.client.exists(self.keyspace.threads))

    def migrating_into(self) -> str | None:
        """The prefix an unfinished migration from this prefix into another parked its 0.1.0
        registry under (`LegacyKeys.parked_into` records it), while that registry is still
        parked; else None."""
        raw = self.client.get(LegacyKeys(self.keyspace.prefix).parked_into)
        if raw is None:
            return None
        into = _s(raw)
        if into == self.keyspace.prefix or not self.client.exists(LegacyKeys(into).stash):
            return None
        return into

    def _check_registry(self) -> None:
        key = self.keyspace.threads
        found = _s(self.client.type(key))
        if found == "hash":
            raise LegacyKeyspaceError(self.keyspace.prefix)
        if found not in ("zset", "none"):
            raise WrongTypeError(key, found, "zset")
        prefix = self.keyspace.prefix
        refuse_parked(prefix, self.client.execute_command(*parked_check(prefix)))

    def _pipeline(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Runs `commands`, `_BATCH` per round trip, and returns every reply."""
        replies: list[Any] = []
        for start in range(0, len(commands), _BATCH):
            batch = commands[start : start + _BATCH]
            pipe = self.client.pipeline(transaction=False)
            for command in batch:
                pipe.execute_command(*command)
            answers = pipe.execute(raise_on_error=False)
            for command, answer in zip(batch, answers, strict=True):
                if isinstance(answer, Exception):
                    raise self._wrong_type(command, answer) or answer
            replies.extend(answers)
        return replies

    def _wrong_type(self, command: tuple[Any, ...], error: Exception) -> WrongTypeError | None:
        """The saver's error naming the key and the fix, for a WRONGTYPE reply to `command`
        (a key of another program under the prefix); None for any other error."""
        expected = _READS.get(str(command[0]).upper())
        if expected is None or not str(error).startswith("WRONGTYPE"):
            return None
        key = _s(command[1])
        return WrongTypeError(key, _s(self.client.type(key)), expected)

    def _thread_pages(self) -> tuple[int, Iterator[list[ThreadKeys]]]:
        """How many threads there are, and the threads in pages of `_PAGE`."""
        self._check_registry()
        if self.cluster:
            keys = self.client.scan_iter(match=self.keyspace.ns_pattern, count=1000)
            found = [  # SCAN may return a key twice
                self.keyspace.thread_from_ns_key(key) for key in sorted({_s(k) for k in keys})
            ]
            pages = (found[i : i + _PAGE] for i in range(0, len(found), _PAGE))
            return len(found), pages
        return int(self.client.zcard(self.keyspace.threads)), self._registry_pages()

    def _registry_pages(self) -> Iterator[list[ThreadKeys]]:
        # ZSCAN keeps its place while threads move (a put) or come and go; it may repeat one.
        seen: set[str] = set()
        page: list[ThreadKeys] = []
        for member, _ in self.client.zscan_iter(self.keyspace.threads, count=_PAGE):
            component = member_text(member, self.keyspace.threads)
            if component not in seen:
                seen.add(component)
                page.append(listed_thread(self.keyspace, component, self.keyspace.threads))
            if len(page) == _PAGE:
                yield page
                page = []
        if page:
            yield page

    def _namespaces(self, threads: Sequence[ThreadKeys]) -> list[list[tuple[str, float]]]:
        """Each thread's (unescaped) namespaces with their expiry scores; one round trip."""
        replies = self._pipeline([("ZRANGE", tk.ns, 0, -1, "WITHSCORES") for tk in threads])
        return [
            [(listed_namespace(flat[i], tk.ns), float(flat[i + 1])) for i in range(0, len(flat), 2)]
            for tk, flat in zip(threads, replies, strict=True)
        ]

    def _checkpoints(self, timelines: Sequence[tuple[ThreadKeys, str]]) -> list[int]:
        """How many checkpoints each (thread, namespace) holds, counted as `RedisSaver.list`
        lists them: an entry of the timeline whose checkpoint key is gone (expired under a
        TTL, until a put sweeps the entry) is not one, nor is a member that is not UTF-8 (no
        saver writes one, and no read lists it).

        Each timeline is read `_MEMBERS` ids a command and checked with one EXISTS per page
        (a thread's keys share a hash tag, so a cluster slot): no command grows with a
        thread, which Redis 5 and 6 would refuse past 1,048,576 arguments, and at most
        `_PAGES_HELD` pages are held at once."""
        sizes = self._pipeline([("ZCARD", tk.idx(ns)) for tk, ns in timelines])
        pages = [
            (k, start) for k, size in enumerate(sizes) for start in range(0, int(size), _MEMBERS)
        ]
        counts = [0] * len(timelines)
        for at in range(0, len(pages), _PAGES_HELD):
            held = pages[at : at + _PAGES_HELD]
            ranges = [
                ("ZRANGE", timelines[k][0].idx(timelines[k][1]), start, start + _MEMBERS - 1)
                for k, start in held
            ]
            checks: list[tuple[int, tuple[str, ...]]] = []
            for (k, _), ids in zip(held, self._pipeline(ranges), strict=True):
                tk, ns = timelines[k]
                cps = [tk.cp(ns, cid) for cid in map(_utf8, ids) if cid is not None]
                if cps:
                    checks.append((k, ("EXISTS", *cps)))
            found = self._pipeline([command for _, command in checks])
            for (k, _), there in zip(checks, found, strict=True):
                counts[k] += int(there)
        return counts

    def server_ms(self) -> float:
        """The server's clock in ms, which expiry scores are written against."""
        return _clock_ms(self.client.time())

    def threads(self) -> Iterator[ThreadInfo]:
        """Every thread, with its namespaces, checkpoint count and expiry."""
        _, pages = self._thread_pages()
        for tks in pages:
            namespaces = self._namespaces(tks)
            pairs = [(i, ns) for i, nss in enumerate(namespaces) for ns, _ in nss]
            counts = self._checkpoints([(tks[i], ns) for i, ns in pairs])
            per_thread = [0] * len(tks)
            for (i, _), count in zip(pairs, counts, strict=True):
                per_thread[i] += count
            for tk, nss, count in zip(tks, namespaces, per_thread, strict=True):
                # A namespace's score is when it expires (inf: never); none left: expired.
                latest = max((score for _, score in nss), default=0.0)
                expires = None if math.isinf(latest) else latest
                yield ThreadInfo(tk.thread_id, tuple(ns for ns, _ in nss), count, expires)

    def namespaces(self, thread_id: str) -> list[str]:
        """The namespaces of one thread (empty when it has no keys)."""
        self._check_registry()
        (namespaces,) = self._namespaces([self.keyspace.thread(thread_id)])
        return [ns for ns, _ in namespaces]

    def checkpoint_count(self, thread_id: str) -> tuple[int, int]:
        """``(namespaces, checkpoints)`` of one thread; ``(0, 0)`` when it has no keys."""
        self._check_registry()
        tk = self.keyspace.thread(thread_id)
        (namespaces,) = self._namespaces([tk])
        return len(namespaces), sum(self._checkpoints([(tk, ns) for ns, _ in namespaces]))

    def history(self, thread_id: str, ns: str, limit: int | None) -> Iterator[HistoryEntry]:
        """The checkpoints of one (thread, namespace), newest first."""
        config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        for tup in self.saver.list(config, limit=limit):
            parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            yield HistoryEntry(
                checkpoint_id=tup.checkpoint["id"],
                ts=tup.checkpoint.get("ts", ""),
                step=tup.metadata.get("step"),
                source=tup.metadata.get("source"),
                parent_id=parent,
                writes=len(tup.pending_writes or ()),
            )

    def show(self, thread_id: str, ns: str, checkpoint_id: str | None) -> dict[str, Any] | None:
        """One checkpoint (the newest when `checkpoint_id` is None), as `describe` gives it."""
        if checkpoint_id == "":  # no checkpoint has one; the saver reads '' as the newest
            return None
        conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
        if checkpoint_id is not None:
            conf["checkpoint_id"] = checkpoint_id
        tup = self.saver.get_tuple({"configurable": conf})
        return None if tup is None else describe(tup)

    def delete(self, thread_id: str) -> None:
        """Deletes every key of one thread."""
        self.saver.delete_thread(thread_id)

    def prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        """`RedisSaver.prune` with `strategy` ``keep_latest`` or ``delete``."""
        self.saver.prune(thread_ids, strategy=strategy)

    def _thread_keys(
        self, threads: Sequence[ThreadKeys], namespaces: Sequence[Sequence[str]]
    ) -> list[tuple[list[str], set[str]]]:
        """Every key each thread's indexes reach, and its checkpoint keys among them; one
        round trip."""
        pairs = [(tk, ns) for tk, nss in zip(threads, namespaces, strict=True) for ns in nss]
        index = self._pipeline(
            [cmd for tk, ns in pairs for cmd in (("ZRANGE", tk.idx(ns), 0, -1),
                                                 ("ZRANGE", tk.keys(ns), 0, -1))]
        )  # fmt: skip
        found: dict[str, tuple[list[str], set[str]]] = {
            tk.component: ([tk.ns], set()) for tk in threads
        }
        for i, (tk, ns) in enumerate(pairs):
            keys, checkpoints = found[tk.component]
            ids, members = index[2 * i], index[2 * i + 1]
            # A member that is not UTF-8 (no saver writes one) names its key, not a traceback.
            cps = [tk.cp(ns, member_text(c, tk.idx(ns))) for c in ids]
            checkpoints.update(cps)
            keys += [tk.idx(ns), tk.keys(ns), *cps]
            for raw in members:
                if key := tk.indexed_key(ns, member_text(raw, tk.keys(ns))):
                    keys.append(key)
        return [
            (list(dict.fromkeys(found[tk.component][0])), found[tk.component][1]) for tk in threads
        ]

    def _memory(self, keys: Sequence[str | bytes]) -> list[int | None]:
        """``MEMORY USAGE`` of each key (None: it does not exist)."""
        # SAMPLES 0 measures every element of a hash or zset, not an estimate from five.
        if not self.cluster:
            replies = self._pipeline([("MEMORY", "USAGE", k, "SAMPLES", 0) for k in keys])
            return [None if r is None else int(r) for r in replies]
        # redis-py cannot tell which key MEMORY USAGE names on Redis 5/6 (their COMMAND
        # reply lists none), so a cluster pipeline would send it anywhere: send each key
        # to the node that serves its slot.
        by_node: dict[str, tuple[Any, list[int]]] = {}
        for i, key in enumerate(keys):
            node = self.client.get_node_from_key(key)
            by_node.setdefault(node.name, (node, []))[1].append(i)
        sizes: list[int | None] = [None] * len(keys)
        for node, positions in by_node.values():
            connection = self.client.get_redis_connection(node)
            for start in range(0, len(positions), _BATCH):
                batch = positions[start : start + _BATCH]
                pipe = connection.pipeline(transaction=False)
                for i in batch:
                    pipe.execute_command("MEMORY", "USAGE", keys[i], "SAMPLES", 0)
                for i, reply in zip(batch, pipe.execute(), strict=True):
                    sizes[i] = None if reply is None else int(reply)
        return sizes

    def _expired(self, threads: Sequence[ThreadKeys], namespaces: Sequence[list[str]]) -> set[int]:
        """Which of `threads` expired: no namespace left, and a registry entry whose expiry
        score the server's clock has passed (a put sweeps it later). No read lists them. A
        thread whose namespace set went otherwise (deleted, evicted) is not one; nor is any
        on a cluster, which keeps no registry. One round trip (the clock and the entries),
        only for threads without a namespace."""
        gone = [i for i, nss in enumerate(namespaces) if not nss]
        if self.cluster or not gone:
            return set()
        clock, *scores = self._pipeline(
            [("TIME",), *(("ZSCORE", self.keyspace.threads, threads[i].component) for i in gone)]
        )
        now = _clock_ms(clock)
        return {
            i
            for i, score in zip(gone, scores, strict=True)
            if score is not None and float(score) < now
        }

    def usage(self, *, scan: bool = False, progress: Progress | None = None) -> Usage:
        """``MEMORY USAGE`` summed per thread over every key its indexes reach.

        With `scan`, the prefix is first walked with SCAN (never KEYS), so run sets, the
        metadata index and keys no thread reaches (orphans) are counted too. SCAN runs
        before the thread walk: a key written meanwhile is not mistaken for an orphan, and
        one deleted meanwhile no longer exists when it is measured and is left out.
        """
        report = progress or (lambda phase, done, total: None)
        scanned: set[bytes] = set()
        if scan:
            for key in self.client.scan_iter(match=self.keyspace.pattern, count=1000):
                scanned.add(key)
                if len(scanned) % 1000 == 0:
                    report("scan", len(scanned), None)
            report("scan", len(scanned), None)
        total, pages = self._thread_pages()
        threads: list[ThreadUsage] = []
        expired = 0
        reached: set[bytes] = {self.keyspace.threads.encode()}
        report("threads", 0, total)
        for tks in pages:
            namespaces = [[ns for ns, _ in nss] for nss in self._namespaces(tks)]
            found = self._thread_keys(tks, namespaces)
            sizes = self._memory([key for keys, _ in found for key in keys])
            due = self._expired(tks, namespaces)
            at = 0
            for i, (tk, nss, (keys, cps)) in enumerate(zip(tks, namespaces, found, strict=True)):
                sized = dict(zip(keys, sizes[at : at + len(keys)], strict=True))
                present = [s for s in sized.values() if s is not None]
                at += len(keys)
                reached.update(k.encode() for k in keys)
                if i in due:
                    expired += 1
                    continue
                # A checkpoint whose key is gone (expired, not yet swept) is no checkpoint:
                # the count is what `RedisSaver.list` lists.
                checkpoints = sum(sized[cp] is not None for cp in cps)
                threads.append(
                    ThreadUsage(tk.thread_id, len(nss), checkpoints, len(present), sum(present))
                )
            done = len(threads) + expired
            report("threads", done, max(total, done))
        (registry_bytes,) = self._memory([self.keyspace.threads])
        result = Usage(threads, registry_bytes, scan, self.cluster, expired=expired)
        if scan:
            run_prefix = self.keyspace.run_prefix.encode()
            rest = sorted(scanned - reached)
            measured: list[int | None] = []
            for start in range(0, len(rest), _BATCH):
                measured += self._memory(rest[start : start + _BATCH])
                report("orphans", len(measured), len(rest))
            index = self._index_keys(rest)
            runs = self._run_keys(rest, run_prefix)
            for key, size in zip(rest, measured, strict=True):
                if size is None:
                    continue  # gone since the SCAN
                if key in runs:
                    result.run_keys += 1
                    result.run_bytes += size
                elif key in index:
                    result.index_keys += 1
                    result.index_bytes += size
                else:
                    result.orphans.append((key.decode(errors="replace"), size))
        return result

    def _run_keys(self, keys: Sequence[bytes], run_prefix: bytes) -> set[bytes]:
        """The run sets among `keys`: a set named by the run prefix and an escaped run id,
        which holds no separator; a key with one there (``lg:run:x:cp:...``, a key of a
        saver whose prefix is ``lg:run``) or of another type is another program's."""
        sep = SEP.encode()
        candidates = [
            key for key in keys if key.startswith(run_prefix) and sep not in key[len(run_prefix) :]
        ]
        found = self._pipeline([("TYPE", key) for key in candidates])
        return {key for key, kind in zip(candidates, found, strict=True) if _s(kind) == "set"}

    def _index_keys(self, keys: Sequence[bytes]) -> set[bytes]:
        """The keys of the metadata index among `keys`: its marker hash and its zsets
        (`KeySpace.index_field` names their field), each of the type the layout keeps there;
        a key of another type there (a run set of a nested prefix such as ``lg:by``, say) is
        another program's."""
        marker = self.keyspace.index_marker.encode()
        candidates = [
            key
            for key in keys
            if key == marker or self.keyspace.index_field(key.decode(errors="replace")) is not None
        ]
        found = self._pipeline([("TYPE", key) for key in candidates])
        return {
            key
            for key, kind in zip(candidates, found, strict=True)
            if _s(kind) == ("hash" if key == marker else "zset")
        }
