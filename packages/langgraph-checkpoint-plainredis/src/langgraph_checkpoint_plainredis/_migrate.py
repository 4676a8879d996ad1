"""One-shot, idempotent migration of a keyspace written by plainredis 0.1.0.

0.1.0 wrapped every value as JSON ``{"t": type, "d": base64}``, joined raw ids with
``:`` and used integer channel versions. The migration reads each (thread, namespace)
the 0.1.0 registry names, writes it in the current layout (blob bytes are copied as
they are; only the checkpoint header is re-encoded), checks it reads back, and then
deletes the old keys. Integer versions become the current zero-padded string form,
which keeps their order, so graphs resume where they stopped.

Stop every 0.1.0 writer first. A run that stops half-way is safe to repeat: the
registry is parked under ``{prefix}:v010:threads`` until every thread is done.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._codec import encode_blob, encode_checkpoint
from ._core import ABSENT, VERSION_DIGITS, _b, _s
from ._errors import CorruptDataError, PlainRedisError, WrongTypeError
from ._keys import LegacyKeys, blob_suffix, escape_run
from ._sync import RedisSaver

__all__ = ["MigrationReport", "migrate_v010"]

_MIGRATED_MINOR = "0" * 12


@dataclass
class MigrationReport:
    """What `migrate_v010` did."""

    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    old_keys_deleted: int = 0
    skipped: list[str] = field(default_factory=list)


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


def _read(client: redis.Redis, key: bytes | str, expected: str, read: Callable[[], Any]) -> Any:
    """`read()`, a read of the 0.1.0 `expected` at `key`, whose WRONGTYPE reply becomes a
    `WrongTypeError` naming the key, the type found there and the fix."""
    try:
        return read()
    except redis.ResponseError as exc:
        if not str(exc).startswith("WRONGTYPE"):
            raise
        found = _s(client.type(key))
        raise WrongTypeError(_s(key), found, expected, _FOREIGN_FIX) from None


def _version(value: Any) -> Any:
    """Integer versions of 0.1.0 become strings that sort the same way."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:0{VERSION_DIGITS}}.{_MIGRATED_MINOR}"
    return value


def migrate_v010(
    client: redis.Redis,
    prefix: str = "lg",
    *,
    ttl: float | None = None,
    serde: SerializerProtocol | None = None,
    keep_old: bool = False,
    progress: Callable[[str], None] | None = None,
) -> MigrationReport:
    """Moves a 0.1.0 keyspace into the current layout, losslessly and idempotently.

    Args:
        client: A blocking client (``decode_responses=False``).
        prefix: The prefix 0.1.0 used (its default was ``lg``).
        ttl: TTL for the migrated threads, as the saver's `ttl`.
        serde: The serializer 0.1.0 was configured with, if not the default.
        keep_old: Leave the 0.1.0 keys in place (they no longer clash with the new ones).
        progress: Called with a line of text per migrated (thread, namespace).

    Returns:
        Counts of what was migrated.
    """
    legacy = LegacyKeys(prefix)
    saver = RedisSaver(client=client, prefix=prefix, ttl=ttl, serde=serde)
    saver._migrating = True  # it writes while 0.1.0's registry is parked: see _ready_plan
    report = MigrationReport()
    if client.type(legacy.registry) == b"hash":
        # Park the old registry: the current layout keeps a zset under that name.
        if client.exists(legacy.stash):
            _read(client, legacy.stash, "hash", partial(client.hlen, legacy.stash))
            for fld, value in client.hgetall(legacy.registry).items():
                client.hset(legacy.stash, fld, value)
            client.delete(legacy.registry)
        else:
            client.rename(legacy.registry, legacy.stash)
    entries = _read(client, legacy.stash, "hash", partial(client.hgetall, legacy.stash))
    for idx_key, value in entries.items():
        try:
            where = json.loads(value)
            thread_id, ns = str(where["thread"]), str(where["ns"])
        except (ValueError, KeyError, TypeError):
            report.skipped.append(_b(idx_key).decode(errors="replace"))
            continue
        old_keys = _migrate_timeline(saver, client, legacy, _b(idx_key), thread_id, ns, report)
        if progress:
            progress(f"migrated thread {thread_id!r} namespace {ns!r}")
        if not keep_old:
            report.old_keys_deleted += client.delete(*old_keys) if old_keys else 0
        client.hdel(legacy.stash, idx_key)
        report.threads += 1
    if not report.skipped:
        report.old_keys_deleted += client.delete(legacy.stash, legacy.seq) if not keep_old else 0
    return report


