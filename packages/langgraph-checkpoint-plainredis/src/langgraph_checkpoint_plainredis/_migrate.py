"""One-shot, idempotent migration of a keyspace written by plainredis 0.1.0.

0.1.0 wrapped every value as JSON ``{"t": type, "d": base64}``, joined raw ids with
``:`` and used integer channel versions. The migration reads each (thread, namespace)
the 0.1.0 registry names, writes it in the current layout (blob bytes are copied as
they are; only the checkpoint header is re-encoded), checks it reads back, and then
deletes the old keys. Integer versions become the current zero-padded string form,
which keeps their order, so graphs resume where they stopped. A timeline goes in batches
of checkpoints, each read, written and read back in four round trips before the next is
read (a blob once, however many checkpoints in a row name it), so the run holds one batch
however long the thread; the timeline's old keys go together once all of it has read back.

Stop every 0.1.0 writer first. A run that stops half-way is safe to repeat with the same
`prefix` and `to_prefix`: the registry is parked under ``{to_prefix}:v010:threads`` (where
the savers of the target look, and refuse the keyspace) until every thread is done, and
``{prefix}:v010:parked`` (`LegacyKeys.parked_into`), set in the same transaction, records
the target under the source until the run completes. A rerun checks both before it writes:
one into another target (it would find no registry under `prefix`, migrate nothing and
strand the parked threads) is refused naming the target, and one from another source
(`_entries`: the parked entries are keys of another prefix) is refused naming the source.
A run into another prefix is refused, before it writes, when a thread it would migrate
exists there already (`_refuse_merging`): the two would become one timeline.
A run holds ``{prefix}:v010:lock`` (`_Lock`) from before its first read to its end: a
second run from `prefix` is refused while it runs. The lock expires `_LOCK_MS` after its last
renewal, so the lock of a run that was killed lapses by itself.

0.1.0's keys of a thread id ``{a}`` are the current layout's keys of thread ``a``
(`LegacyKeys.shadowed_thread`). Threads are migrated longest id first, so such a thread
is migrated, and its old keys deleted, before the shorter thread whose keys they are is
written; `keep_old` is refused when any would stay behind as another thread's keys, and a
registry entry of such a thread that cannot be read is an error, not skipped
(`_refuse_skipping`).

0.1.0 set a TTL per key, so the writes and values of a checkpoint could outlive it. The
writes of one its timeline still lists are deleted with the timeline's keys; values of
expired checkpoints, which only the checkpoint named, and the keys of a timeline that expired
whole stay (`plainredis stats --scan` lists them as orphans).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import shlex
import time
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from typing import Any

import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol
from redis.exceptions import AskError, ClusterCrossSlotError

from ._codec import encode_blob, encode_checkpoint
from ._core import (
    ABSENT,
    VERSION_DIGITS,
    Eval,
    Plan,
    _b,
    _lost_blobs,
    _s,
    client_example,
    interrupted,
    refuses_resp3,
    resp2_needed,
)
from ._errors import CorruptDataError, PlainRedisError, WrongTypeError
from ._keys import SEP, KeySpace, LegacyKeys, ThreadKeys, blob_suffix, escape, escape_run
from ._shell import is_asyncio_client, is_cluster_client
from ._sync import RedisSaver

__all__ = ["MigrationReport", "migrate_v010"]

_MIGRATED_MINOR = "0" * 12
_SOURCE_PAGE, _SOURCE_PAGES = 16, 4  # parked entries `parked_source` reads, at most
# Keys (or hash entries) per command: Redis 5 and 6 drop the connection of a command with
# more than 1,048,576 arguments, and a long 0.1.0 timeline has more keys than that.
_CHUNK = 1000
# Checkpoints of a timeline read, written and read back together (four round trips): what
# the run holds at once, however long the timeline. The first batch of a timeline takes
# `_FIRST`, each next one about `_BATCH_BYTES` of values at the size of the last one's (a
# chat's checkpoints grow with it), `_BATCH` at most.
_FIRST, _BATCH, _BATCH_BYTES = 16, 64, 4 << 20
# The shortest `ttl` a run takes, in seconds. A run reads back each batch it writes, and
# deletes a timeline's 0.1.0 keys only once all of it has read back; a batch takes seconds
# on a loaded server or over a slow link, so keys that expire sooner can be gone before
# their read-back (the run stops) or right after their 0.1.0 keys went (they are lost).
MIN_TTL = 60
# A run holds `LegacyKeys.lock` for `_LOCK_MS`, renewed every `_RENEW_S` while it runs: a
# second run on the prefix is refused, and the lock of a killed run lapses by itself.
_LOCK_MS, _RENEW_S = 30_000, 5.0
# Compare-and-set scripts: a run renews and releases its own lock, never another run's.
_RENEW = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then "
    "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
)
_RELEASE = (
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
)


@dataclass
class MigrationReport:
    """What `migrate_v010` did."""

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0  # distinct channel values written (a value many checkpoints name: once)
    old_keys_deleted: int = 0
    skipped: list[str] = field(default_factory=list)
    # (thread id, namespace) of the timelines the registry named whose 0.1.0 keys were gone
    # (expired under 0.1.0's TTL): nothing to migrate, not counted in `threads`.
    gone: list[tuple[str, str]] = field(default_factory=list)
    # False: no 0.1.0 registry under the prefix, none parked and no unfinished run's record
    # (a keyspace already migrated, an empty one, or a mistyped prefix).
    found: bool = True
    # True: a dry run. Nothing was written; the counts are what the run would migrate and
    # delete, `skipped` the entries it would skip and `gone` the timelines it would find gone.
    dry_run: bool = False


def _unwrap(raw: Any, key: str) -> tuple[str, bytes] | None:
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        return str(doc["t"]), base64.b64decode(doc["d"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptDataError(key, f"not a 0.1.0 JSON+base64 value: {exc}") from None


def _loads(serde: Any, typed: tuple[str, bytes], key: str) -> Any:
    """A 0.1.0 value decoded; one the serializer cannot read is an error naming its key."""
    try:
        return serde.loads_typed(typed)
    except Exception as exc:  # the serializer raises many types on what it cannot read
        interrupted(serde, typed, exc, key)
        raise CorruptDataError(
            key,
            f"{type(exc).__name__}: {exc}",
            "If 0.1.0 ran with another serializer (pickle_fallback=True, say), migrate from "
            "Python with it: migrate_v010(client, prefix=..., serde=...). The run stopped "
            "there: threads migrated so far stay migrated, the rest keep their 0.1.0 keys, "
            "and a rerun goes on where it stopped.",
        ) from exc


_FOREIGN_FIX = (
    "0.1.0 never wrote that type there: another program writes under this prefix. Move "
    "the key aside (RENAME) or delete it, then run the migration again. The run stopped "
    "there: threads migrated so far stay migrated, the rest keep their 0.1.0 keys, and a "
    "rerun goes on where it stopped."
)


_SHAPE_FIX = (
    "Restore the key from a backup, or remove it (DEL the key, or HDEL the field of a writes "
    "hash; what it held is lost), then run the migration again. The run stopped there: "
    "threads migrated so far stay migrated, the rest keep their 0.1.0 keys, and a rerun goes "
    "on where it stopped."
)


def _shown(value: Any) -> str:
    """`value` for an error message: its repr, or its type when that is long."""
    text = repr(value)
    return text if len(text) <= 80 else f"a {type(value).__name__}"


def _misshapen(key: str, reason: str) -> CorruptDataError:
    """A 0.1.0 value that decodes but is not what 0.1.0 stored at `key`."""
    return CorruptDataError(key, reason, _SHAPE_FIX)


def _checkpoint_doc(doc: Any, key: str) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """``(checkpoint, metadata, parent id)`` of a decoded 0.1.0 checkpoint value, read as
    0.1.0 read it (no ``channel_versions``: none; no ``parent_id``: no parent); one of
    another shape is a `CorruptDataError` naming `key`."""
    if not isinstance(doc, dict) or not {"checkpoint", "metadata"} <= doc.keys():
        shape = f"keys {sorted(map(str, doc))}" if isinstance(doc, dict) else type(doc).__name__
        raise _misshapen(
            key, f"it decodes to {shape}, not 0.1.0's {{checkpoint, metadata, parent_id}}"
        )
    checkpoint, metadata, parent_id = doc["checkpoint"], doc["metadata"], doc.get("parent_id")
    if not isinstance(checkpoint, dict):
        raise _misshapen(key, f"its checkpoint is a {type(checkpoint).__name__}, not a dict")
    if not isinstance(metadata, dict):
        raise _misshapen(key, f"its metadata is a {type(metadata).__name__}, not a dict")
    if parent_id is not None and not isinstance(parent_id, str):
        raise _misshapen(key, f"its parent_id {_shown(parent_id)} is not a checkpoint id")
    versions = checkpoint.get("channel_versions") or {}
    seen = checkpoint.get("versions_seen") or {}
    if not isinstance(versions, dict) or not all(
        isinstance(ch, str) and isinstance(v, (str, int, float)) for ch, v in versions.items()
    ):
        raise _misshapen(key, f"its channel_versions ({_shown(versions)}) are not channel: version")
    if not isinstance(seen, dict) or not all(isinstance(v, dict) for v in seen.values()):
        raise _misshapen(
            key, f"its versions_seen ({_shown(seen)}) are not node: {{channel: version}}"
        )
    checkpoint["channel_versions"], checkpoint["versions_seen"] = versions, seen
    return checkpoint, metadata, parent_id


def _write(item: Any, key: str, fld: str) -> tuple[str, str, Any]:
    """A decoded 0.1.0 pending write ``(task id, channel, value)``; one of another shape is
    a `CorruptDataError` naming `key` and its field `fld`."""
    if (
        not isinstance(item, (list, tuple))
        or len(item) != 3
        or not isinstance(item[0], str)
        or not isinstance(item[1], str)
    ):
        raise _misshapen(
            key,
            f"its field {fld!r} decodes to {_shown(item)}, not 0.1.0's (task id, channel, value)",
        )
    return item[0], item[1], item[2]


def _read(client: redis.Redis, key: bytes | str, expected: str, read: Callable[[], Any]) -> Any:
    """`read()`, a read of the 0.1.0 `expected` at `key`, whose WRONGTYPE reply becomes a
    `WrongTypeError` naming the key, the type found there and the fix."""
    try:
        return read()
    except redis.ResponseError as exc:
        return _checked(client, key, expected, exc)


def _checked(client: redis.Redis, key: bytes | str, expected: str, reply: Any) -> Any:
    """A pipeline's `reply` to a read of the 0.1.0 `expected` at `key`, as `_read` gives it:
    an error reply is raised, a WRONGTYPE one as a `WrongTypeError`."""
    if not isinstance(reply, redis.ResponseError):
        return reply
    if not str(reply).startswith("WRONGTYPE"):
        raise reply
    found = _s(client.type(key))
    raise WrongTypeError(_s(key), found, expected, _FOREIGN_FIX) from None


def _version(value: Any) -> Any:
    """Integer versions of 0.1.0 become strings that sort the same way."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:0{VERSION_DIGITS}}.{_MIGRATED_MINOR}"
    return value