def _migrate_timeline(
    saver: RedisSaver,
    client: redis.Redis,
    legacy: LegacyKeys,
    idx_key: bytes,
    thread_id: str,
    ns: str,
    report: MigrationReport,
) -> list[bytes | str]:
    """Copies one (thread, namespace); returns the 0.1.0 keys it read."""
    serde = saver.serde
    tk = saver.keyspace.thread(thread_id)
    old_keys: list[bytes | str] = [idx_key]
    expected: dict[str, tuple[dict[str, Any], dict[str, Any], list[tuple[str, str, Any]]]] = {}
    for raw_id in _read(client, idx_key, "zset", partial(client.zrange, idx_key, 0, -1)):
        cid = _s(raw_id)
        cp_key = legacy.cp(thread_id, ns, cid)
        typed = _unwrap(_read(client, cp_key, "string", partial(client.get, cp_key)), cp_key)
        if typed is None:
            continue  # expired under 0.1.0's TTL: nothing to carry over
        doc = _loads(serde, typed, cp_key)
        checkpoint, metadata, parent_id = doc["checkpoint"], doc["metadata"], doc["parent_id"]
        old_versions = dict(checkpoint["channel_versions"])
        checkpoint["channel_versions"] = {ch: _version(v) for ch, v in old_versions.items()}
        checkpoint["versions_seen"] = {
            node: {ch: _version(v) for ch, v in seen.items()}
            for node, seen in checkpoint.get("versions_seen", {}).items()
        }
        checkpoint.pop("channel_values", None)
        written: dict[str, bytes] = {}
        values: dict[str, Any] = {}
        for channel, version in old_versions.items():
            blob_key = legacy.blob(thread_id, ns, channel, version)
            blob = _unwrap(
                _read(client, blob_key, "string", partial(client.get, blob_key)), blob_key
            )
            old_keys.append(blob_key)
            if blob is not None:
                absent = blob[0] == "empty"  # stored as no key, as the savers do
                written[blob_suffix(channel, _version(version))] = (
                    ABSENT if absent else encode_blob(blob)
                )
                if not absent:
                    values[channel] = _loads(serde, blob, blob_key)
        refs = [blob_suffix(ch, v) for ch, v in checkpoint["channel_versions"].items()]
        run_id = metadata.get("run_id")
        payload = encode_checkpoint(
            parent_id,
            escape_run(str(run_id)) if run_id is not None else "",
            refs,
            serde.dumps_typed(checkpoint),
            serde.dumps_typed(metadata),
        )
        run_key = saver.keyspace.run(str(run_id)) if run_id is not None else None
        versions = checkpoint["channel_versions"]
        while True:  # with a TTL, a blob 0.1.0 let expire is named lost: absent here
            (reply,) = saver._run([saver._put_eval(tk, ns, cid, payload, refs, written, run_key)])
            if not saver._resend_lost(reply, refs, versions, values, written):
                break
        report.checkpoints += 1
        report.blobs += len(written)

        wr_key = legacy.wr(thread_id, ns, cid)
        old_keys.extend([cp_key, wr_key])
        by_task: dict[str, list[tuple[int, str, Any]]] = {}
        for fld, raw in _read(client, wr_key, "hash", partial(client.hgetall, wr_key)).items():
            unwrapped = _unwrap(raw, wr_key)
            if unwrapped is None:
                continue
            task_id, channel, value = _loads(serde, unwrapped, wr_key)
            index = LegacyKeys.write_index(_s(fld))
            by_task.setdefault(task_id, []).append((index, channel, value))
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
        }
        pending: list[tuple[str, str, Any]] = []
        for task_id, writes in by_task.items():
            writes.sort(key=lambda w: (w[0] < 0, w[0]))
            saver.put_writes(config, [(ch, v) for _, ch, v in writes], task_id)
            report.writes += len(writes)
            pending += [(task_id, ch, v) for _, ch, v in writes]
        expected[cid] = (values, metadata, pending)
    _read_back(saver, thread_id, ns, expected)
    return old_keys


def _writes(serde: SerializerProtocol, writes: Any) -> list[tuple[str, str, Any]]:
    """Pending writes as stored, in a stable order."""
    return sorted((str(t), str(ch), serde.dumps_typed(v)) for t, ch, v in writes)


def _same(serde: SerializerProtocol, a: Any, b: Any) -> bool:
    """Equal as stored: compared serialized, so NaN, arrays and objects without `==` work
    (a mapping key by key, whatever its order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(serde, a[k], b[k]) for k in a)
    return bool(serde.dumps_typed(a) == serde.dumps_typed(b))


def _read_back(
    saver: RedisSaver,
    thread_id: str,
    ns: str,
    expected: dict[str, tuple[dict[str, Any], dict[str, Any], list[tuple[str, str, Any]]]],
) -> None:
    """Reads every migrated checkpoint back through the saver before any old key goes."""
    serde = saver.serde
    for cid, (values, metadata, pending) in expected.items():
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
        }
        got = saver.get_tuple(config)
        if got is None:
            wrong = "it is missing"
        elif not _same(serde, got.checkpoint["channel_values"], values):
            wrong = "its channel values differ"
        elif not _same(serde, got.metadata, metadata):
            wrong = "its metadata differs"
        elif _writes(serde, got.pending_writes or ()) != _writes(serde, pending):
            wrong = "its pending writes differ"
        else:
            continue
        raise PlainRedisError(
            f"migrating thread {thread_id!r} namespace {ns!r}: checkpoint {cid!r} does not read "
            f"back as 0.1.0 stored it ({wrong}). Its 0.1.0 keys are kept and the run stops here; "
            "it can be repeated. Is another program writing under this prefix?"
        )