_CLUSTER = (
    "the server is a Redis Cluster node{answer}: the migration needs the standalone Redis "
    "server 0.1.0 wrote to (0.1.0 could not read its data back from a cluster, so a cluster "
    "holds nothing to migrate). Point the client (plainredis migrate --url) at that "
    "standalone server."
)


# The client to build: protocol=2 for Redis 5, which has no RESP3 (redis-py 8's default).
_CLIENT = client_example("RedisSaver")


def _resp2_needed(error: redis.ResponseError, started: bool) -> PlainRedisError:
    """The error for a RESP3 client on a server without RESP3 (Redis 5), naming the fix;
    `started`: the run may have migrated threads before the connection that failed."""
    where = (
        "The run stopped there: threads migrated so far stay migrated, the rest keep their "
        "0.1.0 keys, and a rerun goes on where it stopped."
        if started
        else "Nothing was changed."
    )
    return resp2_needed(
        error,
        f"build the client with protocol=2, e.g. {_CLIENT} (redis-py 8 defaults to 3), or "
        f"run `plainredis migrate --url URL --prefix ...`, which does. {where}",
    )


def _check_client(client: Any) -> None:
    """Raises `TypeError` naming the type of `client` when it cannot run blocking commands:
    a URL, a `redis.asyncio` client, anything without `execute_command` and `pipeline`. A
    wrapper that has both (instrumentation's, say) will do, as it does for `RedisSaver`."""
    kind = type(client)
    if isinstance(client, (str, bytes)):
        fix = (
            f"pass a client built from it, {_CLIENT}, or run `plainredis migrate --url URL "
            "--prefix ...` from a shell"
        )
    elif is_asyncio_client(client):
        fix = f"the migration runs blocking commands: pass a redis.Redis client, e.g. {_CLIENT}"
    elif hasattr(client, "execute_command") and hasattr(client, "pipeline"):
        return
    else:
        fix = f"pass a redis.Redis client, e.g. {_CLIENT}"
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    raise TypeError(f"migrate_v010 got a client of type {name}: {fix}")


def _refuse_cluster(client: redis.Redis) -> None:
    """Raises `PlainRedisError` when `client` talks to a cluster (its keys are spread over
    nodes, and the migration renames and reads across them)."""
    if is_cluster_client(client):
        raise PlainRedisError(_CLUSTER.format(answer=""))
    try:
        enabled = client.info("cluster").get("cluster_enabled")
    except redis.ResponseError as error:
        if refuses_resp3(error):  # the connection's HELLO 3, before INFO was sent
            raise _resp2_needed(error, started=False) from None
        return  # a user without INFO, say: a cluster's MOVED reply is caught in migrate_v010
    if enabled:
        raise PlainRedisError(_CLUSTER.format(answer=" (INFO says cluster_enabled:1)"))


def _is_cluster_reply(error: redis.ResponseError) -> bool:
    if isinstance(error, (AskError, ClusterCrossSlotError)):  # MovedError is an AskError
        return True
    return str(error).split(" ", 1)[0] in {"MOVED", "ASK", "CROSSSLOT", "CLUSTERDOWN"}


def _named(name: str, value: str) -> str:
    """An argument as the caller writes it: ``--to-prefix new`` or ``to_prefix='new'``."""
    return f"{name} {shlex.quote(value)}" if name.startswith("-") else f"{name}={value!r}"


def _suggested(prefix: str) -> str:
    """A prefix the savers accept, made from the 0.1.0 `prefix`, and one a run from it
    takes: not one whose keys start with the other's (``lg`` for ``lg:*``)."""
    base = re.sub(r"[{}*?\[\]\\\x00-\x20\x7f]+", "-", prefix).strip("-:") or "lg"
    if _nested(prefix, base):
        base += "-migrated"
    return base


def _nested(prefix: str, target: str) -> bool:
    """Whether the keys under one of two different prefixes start with the other."""
    old, new = prefix + SEP, target + SEP
    return old != new and (old.startswith(new) or new.startswith(old))


def target_prefix(
    prefix: str, to_prefix: str | None, names: tuple[str, str] = ("prefix", "to_prefix")
) -> str:
    """The prefix the migration writes under (`to_prefix`, by default `prefix`), after
    checking both: a ValueError naming the value and the fix (`names` are the arguments as
    the caller spells them) for a `prefix` 0.1.0 never wrote under, a target the savers
    refuse, or two prefixes whose keys could be the same keys."""
    if not isinstance(prefix, str) or not prefix or prefix.endswith(SEP):
        fixed = prefix.rstrip(SEP) if isinstance(prefix, str) else ""
        raise ValueError(
            f"{_named(names[0], str(prefix))}: 0.1.0 never wrote under it (it stripped a "
            f"trailing {SEP!r} and used 'lg' for an empty prefix): pass "
            f"{_named(names[0], fixed or 'lg')}"
        )
    target = prefix if to_prefix is None else to_prefix
    try:
        KeySpace(target)
    except (TypeError, ValueError) as exc:
        if to_prefix is not None:
            raise ValueError(f"{_named(names[1], str(to_prefix))}: {exc}") from None
        raise ValueError(
            f"{_named(names[0], prefix)}: 0.1.0 accepted this prefix but the current savers "
            f"do not ({exc}). Migrate into one they accept with "
            f"{_named(names[1], _suggested(prefix))} (or another valid prefix), then give "
            "the savers that prefix"
        ) from None
    if _nested(prefix, target):
        raise ValueError(
            f"{_named(names[1], target)} and {_named(names[0], prefix)}: the keys under one "
            "prefix start with the other, so 0.1.0 keys and migrated keys could be the same "
            f"keys. Pass {_named(names[1], prefix)} (the default) if the savers accept it, or "
            "a prefix that does not start with the other and that the other does not start with"
        )
    return target


@dataclass
class _Entry:
    """One entry of 0.1.0's registry: the timeline of (thread, namespace)."""

    idx_key: bytes
    thread_id: str
    ns: str


def _where(value: Any) -> tuple[str, str] | None:
    """``(thread id, namespace)`` a 0.1.0 registry value names; None for one 0.1.0 never
    wrote."""
    try:
        where = json.loads(value)
        return str(where["thread"]), str(where["ns"])
    except (ValueError, KeyError, TypeError):
        return None


def parked_source(client: Any, target: str) -> str | None:
    """The prefix 0.1.0 wrote under that an unfinished migration into `target` reads from,
    read from an entry of the registry it parked (`LegacyKeys.stash`), whose fields are 0.1.0
    timeline keys of that prefix; None when none of its first entries names one, or the
    user may not HSCAN. For error messages: it names the arguments of the rerun."""
    stash = LegacyKeys(target).stash
    cursor: Any = 0
    try:
        for _ in range(_SOURCE_PAGES):
            cursor, page = client.hscan(stash, cursor, count=_SOURCE_PAGE)
            for key, value in page.items():
                where = _where(value)
                source = (
                    LegacyKeys.timeline_prefix(_b(key).decode(errors="replace"), *where)
                    if where
                    else None
                )
                if source is not None:
                    return source
            if not int(cursor):
                break
    except redis.ResponseError:  # NOPERM, or WRONGTYPE: the error stays without it
        pass
    return None


def _rerun(source: str, target: str) -> str:
    """The rerun that finishes a migration from `source` into `target`: the command (with
    its required --url) and the call."""
    return (
        f"`plainredis migrate --url redis://... --prefix {shlex.quote(source)} --to-prefix "
        f"{shlex.quote(target)}`, or migrate_v010(client, prefix={source!r}, "
        f"to_prefix={target!r})"
    )


def _refuse_skipping(field: str, value: Any, registry: str, legacy: LegacyKeys) -> None:
    """Raises `CorruptDataError` naming `registry` and its entry `field` (unreadable, or
    naming another timeline) when the entry cannot be skipped: the timeline `field` of a
    thread id such as ``{a}`` is thread ``a``'s in the current layout
    (`LegacyKeys.shadowed_thread`), which the migration of ``a`` would write into."""
    head = legacy.idx_head
    shadowed = LegacyKeys.shadowed_thread(field[len(head) :]) if field.startswith(head) else None
    if shadowed is None:
        return
    raise CorruptDataError(
        registry,
        f"its field {field!r} holds {_shown(_b(value).decode(errors='replace'))}, not 0.1.0's "
        '{"thread": ..., "ns": ...} naming the thread and namespace of that timeline; skipped, '
        f"it would stay behind as keys of thread {shadowed!r} in the current layout, which the "
        f"migration of {shadowed!r} writes into",
        f"Restore the field from a backup, or drop that timeline: HDEL the field and DEL the "
        f"key {field!r} (its checkpoints are lost, and its other 0.1.0 keys stay as orphans "
        "that `plainredis stats --scan` lists). Then run the migration again; nothing was "
        "changed.",
    )


def _entries(
    raw: dict[Any, Any],
    registry: str,
    legacy: LegacyKeys,
    stash: str,
    target: str,
    report: MigrationReport,
) -> list[_Entry]:
    """The entries of the registry hash `registry` (`raw`) in the order they are migrated;
    unreadable ones, and ones naming another timeline than their own, go to
    `report.skipped`, unless skipping one would mix it with another thread
    (`_refuse_skipping`). An entry another 0.1.0 prefix parked here is an error naming it."""
    entries: list[_Entry] = []
    for idx_key, value in raw.items():
        key = _b(idx_key).decode(errors="replace")
        where = _where(value)
        if where is not None and key != legacy.idx(*where):
            other = LegacyKeys.timeline_prefix(key, *where)
            if other is not None:
                raise PlainRedisError(
                    f"the 0.1.0 registry entry {key!r} is of prefix {other!r}, not "
                    f"{legacy.prefix!r}: a migration from {other!r} into {target!r} has not "
                    f"finished (it parked that registry at {stash!r}). Run that one again "
                    f"({_rerun(other, target)}); nothing was changed."
                )
            where = None  # its timeline is `key`, whose thread and namespace it does not name
        if where is None:
            _refuse_skipping(key, value, registry, legacy)
            report.skipped.append(key)
            continue
        entries.append(_Entry(_b(idx_key), *where))
    # A 0.1.0 thread whose old keys are keys of another thread goes before that thread
    # (`LegacyKeys.shadowed_thread`: it is shorter), so no write lands on a 0.1.0 key that is
    # still to be read and no delete on a migrated key. The sort is stable.
    entries.sort(key=lambda e: -len(e.thread_id))
    return entries


def _refuse_another_target(client: redis.Redis, prefix: str, target: str) -> None:
    """Refuses a run from `prefix` into `target` while a run from `prefix` into another
    prefix is unfinished: its registry is parked under that prefix, so this run would find
    nothing to migrate, and the threads not migrated yet would stay where only a rerun into
    that prefix reaches them. A record whose parked registry is gone (the run was stopped
    after its last thread, or its unreadable entries were removed) no longer holds anything."""
    marker = LegacyKeys(prefix).parked_into
    raw = _read(client, marker, "string", partial(client.get, marker))
    if raw is None:
        return
    into = _b(raw).decode(errors="replace")
    stash = LegacyKeys(into).stash
    if into == target or not client.exists(stash):
        return
    raise PlainRedisError(
        f"a migration from {prefix!r} into {into!r} has not finished: it parked the 0.1.0 "
        f"registry of {prefix!r} at {stash!r} (as {marker!r} records), so a run into "
        f"{target!r} would find nothing to migrate. Run that one again "
        f"({_rerun(prefix, into)}); nothing was changed."
    )


def _refuse_merging(client: redis.Redis, entries: list[_Entry], prefix: str, target: str) -> None:
    """Refuses a run into `target` when a thread it would migrate exists there already
    (its registry names it, or its namespace set exists): the two threads would become one,
    their checkpoints mixed in one timeline. Also when an earlier run of this migration put
    it there and a 0.1.0 writer went on afterwards: its new checkpoints name values that run
    deleted, and the app may have gone on on the migrated thread too."""
    keyspace = KeySpace(target)
    thread_ids = list(dict.fromkeys(entry.thread_id for entry in entries))
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros / 1000  # the clock of the registry's expiry scores
    existing: list[str] = []
    for part in _chunks(thread_ids):
        with client.pipeline(transaction=False) as pipe:
            for thread_id in part:
                tk = keyspace.thread(thread_id)
                pipe.zscore(keyspace.threads, tk.component)
                pipe.exists(tk.ns)
            replies = pipe.execute(raise_on_error=False)
        for i, thread_id in enumerate(part):
            score, exists = replies[2 * i], replies[2 * i + 1]
            if isinstance(score, redis.ResponseError) and not str(score).startswith("WRONGTYPE"):
                raise score
            if isinstance(exists, Exception):
                raise exists
            # A registry of another type is the savers' to refuse; an entry of a thread that
            # expired stays until a saver sweeps it.
            listed = isinstance(score, float) and score > now_ms
            if listed or exists:
                existing.append(thread_id)
    if not existing:
        return
    shown = ", ".join(map(repr, existing[:5])) + (", ..." if len(existing) > 5 else "")
    raise PlainRedisError(
        f"the target prefix {target!r} already holds {len(existing)} of the {len(thread_ids)} "
        f"thread ids the run would migrate from {prefix!r} ({shown}): migrated, each 0.1.0 "
        "thread would be mixed with the thread of its id there into one timeline. If they are "
        "other threads, migrate into a target prefix that holds none of these ids (an empty "
        f"one), or delete them under {target!r} first (`plainredis prune --strategy delete "
        f"--url redis://... --prefix {shlex.quote(target)} THREAD...`). If an earlier run "
        f"migrated them from {prefix!r} and a 0.1.0 writer went on afterwards, keep them: "
        "what it wrote since is not migrated (a finished thread is never added to; stop every "
        "0.1.0 writer before migrating); nothing was changed."
    )


def _refuse_keeping_shadows(entries: list[_Entry], legacy: LegacyKeys) -> None:
    """With `keep_old`, a 0.1.0 key that is also a key of the current layout would stay and
    be read as part of another thread: refused before anything is written."""
    for entry in entries:
        shadowed = LegacyKeys.shadowed_thread(entry.thread_id)
        if shadowed is not None:
            raise PlainRedisError(
                f"keep_old (--keep-old) would leave the 0.1.0 keys of thread "
                f"{entry.thread_id!r} in place, and they are keys of thread {shadowed!r} in "
                f"the current layout (its 0.1.0 timeline {legacy.idx(entry.thread_id, entry.ns)!r}"
                f" is the timeline of {shadowed!r}), which would read them as its own. Run the "
                "migration without keep_old / --keep-old (a backup keeps the 0.1.0 keys), or "
                "into another prefix (to_prefix= / --to-prefix); nothing was changed."
            )


def migrate_v010(
    client: redis.Redis,
    prefix: str = "lg",
    *,
    to_prefix: str | None = None,
    ttl: float | None = None,
    serde: SerializerProtocol | None = None,
    keep_old: bool = False,
    progress: Callable[[str], None] | None = None,
    dry_run: bool = False,
) -> MigrationReport:
    """Moves a 0.1.0 keyspace into the current layout, losslessly and idempotently.

    Args:
        client: A blocking client (``decode_responses=False``) of a standalone server, with
            ``protocol=2`` for Redis 5: ``redis.Redis.from_url(url, protocol=2)``.
        prefix: The prefix 0.1.0 used (its default was ``lg``): any prefix 0.1.0 accepted.
        to_prefix: The prefix to migrate into (default: `prefix`); one the savers accept.
            Needed when 0.1.0's prefix is one the savers refuse, such as ``{agents}``.
            A rerun of an unfinished run must name the same one (refused otherwise).
        ttl: TTL for the migrated threads, as the saver's `ttl`: `MIN_TTL` seconds or more
            (the run reads back what it wrote before it deletes the 0.1.0 keys).
        serde: The serializer 0.1.0 was configured with, if not the default.
        keep_old: Leave the 0.1.0 keys of every thread in place. Refused (before anything is
            written) when a 0.1.0 thread id such as ``{a}`` has keys that are keys of the
            current layout. 0.1.0's registry ``{prefix}:threads`` is not kept: the run parks
            and empties it, and in place the current registry takes its name, so 0.1.0 could
            read a thread by id but not list the threads (nor, in place, write).
        progress: Called with a line of text per migrated (thread, namespace), and per one
            skipped as gone (expired under 0.1.0's TTL).
        dry_run: Write nothing: make every check the run makes before it writes, read and
            decode everything it would migrate (a value it could not read is the error the
            run would stop with), and count what it would migrate and delete. Takes no
            lock; refused, as a run is, while a run from `prefix` holds it.

    Returns:
        Counts of what was migrated (with `dry_run`, of what would be).

    Raises:
        TypeError: `client` is no blocking client (a URL, or a `redis.asyncio` client).
        ValueError: A prefix 0.1.0 never wrote under, a target the savers refuse, two
            prefixes whose keys could be the same, or a `ttl` under `MIN_TTL`.
        PlainRedisError: Another run on `prefix` holds its lock (`{prefix}:v010:lock`;
            nothing was changed); the server is a cluster node; `client` speaks RESP3 (redis-py 8's
            default) to a server without it, such as Redis 5 (the message names
            ``protocol=2``; nothing was changed); a run from `prefix` into another prefix, or
            from another prefix into `to_prefix`, is unfinished (the message names the
            arguments that finish it; nothing was changed); `to_prefix` holds threads of ids
            being migrated (nothing was changed); or the run stopped (the message names the
            key and the fix; a rerun goes on where it stopped).
    """
    _check_client(client)
    target = target_prefix(prefix, to_prefix)
    _check_ttl(ttl)
    _refuse_cluster(client)
    lock = _Lock(client, prefix)
    try:
        if dry_run:
            lock.refuse_if_held()
            return _migrate(client, prefix, target, ttl, serde, keep_old, progress, None)
        lock.acquire()
        try:
            return _migrate(client, prefix, target, ttl, serde, keep_old, progress, lock)
        finally:
            lock.release()
    except redis.ResponseError as exc:
        if refuses_resp3(exc):  # a connection opened later (the pool's second, say)
            raise _resp2_needed(exc, started=True) from None
        if not _is_cluster_reply(exc):
            raise
        answer = f" (it answered {str(exc).split(' ', 1)[0]})"
        raise PlainRedisError(_CLUSTER.format(answer=answer)) from None


def _check_ttl(ttl: float | None) -> None:
    """Refuses a `ttl` under `MIN_TTL` (the saver checks the rest)."""
    if ttl is not None and ttl < MIN_TTL:
        raise ValueError(
            f"ttl={ttl!r} is shorter than {MIN_TTL} seconds: the run reads back each batch it "
            "writes, and deletes a thread's 0.1.0 keys only once all of it has read back, so "
            "migrated keys that expire sooner could be gone before then. Pass ttl="
            f"{MIN_TTL} or more (--ttl {MIN_TTL}), or none to keep the threads for ever"
        )


class _Lock:
    """The lock of a run from a prefix: set if absent with an expiry (`_LOCK_MS`), renewed as
    the run goes, and renewed and released only by the run that holds it (its token)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        self.key = LegacyKeys(prefix).lock
        self.token = uuid.uuid4().hex
        self.renewed = 0.0

    def acquire(self) -> None:
        """Takes the lock, or raises `PlainRedisError` naming when a dead holder's lapses."""
        for _ in range(2):  # once more if the holder's lapsed between the SET and the PTTL
            if self.client.set(self.key, self.token, nx=True, px=_LOCK_MS):
                self.renewed = time.monotonic()
                return
            left = self.client.pttl(self.key)
            if left != -2:
                raise self._held(left)
        raise PlainRedisError(
            f"other migrations from prefix {self.prefix!r} took and let go of the lock "
            f"{self.key!r} twice as this one started: run it again once they are done; "
            "nothing was changed."
        )

    def refuse_if_held(self) -> None:
        """Raises `PlainRedisError` when a run holds the lock; reads only (a dry run)."""
        left = self.client.pttl(self.key)
        if left != -2:
            raise self._held(left)

    def _held(self, left: int) -> PlainRedisError:
        """The refusal while another run holds the lock, which lapses in `left` ms (-1:
        never)."""
        lapse = f"{max(left, 0) / 1000:.0f} s" if left >= 0 else "never: it has no expiry"
        return PlainRedisError(
            f"another migration from prefix {self.prefix!r} is running: it holds the lock "
            f"{self.key!r}, renewed every {_RENEW_S:g} s while it runs. Let it finish; if it "
            f"was killed, its lock lapses in {lapse} (after {_LOCK_MS // 1000} s unrenewed)"
            + (
                ", then run again"
                if left >= 0
                else f" (no plainredis run sets a lock without one: DEL {self.key!r}"
                ", then run again)"
            )
            + "; nothing was changed."
        )

    def renew(self) -> None:
        """Renews the lock if `_RENEW_S` went by; raises `PlainRedisError` if it lapsed and
        another run may have taken over. Called before the run deletes anything too: a lock
        renewed less than `_RENEW_S` ago is held for most of `_LOCK_MS` yet, and one older
        is confirmed first, so a run that lost its lock (a stall) deletes nothing."""
        if time.monotonic() - self.renewed < _RENEW_S:
            return
        if not self.client.eval(_RENEW, 1, self.key, self.token, _LOCK_MS):
            raise PlainRedisError(
                f"the run lost its lock {self.key!r}: it went {_LOCK_MS // 1000} s without "
                "renewing it (a stalled process, or a server that was paused), and another "
                "run may have started. The run stopped there: threads migrated so far stay "
                "migrated, the rest keep their 0.1.0 keys, and the same command run again goes "
                "on where it stopped, once no other run holds the lock."
            )
        self.renewed = time.monotonic()

    def release(self) -> None:
        """Deletes the lock if this run still holds it. An error here (a lost connection, say)
        is not raised: the run is over either way, and the lock lapses by itself."""
        with contextlib.suppress(redis.RedisError):
            self.client.eval(_RELEASE, 1, self.key, self.token)


def _migrate(
    client: redis.Redis,
    prefix: str,
    target: str,
    ttl: float | None,
    serde: SerializerProtocol | None,
    keep_old: bool,
    progress: Callable[[str], None] | None,
    lock: _Lock | None,
) -> MigrationReport:
    """The run, holding `lock`; without one, a dry run: the same checks and reads, no write."""
    dry_run = lock is None
    legacy = LegacyKeys(prefix)
    # Parked where the savers of the target prefix look, so they refuse it until done.
    stash = LegacyKeys(target).stash
    _refuse_another_target(client, prefix, target)
    target_registry = LegacyKeys(target).registry  # the current layout's registry there
    kind = _s(client.type(target_registry)) if target != prefix else "none"
    if kind == "hash":
        raise PlainRedisError(
            f"the target prefix {target!r} holds a keyspace 0.1.0 wrote (its registry "
            f"{target_registry!r} is a hash): pick a target prefix that holds no "
            f"threads, or migrate {target!r} in place first (a run into it then refuses the "
            "thread ids both prefixes hold); nothing was changed."
        )
    if kind not in ("none", "zset"):  # the first put would refuse it, half-way through
        raise WrongTypeError(target_registry, kind, "zset")
    parked = _read(client, stash, "hash", partial(client.hgetall, stash))
    registry: dict[Any, Any] | None = (
        client.hgetall(legacy.registry) if client.type(legacy.registry) == b"hash" else None
    )
    # Every check reads what is waiting, before anything is written.
    waiting = _entries(registry or {}, legacy.registry, legacy, stash, target, MigrationReport())
    unparked = {k: v for k, v in parked.items() if k not in (registry or {})}
    waiting += _entries(unparked, stash, legacy, stash, target, MigrationReport())
    if keep_old and target == prefix:
        _refuse_keeping_shadows(waiting, legacy)
    if target != prefix and not parked:  # a rerun finds the threads its run wrote there
        _refuse_merging(client, waiting, prefix, target)
    # 0.1.0 data to finish: a registry, a parked one, or the record of a run that stopped
    # after its last thread. Without any, `legacy.seq` is not 0.1.0's and is left alone.
    found = registry is not None or bool(parked) or bool(client.exists(legacy.parked_into))
    report = MigrationReport(found=found, dry_run=dry_run)
    if dry_run:  # what parking would leave at `stash`: the registry over what was parked
        raw = {**parked, **(registry or {})}
    elif registry is not None or parked:
        # Park the old registry (the current layout keeps a zset under that name) and record
        # under the source where it went, together: a rerun into another target is refused.
        with client.pipeline(transaction=True) as pipe:
            pipe.set(legacy.parked_into, target)
            if registry is not None and parked:
                for part in _chunks(list(registry.items())):
                    pipe.hset(stash, mapping=dict(part))
                pipe.delete(legacy.registry)
            elif registry is not None:
                pipe.rename(legacy.registry, stash)
            pipe.execute()
    if not dry_run:
        raw = _read(client, stash, "hash", partial(client.hgetall, stash))
    entries = _entries(raw, stash, legacy, stash, target, report)
    saver = RedisSaver(client=client, prefix=target, ttl=ttl, serde=serde)
    saver._migrating = True  # it writes while 0.1.0's registry is parked: see _ready_plan
    migrated, skipped = ("would migrate", "would skip") if dry_run else ("migrated", "skipped")
    for entry in entries:
        thread_id, ns = entry.thread_id, entry.ns
        if lock is not None:
            lock.renew()
        old_keys = _migrate_timeline(
            saver, client, legacy, entry.idx_key, thread_id, ns, report, lock, dry_run
        )
        if old_keys is None:  # expired whole under 0.1.0's TTL: nothing to migrate
            report.gone.append((thread_id, ns))
            if not dry_run:
                client.hdel(stash, entry.idx_key)
            if progress:
                progress(
                    f"{skipped} thread {thread_id!r} namespace {ns!r}: gone (its 0.1.0 "
                    f"timeline {_b(entry.idx_key).decode(errors='replace')!r} expired, say)"
                )
            continue
        if progress:
            progress(f"{migrated} thread {thread_id!r} namespace {ns!r}")
        if lock is None:
            if not keep_old:
                report.old_keys_deleted += _existing(client, old_keys)
        elif keep_old:
            client.hdel(stash, entry.idx_key)
        else:
            lock.renew()
            report.old_keys_deleted += _delete(client, old_keys, stash, entry.idx_key)
        report.threads += 1
    if report.skipped:
        return report
    # 0.1.0's counter is a string; a key of another type there is another program's.
    seq = not keep_old and found and _s(client.type(legacy.seq)) == "string"
    if lock is None:  # the parked registry: emptied entry by entry, gone by then
        report.old_keys_deleted += seq
        return report
    lock.renew()
    if not keep_old:
        report.old_keys_deleted += client.delete(stash)
        if seq:
            report.old_keys_deleted += client.delete(legacy.seq)
    client.delete(legacy.parked_into)  # done: a run into any prefix finds nothing
    return report


def _chunks(items: list[Any]) -> list[list[Any]]:
    """`items` in runs of at most `_CHUNK`, one command's arguments each."""
    return [items[i : i + _CHUNK] for i in range(0, len(items), _CHUNK)]


def _existing(client: redis.Redis, keys: list[bytes | str]) -> int:
    """How many of `keys` (distinct) exist: an EXISTS per `_CHUNK` keys, in one round trip."""
    with client.pipeline(transaction=False) as pipe:
        for part in _chunks(keys):
            pipe.exists(*part)
        return sum(pipe.execute())


def _delete(client: redis.Redis, keys: list[bytes | str], stash: str, entry: bytes) -> int:
    """Deletes `keys` all at once, as one DEL did, and with them the `entry` of their
    timeline in the parked registry `stash`: a DEL per `_CHUNK` keys and the HDEL in one
    transaction, so a run stopped half-way leaves none of a timeline's keys gone without the
    rest (a rerun would read its checkpoints without their blobs)."""
    with client.pipeline(transaction=True) as pipe:
        for part in _chunks(keys):
            pipe.delete(*part)
        pipe.hdel(stash, entry)
        return sum(pipe.execute()[:-1])


@dataclass
class _Blob:
    """A 0.1.0 channel value: `stored` as a put writes it (`ABSENT` for an empty channel),
    and `compared`, the value as `_as_stored` gives it (None: the channel is absent)."""

    stored: bytes
    compared: Any


@dataclass
class _Checkpoint:
    """A 0.1.0 checkpoint encoded for the current layout, with what it must read back as:
    the values of its 0.1.0 blobs, and its metadata and pending writes as compared."""

    cid: str
    payload: bytes
    refs: list[str]
    channels: list[str]  # of `refs`, in order
    blob_keys: list[str]  # the 0.1.0 key of each of `refs`
    run_key: str | None
    metadata: Any
    writes: list[tuple[str, list[tuple[str, Any]]]]  # (task id, its writes), for put_writes
    pending: list[tuple[str, str, tuple[str, bytes]]]


def _migrate_timeline(
    saver: RedisSaver,
    client: redis.Redis,
    legacy: LegacyKeys,
    idx_key: bytes,
    thread_id: str,
    ns: str,
    report: MigrationReport,
    lock: _Lock | None = None,
    dry_run: bool = False,
) -> list[bytes | str] | None:
    """Copies one (thread, namespace) in batches of checkpoints (`_BATCH`), each read back
    before the next is read, so that the run holds one batch however long the timeline is;
    returns the 0.1.0 keys it read, each once, or None when its timeline key is gone
    (renewing `lock` as it goes). With `dry_run`, reads and decodes the batches and counts
    them, but writes nothing."""
    tk = saver.keyspace.thread(thread_id)
    # A set in insertion order: every checkpoint names the blob of every channel, most of
    # them the blob its parent named.
    old_keys: dict[bytes | str, None] = {idx_key: None}
    blobs: dict[str, _Blob | None] = {}  # by 0.1.0 key; None: 0.1.0 let it expire
    sent: set[str] = set()  # the blobs written, which later puts of the timeline only name
    timeline = (idx_key, thread_id, ns)
    page = _read(client, idx_key, "zset", partial(client.zrange, idx_key, 0, _BATCH - 1))
    if not page:  # Redis keeps no empty zset: the timeline expired whole
        return None
    start, size = len(page), _FIRST
    while page:
        if lock is not None:
            lock.renew()
        ids, page = page[:size], page[size:]
        # The next page of ids comes with the batch that leaves less than a batch of this one.
        at = start if len(page) < _BATCH else None
        batch, more = _read_batch(saver, client, legacy, timeline, ids, at, old_keys)
        page += more
        start += len(more)
        named = list(dict.fromkeys(key for checkpoint in batch for key in checkpoint.blob_keys))
        # The blobs the previous batch's last checkpoint named are read already.
        blobs = {key: blobs[key] for key in named if key in blobs}
        blobs.update(_fetch(client, saver.serde, [key for key in named if key not in blobs]))
        if dry_run:
            for checkpoint in batch:
                _tally(checkpoint, blobs, sent, report)
                report.checkpoints += 1
        else:
            _write_batch(saver, tk, ns, batch, blobs, sent, report)
            _verify(saver, tk, ns, batch, blobs)
        size = _next_size(size, batch, blobs, named)
        blobs = {key: blobs[key] for key in batch[-1].blob_keys} if batch else {}
    return list(old_keys)


def _next_size(
    size: int, batch: list[_Checkpoint], blobs: dict[str, _Blob | None], named: list[str]
) -> int:
    """How many checkpoints the batch after `batch` takes (`size`: how many ids it took)."""
    if not batch:
        return size
    stored = sum(len(blob.stored) for key in named if (blob := blobs[key]) is not None)
    return max(1, min(_BATCH, _BATCH_BYTES * len(batch) // max(stored, 1)))


def _read_batch(
    saver: RedisSaver,
    client: redis.Redis,
    legacy: LegacyKeys,
    timeline: tuple[bytes, str, str],
    ids: list[Any],
    start: int | None,
    old_keys: dict[bytes | str, None],
) -> tuple[list[_Checkpoint], list[Any]]:
    """The 0.1.0 checkpoints `ids` of `timeline` ``(its 0.1.0 index key, thread id,
    namespace)`` with their writes, and with a `start` the page of ids from there, in one
    round trip; their keys are added to `old_keys`. One 0.1.0 let expire is left out."""
    idx_key, thread_id, ns = timeline
    cids = [_s(raw) for raw in ids]
    keys = [(legacy.cp(thread_id, ns, cid), legacy.wr(thread_id, ns, cid)) for cid in cids]
    with client.pipeline(transaction=False) as pipe:
        for cp_key, wr_key in keys:
            pipe.get(cp_key)
            pipe.hgetall(wr_key)
        if start is not None:
            pipe.zrange(idx_key, start, start + _BATCH - 1)
        replies = pipe.execute(raise_on_error=False)
    batch: list[_Checkpoint] = []
    for n, (cid, (cp_key, wr_key)) in enumerate(zip(cids, keys, strict=True)):
        typed = _unwrap(_checked(client, cp_key, "string", replies[2 * n]), cp_key)
        if typed is None:  # expired under 0.1.0's TTL: nothing to carry over
            old_keys[wr_key] = None  # its writes may outlive it
            continue
        raw_writes = _checked(client, wr_key, "hash", replies[2 * n + 1])
        checkpoint = _encoded(saver, legacy, thread_id, ns, cid, typed, raw_writes)
        old_keys.update(dict.fromkeys((*checkpoint.blob_keys, cp_key, wr_key)))
        batch.append(checkpoint)
    after = replies[-1] if start is not None else []
    return batch, _checked(client, idx_key, "zset", after)


def _encoded(
    saver: RedisSaver,
    legacy: LegacyKeys,
    thread_id: str,
    ns: str,
    cid: str,
    typed: tuple[str, bytes],
    raw_writes: dict[Any, Any],
) -> _Checkpoint:
    """The 0.1.0 checkpoint `cid` (its value `typed`, the fields of its writes hash
    `raw_writes`) decoded and encoded for the current layout."""
    serde = saver.serde
    cp_key, wr_key = legacy.cp(thread_id, ns, cid), legacy.wr(thread_id, ns, cid)
    checkpoint, metadata, parent_id = _checkpoint_doc(_loads(serde, typed, cp_key), cp_key)
    old_versions = dict(checkpoint["channel_versions"])
    checkpoint["channel_versions"] = {ch: _version(v) for ch, v in old_versions.items()}
    checkpoint["versions_seen"] = {
        node: {ch: _version(v) for ch, v in seen.items()}
        for node, seen in checkpoint["versions_seen"].items()
    }
    checkpoint.pop("channel_values", None)
    refs = [blob_suffix(ch, v) for ch, v in checkpoint["channel_versions"].items()]
    run_id = metadata.get("run_id")
    payload = encode_checkpoint(
        parent_id,
        escape_run(str(run_id)) if run_id is not None else "",
        refs,
        serde.dumps_typed(checkpoint),
        serde.dumps_typed(metadata),
    )
    by_task: dict[str, list[tuple[int, str, Any]]] = {}
    for fld, raw in raw_writes.items():
        unwrapped = _unwrap(raw, wr_key)
        if unwrapped is None:
            continue
        name = _b(fld).decode(errors="replace")
        index = LegacyKeys.write_index(name)
        if index is None:
            raise _misshapen(wr_key, f"its field {name!r} does not end with 0.1.0's ':index'")
        task_id, channel, value = _write(_loads(serde, unwrapped, wr_key), wr_key, name)
        by_task.setdefault(task_id, []).append((index, channel, value))
    writes: list[tuple[str, list[tuple[str, Any]]]] = []
    pending: list[tuple[str, str, Any]] = []
    for task_id, items in by_task.items():
        items.sort(key=lambda w: (w[0] < 0, w[0]))
        writes.append((task_id, [(ch, v) for _, ch, v in items]))
        pending += [(task_id, ch, v) for _, ch, v in items]
    return _Checkpoint(
        cid=cid,
        payload=payload,
        refs=refs,
        channels=list(old_versions),
        blob_keys=[legacy.blob(thread_id, ns, ch, v) for ch, v in old_versions.items()],
        run_key=saver.keyspace.run(str(run_id)) if run_id is not None else None,
        metadata=_as_stored(serde, metadata),
        writes=writes,
        pending=_writes(serde, pending),
    )


def _fetch(client: redis.Redis, serde: SerializerProtocol, keys: list[str]) -> dict[str, Any]:
    """The 0.1.0 blobs `keys` (distinct) as `_Blob`s, None for one 0.1.0 let expire: read
    with an MGET per `_CHUNK` keys in one round trip, and one more for the keys MGET finds
    no string at (expired, or another program's value, which is an error naming it)."""
    if not keys:
        return {}
    with client.pipeline(transaction=False) as pipe:
        for part in _chunks(keys):
            pipe.mget(part)
        raw = dict(zip(keys, chain.from_iterable(pipe.execute()), strict=True))
    missing = [key for key, value in raw.items() if value is None]
    if missing:
        with client.pipeline(transaction=False) as pipe:
            for key in missing:
                pipe.get(key)
            replies = pipe.execute(raise_on_error=False)
        for key, reply in zip(missing, replies, strict=True):
            raw[key] = _checked(client, key, "string", reply)
    found: dict[str, _Blob | None] = {}
    for key in keys:
        typed = _unwrap(raw.pop(key), key)
        if typed is None:
            found[key] = None
        elif typed[0] == "empty":  # stored as no key, as the savers do
            found[key] = _Blob(ABSENT, None)
        else:
            found[key] = _Blob(encode_blob(typed), _as_stored(serde, _loads(serde, typed, key)))
    return found


def _write_batch(
    saver: RedisSaver,
    tk: ThreadKeys,
    ns: str,
    batch: list[_Checkpoint],
    blobs: dict[str, _Blob | None],
    sent: set[str],
    report: MigrationReport,
) -> None:
    """Writes `batch` in one round trip: each checkpoint's put, then its pending writes, as
    one at a time would. A blob an earlier put wrote (`sent`) is only named. A put that
    found a blob it names expired (with a TTL) wrote nothing, and is sent again with it:
    its writes are sent again after it."""
    ops: list[Generator[Any, Any, Any]] = []
    puts: list[_Checkpoint | None] = []
    for checkpoint in batch:
        written = _tally(checkpoint, blobs, sent, report)
        writes = _put_writes(saver, tk, ns, checkpoint)
        ops += [_put(saver, tk, ns, checkpoint, written, blobs, sent, report), *writes]
        puts += [checkpoint, *[None] * len(writes)]
    for put_of, resent in zip(puts, _run_together(saver, ops), strict=True):
        if put_of is not None and resent:
            for op in _put_writes(saver, tk, ns, put_of):
                saver._drive(op)


def _tally(
    checkpoint: _Checkpoint,
    blobs: dict[str, _Blob | None],
    sent: set[str],
    report: MigrationReport,
) -> dict[str, bytes]:
    """The blobs the put of `checkpoint` writes (those of its values no earlier put wrote,
    `sent`, which they join), counted with its writes in `report`."""
    written: dict[str, bytes] = {}
    for suffix, key in zip(checkpoint.refs, checkpoint.blob_keys, strict=True):
        blob = blobs[key]
        if blob is not None and suffix not in sent:
            written[suffix] = blob.stored
            report.blobs += blob.compared is not None  # not an empty channel
    sent.update(written)
    report.writes += sum(len(items) for _, items in checkpoint.writes)
    return written


def _put(
    saver: RedisSaver,
    tk: ThreadKeys,
    ns: str,
    checkpoint: _Checkpoint,
    written: dict[str, bytes],
    blobs: dict[str, _Blob | None],
    sent: set[str],
    report: MigrationReport,
) -> Generator[Plan, list[Any], None]:
    """The put of `checkpoint` writing the blobs `written`, sent again with the blobs its
    reply names expired: the 0.1.0 value, absent where 0.1.0 let it expire."""
    by_suffix = dict(zip(checkpoint.refs, checkpoint.blob_keys, strict=True))
    while True:
        put = saver._put_eval(
            tk, ns, checkpoint.cid, checkpoint.payload, checkpoint.refs, written, checkpoint.run_key
        )
        (reply,) = yield [put]
        lost = _lost_blobs(reply)
        if not lost:
            break
        for suffix in lost:
            if suffix in written or suffix not in by_suffix:
                raise RuntimeError(f"PUT script named blob {suffix!r} it was not asked to refresh")
            blob = blobs[by_suffix[suffix]]
            written[suffix] = ABSENT if blob is None else blob.stored
        sent.update(written)
    report.checkpoints += 1


def _put_writes(
    saver: RedisSaver, tk: ThreadKeys, ns: str, checkpoint: _Checkpoint
) -> list[Generator[Any, Any, Any]]:
    """The saver's `put_writes` of each task's writes to `checkpoint`, not started."""
    config: RunnableConfig = {
        "configurable": {
            "thread_id": tk.thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint.cid,
        }
    }
    return [
        saver._put_writes_steps(config, writes, task_id, "")
        for task_id, writes in checkpoint.writes
    ]


def _run_together(saver: RedisSaver, ops: list[Generator[Any, Any, Any]]) -> list[bool]:
    """Runs the first plan of each of `ops` (operations of the saver's core) in one round
    trip, in order, then the rest of each on its own; True for each that had more."""
    firsts: list[Plan] = [next(op, []) for op in ops]
    plan = [command for first in firsts for command in first]
    replies = saver._run(plan) if plan else []
    more: list[bool] = []
    at = 0
    for op, first in zip(ops, firsts, strict=True):
        more.append(bool(first) and _finish(saver, op, replies[at : at + len(first)]))
        at += len(first)
    return more


def _finish(saver: RedisSaver, op: Generator[Any, Any, Any], reply: list[Any]) -> bool:
    """Runs the rest of `op`, given the `reply` to its first plan; True if it had more."""
    had_more = False
    try:
        step = op.send(reply)
        while True:
            had_more = True
            step = op.send(saver._run(step) if isinstance(step, list) else None)
    except StopIteration:
        return had_more


def _verify(
    saver: RedisSaver,
    tk: ThreadKeys,
    ns: str,
    batch: list[_Checkpoint],
    blobs: dict[str, _Blob | None],
) -> None:
    """Reads `batch` back in one round trip, through the script and decoding the saver's
    `list` reads checkpoints by id with, and compares each checkpoint with what 0.1.0
    stored, one at a time, before any old key goes."""
    if not batch:
        return
    serde = saver.serde
    pairs = [part for checkpoint in batch for part in (escape(ns), checkpoint.cid)]
    fetch = (tk.cp_prefix, tk.wr_prefix, tk.blob_prefix, *pairs)
    (reply,) = saver._run([Eval("entries", (tk.ns,), fetch)])
    found = iter(reply)  # in the order asked, without those missing
    shared: dict[str, tuple[str, bytes]] = {}  # blobs the reply sends once (see `_tuple`)
    entry = next(found, None)
    for checkpoint in batch:
        got = None
        if entry is not None and _s(entry[1][0]) == checkpoint.cid:
            got = saver._tuple(tk, ns, checkpoint.cid, entry[1], shared)
            entry = next(found, None)
        values = {
            channel: blob.compared
            for channel, key in zip(checkpoint.channels, checkpoint.blob_keys, strict=True)
            if (blob := blobs[key]) is not None and blob.compared is not None
        }
        # A value whose 0.1.0 key is gone (0.1.0's TTL) that the target holds was copied by
        # an earlier run that stopped before its read-back: kept (else every rerun stopped
        # here, and the target stayed refused).
        gone = {
            channel
            for channel, key in zip(checkpoint.channels, checkpoint.blob_keys, strict=True)
            if blobs[key] is None
        }
        if got is None:
            wrong = "it is missing"
        elif (
            _as_stored(
                serde, {c: v for c, v in got.checkpoint["channel_values"].items() if c not in gone}
            )
            != values
        ):
            wrong = "its channel values differ"
        elif _as_stored(serde, got.metadata) != checkpoint.metadata:
            wrong = "its metadata differs"
        elif _writes(serde, got.pending_writes or ()) != checkpoint.pending:
            wrong = "its pending writes differ"
        else:
            continue
        raise PlainRedisError(
            f"migrating thread {tk.thread_id!r} namespace {ns!r}: checkpoint {checkpoint.cid!r} "
            f"does not read back as 0.1.0 stored it ({wrong}). Its 0.1.0 keys are kept and the "
            "run stops here; it can be repeated. Is another program writing under this prefix?"
            + (
                f" Or did the migrated keys expire before the read-back (their TTL is "
                f"{saver.ttl:g} s, --ttl / ttl=)? A longer TTL keeps them."
                if saver.ttl
                else ""
            )
        )


def _writes(serde: SerializerProtocol, writes: Any) -> list[tuple[str, str, Any]]:
    """Pending writes as stored, in a stable order."""
    return sorted((str(t), str(ch), serde.dumps_typed(v)) for t, ch, v in writes)


def _as_stored(serde: SerializerProtocol, value: Any) -> Any:
    """`value` as the read-back compares it: serialized, so NaN, arrays and objects without
    `==` compare (a mapping key by key, whatever its order)."""
    if isinstance(value, dict):
        return {key: _as_stored(serde, item) for key, item in value.items()}
    return serde.dumps_typed(value)
