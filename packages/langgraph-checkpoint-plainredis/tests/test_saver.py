"""Semantics of both savers against real servers: one test per guarantee."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import ormsgpack
import pytest
import redis
import redis.asyncio as aioredis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from redis.cluster import RedisCluster
from wrappers import Forwarding, Transparent

from agentstate_testkit.savers import SyncAsAsync
from langgraph_checkpoint_plainredis import (
    AsyncRedisSaver,
    CorruptDataError,
    LegacyKeyspaceError,
    PlainRedisError,
    RedisSaver,
    WrongTypeError,
    _core,
    _migrate,
)
from langgraph_checkpoint_plainredis._core import Shared
from langgraph_checkpoint_plainredis._keys import KeySpace, unescape


def cfg(thread: str, ns: str = "", cid: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def checkpoint(values: dict[str, Any], versions: dict[str, Any], cid: str | None = None) -> Any:
    cp = empty_checkpoint()
    if cid is not None:
        cp["id"] = cid
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    return cp


async def put(
    saver: Any,
    thread: str,
    values: dict[str, Any],
    versions: dict[str, Any],
    *,
    ns: str = "",
    parent: str | None = None,
    new: dict[str, Any] | None = None,
    cid: str | None = None,
    **meta: Any,
) -> dict[str, Any]:
    cp = checkpoint(values, versions, cid)
    metadata = {"source": "loop", "step": 0, "parents": {}, **meta}
    result: dict[str, Any] = await saver.aput(
        cfg(thread, ns, parent), cp, metadata, versions if new is None else new
    )
    return result


async def ids(saver: Any, config: Any, **kwargs: Any) -> list[str]:
    return [t.checkpoint["id"] async for t in saver.alist(config, **kwargs)]


def reachable_keys(client: Any, prefix: str) -> set[bytes]:
    """Every key the thread index leads to; anything else under the prefix is an orphan.

    The index is the registry on a standalone server; a cluster keeps no registry, so
    there the threads are the namespace zsets SCAN finds.
    """
    ks = KeySpace(prefix)
    if isinstance(client, RedisCluster):
        threads = [ks.thread_from_ns_key(k.decode()) for k in client.scan_iter(match=ks.ns_pattern)]
    else:
        threads = [ks.thread_from_component(c.decode()) for c in client.zrange(ks.threads, 0, -1)]
    found: set[bytes] = {ks.threads.encode()}
    for tk in threads:
        found.add(tk.ns.encode())
        for ns_e in client.zrange(tk.ns, 0, -1):
            ns_e = ns_e.decode()
            for key in (tk.idx_prefix + ns_e, tk.keys_prefix + ns_e):
                found.add(key.encode())
            for member in client.zrange(tk.keys_prefix + ns_e, 0, -1):
                key = tk.indexed_key(unescape(ns_e), member.decode())
                assert key or member.startswith(b"r"), f"unknown index member {member!r}"
                if key:
                    found.add(key.encode())
    return {k for k in found if client.exists(k)}


def orphans(client: Any, prefix: str) -> set[bytes]:
    """Keys under `prefix` that no index leads to. A key that expires while this looks (it
    had a TTL, so it was never an orphan) is seen by the SCAN but not when the index is
    followed: it is left out if it is gone by the end."""
    keys = {k for k in client.scan_iter(match=f"{prefix}:*", count=1000)}
    run_sets = {k for k in keys if k.startswith(f"{prefix}:run:".encode())}
    return {k for k in keys - run_sets - reachable_keys(client, prefix) if client.exists(k)}


# -- list ------------------------------------------------------------------------------


async def test_list_is_newest_first_with_exclusive_before_filter_and_limit(saver: Any) -> None:
    t = "t-" + uuid.uuid4().hex
    parent = None
    stored = []
    for step in range(6):
        c = await put(
            saver,
            t,
            {"x": step},
            {"x": saver.get_next_version(None, None)},
            parent=parent,
            step=step,
            kind="even" if step % 2 == 0 else "odd",
        )
        parent = c["configurable"]["checkpoint_id"]
        stored.append(parent)
    newest_first = stored[::-1]
    assert await ids(saver, cfg(t)) == newest_first
    assert await ids(saver, cfg(t), limit=2) == newest_first[:2]
    assert await ids(saver, cfg(t), before=cfg(t, cid=stored[3])) == stored[:3][::-1]
    assert await ids(saver, cfg(t), before=cfg(t, cid=stored[3]), limit=1) == [stored[2]]
    assert await ids(saver, cfg(t), filter={"kind": "even"}) == newest_first[1::2]
    assert await ids(saver, cfg(t), filter={"kind": "even", "step": 2}) == [stored[2]]
    assert await ids(saver, cfg(t), filter={"kind": "even"}, limit=2) == newest_first[1::2][:2]
    assert await ids(saver, cfg(t, cid=stored[1])) == [stored[1]]
    assert await ids(saver, cfg(t), limit=0) == []
    assert await ids(saver, cfg(t), before=cfg(t, cid="")) == newest_first  # no bound


async def test_empty_and_numeric_run_ids_are_runs_delete_for_runs_finds(saver: Any) -> None:
    t = "runs-" + uuid.uuid4().hex
    kept = await put(saver, t, {}, {}, run_id="kept")
    await put(saver, t, {}, {}, run_id="")
    await put(saver, t, {}, {}, run_id=0)
    await saver.adelete_for_runs(["", 0])
    assert await ids(saver, cfg(t)) == [kept["configurable"]["checkpoint_id"]]


async def test_list_pages_through_long_timelines(saver: Any) -> None:
    t = "long-" + uuid.uuid4().hex
    stored = [
        (await put(saver, t, {}, {}, cid=f"{i:05d}"))["configurable"]["checkpoint_id"]
        for i in range(300)
    ]
    assert await ids(saver, cfg(t)) == stored[::-1]
    assert await ids(saver, cfg(t), filter={"step": 0}) == stored[::-1]
    assert await ids(saver, cfg(t), filter={"step": 1}) == []
    # an empty checkpoint_id names no checkpoint (as in InMemorySaver and get_tuple)
    assert await ids(saver, cfg(t, cid="")) == stored[::-1]
    assert await ids(saver, cfg(t, cid=""), filter={"step": 0}, limit=200) == stored[:99:-1]


async def test_list_none_walks_every_thread_and_namespace(saver: Any) -> None:
    made = set()
    for thread in ("a", "a:b", "用户:7"):
        for ns in ("", "sub:1"):
            c = await put(saver, thread, {}, {}, ns=ns)
            made.add((thread, ns, c["configurable"]["checkpoint_id"]))
    listed = {
        (
            t.config["configurable"]["thread_id"],
            t.config["configurable"]["checkpoint_ns"],
            t.checkpoint["id"],
        )
        async for t in saver.alist(None)
    }
    assert listed == made
    assert len([t async for t in saver.alist(None, limit=4)]) == 4
    # A thread config without checkpoint_ns walks the thread's namespaces only.
    assert {
        t.config["configurable"]["checkpoint_ns"]
        async for t in saver.alist({"configurable": {"thread_id": "a"}})
    } == {"", "sub:1"}


@pytest.mark.parametrize("ttl", [None, 3600])
@pytest.mark.parametrize("style", ["async", "sync"])
async def test_a_thread_listed_across_namespaces_starts_with_the_root(
    redis_url: str, prefix: str, ttl: int | None, style: str
) -> None:
    """list(thread) without checkpoint_ns walks the root namespace first, as InMemorySaver
    does for a graph (it walks namespaces in the order they were first written), so limit=1
    is the root's newest checkpoint. With a TTL the namespace set is ordered by expiry, and
    a subgraph's namespace written before the root's last put came first."""
    if style == "async":
        ours: Any = AsyncRedisSaver(redis_url, prefix=prefix, ttl=ttl)
    else:
        ours = SyncAsAsync(RedisSaver(redis_url, prefix=prefix, ttl=ttl))
    got = {}
    for name, s in (("memory", InMemorySaver()), ("ours", ours)):
        root = await s.aput(cfg("t"), checkpoint({}, {}, cid="1"), {}, {})
        await asyncio.sleep(0.05)  # expiry scores in ms: the child's comes later
        await s.aput(cfg("t", ns="child:1"), checkpoint({}, {}, cid="2"), {}, {})
        await asyncio.sleep(0.05)  # and the root's last one later still
        await s.aput(root, checkpoint({}, {}, cid="3"), {}, {})
        thread = {"configurable": {"thread_id": "t"}}
        got[name] = []
        for limit in (1, None):
            listed = s.alist(thread, limit=limit)
            got[name].append(
                [
                    (t.config["configurable"]["checkpoint_ns"], t.checkpoint["id"])
                    async for t in listed
                ]
            )
    assert got["ours"] == got["memory"] == [[("", "3")], [("", "3"), ("", "1"), ("child:1", "2")]]
    if style == "async":
        await ours.aclose()
    else:
        ours.inner.close()


@pytest.mark.parametrize("ttl", [None, 3600])
def test_list_none_lists_each_thread_once_while_others_write(
    redis_url: str, prefix: str, ttl: int | None
) -> None:
    # Past one page of the registry; a put moves its thread there (its score is its expiry),
    # a delete shifts the threads after it.
    names = [f"t{i:04}" for i in range(1200)]
    with RedisSaver(redis_url, prefix=prefix, ttl=ttl) as saver:
        first = {t: saver.put(cfg(t), checkpoint({}, {}), {}, {}) for t in names}
        listing = saver.list(None)
        seen = [next(listing)]
        done = seen[0].config["configurable"]["thread_id"]
        for t in names[::7]:
            saver.put(first[t], checkpoint({}, {}), {}, {})
        saver.delete_thread(done)
        seen += list(listing)
    ids = [(t.config["configurable"]["thread_id"], t.checkpoint["id"]) for t in seen]
    assert len(ids) == len(set(ids)), "a checkpoint was listed twice"
    assert {thread for thread, _ in ids} == set(names)
    runs = [thread for i, (thread, _) in enumerate(ids) if i == 0 or ids[i - 1][0] != thread]
    assert len(runs) == len(set(runs)), "a thread was listed in two places"


@pytest.mark.standalone
def test_a_lost_registry_entry_comes_back_with_the_next_put_or_write(
    redis_url: str, client: redis.Redis, prefix: str
) -> None:
    """A thread written before is not settled again by each call, but a registry emptied by
    hand, or missing after data moved from a cluster (which keeps none), gets the thread back
    from its next put, as the cluster guide says, or its next write."""
    ks = KeySpace(prefix)
    with RedisSaver(redis_url, prefix=prefix) as saver:
        c = saver.put(cfg("t"), checkpoint({"m": 1}, {"m": "1"}), {}, {"m": "1"})
        for again in (
            lambda: saver.put(c, checkpoint({"m": 2}, {"m": "2"}), {}, {"m": "2"}),
            lambda: saver.put_writes(c, [("m", 3)], "task"),
        ):
            client.delete(ks.threads)
            assert list(saver.list(None)) == []
            again()
            assert client.zrange(ks.threads, 0, -1, withscores=True) == [(b"t", float("inf"))]
            assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"t"}


# -- writes ----------------------------------------------------------------------------


async def test_put_writes_first_write_wins_special_channels_overwrite(saver: Any) -> None:
    c = await put(saver, "w", {}, {})
    await saver.aput_writes(c, [("ch", 1), ("__interrupt__", "i1")], "task")
    await saver.aput_writes(c, [("ch", 2), ("__interrupt__", "i2")], "task")
    tup = await saver.aget_tuple(c)
    assert sorted(tup.pending_writes, key=repr) == [
        ("task", "__interrupt__", "i2"),
        ("task", "ch", 1),
    ]


async def test_pending_writes_come_back_in_task_path_task_id_index_order(saver: Any) -> None:
    c = await put(saver, "order", {}, {})
    await saver.aput_writes(c, [("a", 1), ("b", 2)], "t-z", task_path="~1")
    await saver.aput_writes(c, [("c", 3)], "t-a", task_path="~2")
    await saver.aput_writes(c, [("d", 4)], "t-m", task_path="~1")
    await saver.aput_writes(c, [("e", 5)], "t-b", task_path="")
    tup = await saver.aget_tuple(c)
    assert tup.pending_writes == [
        ("t-b", "e", 5),
        ("t-m", "d", 4),
        ("t-z", "a", 1),
        ("t-z", "b", 2),
        ("t-a", "c", 3),
    ]


def test_racing_put_writes_keep_the_first_value(sync_saver: RedisSaver) -> None:
    c = sync_saver.put(cfg("race"), checkpoint({}, {}), {}, {})
    for round_ in range(20):
        barrier = threading.Barrier(4)

        def write(value: int, task: str = f"task-{round_}", barrier: Any = barrier) -> None:
            barrier.wait()
            sync_saver.put_writes(c, [("ch", value)], task)

        workers = [threading.Thread(target=write, args=(v,)) for v in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        tup = sync_saver.get_tuple(c)
        mine = [w for w in tup.pending_writes if w[0] == f"task-{round_}"]
        assert len(mine) == 1 and mine[0][2] in range(4)
        sync_saver.put_writes(c, [("ch", 99)], f"task-{round_}")
        assert sync_saver.get_tuple(c).pending_writes == tup.pending_writes


@pytest.mark.parametrize("ttl", [None, 60])
def test_a_checkpoint_of_9000_channels_works_for_every_call(
    redis_url: str, prefix: str, client: Any, ttl: int | None
) -> None:
    """Lua unpacks at most 8,000 values at once: a checkpoint naming 9,000 channel versions
    could be put but not read back (every read failed with "too many results to unpack")."""
    n = 9000
    versions = {f"ch{i}": 1 for i in range(n)}
    values = {f"ch{i}": i for i in range(n)}
    with RedisSaver(redis_url, prefix=prefix, ttl=ttl, refresh_on_read=True) as saver:
        c1 = saver.put(cfg("t"), checkpoint(values, versions), {"run_id": "r"}, versions)
        saver.put_writes(c1, [("ch1", "w")], "task")
        later = {**versions, "ch0": 2}
        c2 = saver.put(c1, checkpoint({**values, "ch0": -1}, later), {"run_id": "r2"}, {"ch0": 2})
        for config in (cfg("t"), c1, c2):
            got = saver.get_tuple(config)
            assert got is not None and len(got.checkpoint["channel_values"]) == n
        listed = list(saver.list(cfg("t")))
        assert [len(t.checkpoint["channel_values"]) for t in listed] == [n, n]
        assert listed[0].checkpoint["channel_values"]["ch0"] == -1
        assert listed[1].pending_writes == [("task", "ch1", "w")]
        saver.copy_thread("t", "copy")
        got = saver.get_tuple(cfg("copy"))
        assert got is not None and len(got.checkpoint["channel_values"]) == n
        saver.delete_for_runs(["r2"])
        got = saver.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["id"] == c1["configurable"]["checkpoint_id"]
        saver.prune(["copy"], strategy="keep_latest")
        saver.delete_thread("t")
        saver.delete_thread("copy")
        assert saver.get_tuple(cfg("t")) is None and saver.get_tuple(cfg("copy")) is None
    assert keys_under(client, prefix) <= {KeySpace(prefix).threads.encode()}


async def test_channel_in_new_versions_but_not_in_values_reads_back_absent(saver: Any) -> None:
    c = await put(saver, "absent", {"x": 1}, {"x": "1", "gone": "1"})
    tup = await saver.aget_tuple(c)
    assert tup.checkpoint["channel_values"] == {"x": 1}
    c2 = await put(
        saver, "absent", {"x": None}, {"x": "2"}, parent=c["configurable"]["checkpoint_id"]
    )
    assert (await saver.aget_tuple(c2)).checkpoint["channel_values"] == {"x": None}


async def test_an_absent_channel_stores_no_blob(saver: Any, client: Any, prefix: str) -> None:
    """A channel absent at a new version gets no key, only its entry in the key index;
    putting a version absent again removes a value stored there (as InMemorySaver
    overwrites it with "empty")."""
    tk = KeySpace(prefix).thread("absent")
    c = await put(saver, "absent", {"x": 1}, {"x": "1", "gone": "1"}, cid="000001")
    assert client.exists(tk.blob("", "x", "1")) == 1
    assert client.exists(tk.blob("", "gone", "1")) == 0
    await put(saver, "absent", {}, {"x": "1", "gone": "1"}, cid="000001")
    assert (await saver.aget_tuple(c)).checkpoint["channel_values"] == {}
    assert client.exists(tk.blob("", "x", "1")) == 0
    index = client.zrange(tk.keys(""), 0, -1)
    assert {m for m in index if m.startswith(b"b")} == {b"bx:1", b"bgone:1"}


async def test_copy_thread_carries_an_absent_version_over_a_value(saver: Any) -> None:
    """Copying a thread where a channel is absent at a version onto a thread holding a
    value at that same version leaves it absent there: the copy of an "empty" blob
    replaces the value in InMemorySaver's dicts (test_parity's reference copies them)."""
    await put(saver, "target", {"x": 1}, {"x": "1"}, cid="000001")
    await put(saver, "source", {}, {"x": "1"}, cid="000001")
    await saver.acopy_thread("source", "target")
    got = await saver.aget_tuple(cfg("target", cid="000001"))
    assert got.checkpoint["channel_values"] == {}


# -- keys ------------------------------------------------------------------------------

WEIRD = [
    "a",
    "a:b",
    "a:b:c",
    "*",
    "?",
    "[x]",
    "{t}",
    "}{",
    "\\",
    " sp ace ",
    "用户-7:会话-1",
    "",
    "x" * 10_000,
]


async def test_thread_and_namespace_pairs_never_collide(saver: Any) -> None:
    await put(saver, "a", {"v": "thread a, ns b:c"}, {"v": 1}, ns="b:c")
    await put(saver, "a:b", {"v": "thread a:b, ns c"}, {"v": 1}, ns="c")
    assert (await saver.aget_tuple(cfg("a", "b:c"))).checkpoint["channel_values"][
        "v"
    ] == "thread a, ns b:c"
    assert (await saver.aget_tuple(cfg("a:b", "c"))).checkpoint["channel_values"][
        "v"
    ] == "thread a:b, ns c"
    await saver.adelete_thread("a")
    assert await saver.aget_tuple(cfg("a", "b:c")) is None
    assert await saver.aget_tuple(cfg("a:b", "c")) is not None


@pytest.mark.parametrize("weird", WEIRD, ids=lambda w: repr(w[:12]))
async def test_any_string_works_as_thread_namespace_checkpoint_and_channel(
    saver: Any, weird: str
) -> None:
    c = await put(saver, weird, {weird: weird}, {weird: 1}, ns=weird, cid=weird or "0")
    tup = await saver.aget_tuple(c)
    assert tup.checkpoint["channel_values"] == {weird: weird}
    await saver.aput_writes(c, [(weird, weird)], weird)
    assert (await saver.aget_tuple(c)).pending_writes == [(weird, weird, weird)]
    assert await ids(saver, cfg(weird, weird)) == [weird or "0"]
    listed = {t.config["configurable"]["thread_id"] async for t in saver.alist(None)}
    assert weird in listed
    await saver.adelete_thread(weird)
    assert await saver.aget_tuple(c) is None


def test_delete_leaves_prefix_sharing_threads_and_no_orphans(
    sync_saver: RedisSaver, client: redis.Redis, prefix: str
) -> None:
    for thread in ("a", "a:b", "a*"):
        for ns in ("", "x"):
            c = sync_saver.put(
                cfg(thread, ns), checkpoint({"m": thread}, {"m": 1}), {"run_id": "r"}, {"m": 1}
            )
            sync_saver.put_writes(c, [("m", 1)], "t")
    sync_saver.delete_thread("a")
    assert sync_saver.get_tuple(cfg("a")) is None
    assert sync_saver.get_tuple(cfg("a:b", "x")).checkpoint["channel_values"] == {"m": "a:b"}
    assert sync_saver.get_tuple(cfg("a*")).checkpoint["channel_values"] == {"m": "a*"}
    assert orphans(client, prefix) == set()
    sync_saver.delete_thread("a:b")
    sync_saver.delete_thread("a*")
    assert set(client.scan_iter(match=f"{prefix}:*")) == set()


# -- forks -----------------------------------------------------------------------------


async def test_fork_never_changes_what_existing_checkpoints_read(saver: Any) -> None:
    v1 = saver.get_next_version(None, None)
    a = await put(saver, "fork", {"m": ["one"]}, {"m": v1})
    a_id = a["configurable"]["checkpoint_id"]
    v2 = saver.get_next_version(v1, None)
    b = await put(saver, "fork", {"m": ["one", "two"]}, {"m": v2}, parent=a_id)
    v2_fork = saver.get_next_version(v1, None)
    assert v2_fork != v2
    await put(saver, "fork", {"m": ["one", "bis"]}, {"m": v2_fork}, parent=a_id)
    assert (await saver.aget_tuple(b)).checkpoint["channel_values"] == {"m": ["one", "two"]}


# -- TTL -------------------------------------------------------------------------------


def test_ttl_refreshes_every_blob_the_newest_checkpoint_reads(redis_url: str, prefix: str) -> None:
    # Puts 1.1 s apart with a 3 s TTL: a stall of up to ~1.9 s between two is harmless.
    with RedisSaver(redis_url, prefix=prefix, ttl=3) as saver:
        c = saver.put(
            cfg("ttl"),
            checkpoint({"stable": "s", "m": 1}, {"stable": 1, "m": 1}),
            {},
            {"stable": 1, "m": 1},
        )
        for step in range(2, 5):
            time.sleep(1.1)
            c = saver.put(
                c, checkpoint({"stable": "s", "m": step}, {"stable": 1, "m": step}), {}, {"m": step}
            )
        # "stable" was written 3.3 s ago with a 3 s ttl: only refreshes keep it.
        assert saver.get_tuple(cfg("ttl")).checkpoint["channel_values"] == {"stable": "s", "m": 4}


@pytest.mark.parametrize("fork_ttl", [1, None])
def test_a_fork_from_a_checkpoint_whose_values_expired_gets_them_back(
    redis_url: str, prefix: str, fork_ttl: int | None
) -> None:
    """Time travel to an older checkpoint of a thread with a TTL, after a value only it reads
    expired (the newest checkpoint does not read it, so no put refreshed it): the fork's put
    sends that value again, from a writer with a TTL or without one. Before, the fork read the
    channel as missing."""
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=1) as timed,
        RedisSaver(redis_url, prefix=prefix, ttl=fork_ttl) as forker,
    ):
        first = timed.put(
            cfg("f"), checkpoint({"a": "A1", "b": "B1"}, {"a": 1, "b": 1}), {}, {"a": 1, "b": 1}
        )
        time.sleep(0.9)
        timed.put(first, checkpoint({"a": "A2", "b": "B1"}, {"a": 2, "b": 1}), {}, {"a": 2})
        time.sleep(0.2)  # A1 has expired, the rest lives 0.8 s more (a stall may take that)
        fork = forker.put(first, checkpoint({"a": "A1", "b": "B3"}, {"a": 1, "b": 3}), {}, {"b": 3})
        got = forker.get_tuple(fork)
        assert got is not None and got.checkpoint["channel_values"] == {"a": "A1", "b": "B3"}


def test_ttl_put_writes_keeps_the_thread_alive_as_a_put_does(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    # The human-in-the-loop pattern: a checkpoint, then its writes (a resume) much later.
    # The writes come 2.2 s into the puts' 4 s TTL and the reads 2.2 s into the writes':
    # each step has ~1.8 s to spare, and the reads still come after the puts' TTL ended.
    with RedisSaver(redis_url, prefix=prefix, ttl=4) as saver:
        first = saver.put(
            cfg("h"), checkpoint({"m": "hi", "k": 1}, {"m": 1, "k": 1}), {}, {"m": 1, "k": 1}
        )
        newest = saver.put(
            first, checkpoint({"m": "hi!", "k": 1}, {"m": 2, "k": 1}), {"run_id": "r"}, {"m": 2}
        )
        time.sleep(2.2)
        saver.put_writes(newest, [("__resume__", "yes")], "task")
        saver.put_writes(first, [("m", "late")], "old-task")  # an older one keeps the newest
        time.sleep(2.2)
        # 4.4 s after the puts, 2.2 s after the writes: everything either checkpoint reads
        got = saver.get_tuple(cfg("h"))
        assert got is not None
        assert got.checkpoint["channel_values"] == {"m": "hi!", "k": 1}
        assert got.pending_writes == [("task", "__resume__", "yes")]
        old = saver.get_tuple(first)
        assert old is not None and old.checkpoint["channel_values"] == {"m": "hi", "k": 1}
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["h", "h"]
        if not isinstance(client, RedisCluster):  # its run set too (a cluster's is elsewhere)
            assert client.exists(KeySpace(prefix).run("r"))
        # a put now sweeps nothing the writes refreshed
        saver.put(newest, checkpoint({"m": "bye", "k": 1}, {"m": 3, "k": 1}), {}, {"m": 3})
        assert len(list(saver.list(cfg("h")))) == 3
        time.sleep(4.3)
        assert saver.get_tuple(cfg("h")) is None
        assert list(saver.list(None)) == []
    assert orphans(client, prefix) == set()


def test_expired_threads_leave_listings_and_indexes(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    ks = KeySpace(prefix)
    with RedisSaver(redis_url, prefix=prefix, ttl=1) as saver:
        parent = None
        for step in range(5):
            parent = saver.put(
                cfg("old", cid=parent) if parent else cfg("old"),
                checkpoint({"m": step}, {"m": step + 1}),
                {},
                {"m": step + 1},
            )["configurable"]["checkpoint_id"]
        time.sleep(1.3)
        assert list(saver.list(None)) == []
        assert saver.get_tuple(cfg("old")) is None
        c = saver.put(cfg("new"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
        for step in range(5):
            c = saver.put(c, checkpoint({"m": step}, {"m": step + 2}), {}, {"m": step + 2})
        time.sleep(1.3)
        saver.put(c, checkpoint({"m": 9}, {"m": 9}), {}, {"m": 9})
        tk = ks.thread("new")
        # Read in one pipeline right after the put, before its own 1 s TTL can end.
        pipe = client.pipeline(transaction=False)
        pipe.zcard(tk.idx(""))
        pipe.zcard(tk.keys(""))
        if not isinstance(client, RedisCluster):
            pipe.zrange(ks.threads, 0, -1)
        idx, keys, *threads = pipe.execute()
        # Neither the registry (standalone) nor the timeline keeps ids of expired checkpoints.
        assert threads == ([] if isinstance(client, RedisCluster) else [[b"new"]])
        assert idx == 1
        # the checkpoint, its run marker and its one blob
        assert keys == 3
        assert orphans(client, prefix) == set()


def test_writers_without_a_ttl_sweep_registry_entries_of_threads_that_expired(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """Threads written with a TTL expire; once every writer has dropped its TTL, the first
    write of each new thread (or namespace) still sweeps their registry entries, so they do
    not stay."""
    if isinstance(client, RedisCluster):
        pytest.skip("a cluster keeps no registry")
    ks = KeySpace(prefix)
    # Each new thread's put sweeps expired entries: the 70 puts must end before the first
    # expires (2.5 s, well past what 70 puts take on a busy machine).
    with RedisSaver(redis_url, prefix=prefix, ttl=2.5) as timed:
        for n in range(70):  # more than one sweep takes (64)
            timed.put(cfg(f"gone-{n}"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
    time.sleep(2.8)
    assert client.zcard(ks.threads) == 70  # expired, filtered out of listings, still there
    with RedisSaver(redis_url, prefix=prefix) as saver:
        first = saver.put(cfg("kept"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
        assert client.zcard(ks.threads) == 70 - 64 + 1
        saver.put(first, checkpoint({"m": 1}, {"m": 2}), {}, {"m": 2})  # settled: no sweep
        assert client.zcard(ks.threads) == 70 - 64 + 1
        saver.put_writes(cfg("also", cid="c"), [("m", 1)], "task")  # a new timeline: sweeps
        assert client.zrange(ks.threads, 0, -1) == [b"also", b"kept"]
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"kept"}
    assert orphans(client, prefix) == set()


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_list_of_every_thread_takes_expired_threads_out_of_the_registry(
    redis_url: str, prefix: str, client: redis.Redis, style: str
) -> None:
    """Only puts swept the registry (64 entries each): once writes stopped, the entries of
    threads that expired stayed for good, and every `list(None)` walked past them. The walk
    takes them out; a thread without a TTL, and one still live, stay."""
    if isinstance(client, RedisCluster):
        pytest.skip("a cluster keeps no registry")
    ks = KeySpace(prefix)
    with RedisSaver(redis_url, prefix=prefix, ttl=1.5) as timed:
        for n in range(80):
            timed.put(cfg(f"gone-{n}"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
    with RedisSaver(redis_url, prefix=prefix) as saver:
        saver.put(cfg("kept"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
    time.sleep(1.8)
    with RedisSaver(redis_url, prefix=prefix, ttl=600) as timed:
        timed.put(cfg("live"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
    assert client.zcard(ks.threads) >= 80 - 64 + 2  # the puts swept 64 at most
    if style == "sync":
        with RedisSaver(redis_url, prefix=prefix) as saver:
            listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    else:
        async with AsyncRedisSaver(redis_url, prefix=prefix) as asaver:
            listed = {t.config["configurable"]["thread_id"] async for t in asaver.alist(None)}
    assert listed == {"kept", "live"}
    assert sorted(client.zrange(ks.threads, 0, -1)) == [b"kept", b"live"]
    assert orphans(client, prefix) == set()


@pytest.mark.parametrize("skew_s", [-7200, 7200])
def test_writers_whose_clocks_disagree_never_expire_each_others_live_checkpoints(
    redis_url: str, prefix: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch, skew_s: int
) -> None:
    """Expiry scores are the server's time: a writer whose clock runs two hours ahead (or
    behind) of another's, with a one-hour TTL, neither sweeps away the other's checkpoints,
    which live for the hour the server gives them, nor hides their thread from listings."""
    with RedisSaver(redis_url, prefix=prefix, ttl=3600) as saver:
        first = saver.put(cfg("t"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
        saver.put(cfg("other"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
        real = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real() + skew_s * 1_000_000_000)
        monkeypatch.setattr(time, "time", lambda: real() / 1e9 + skew_s)
        saver.put(first, checkpoint({"m": 1}, {"m": 2}), {}, {"m": 2})  # sweeps the thread
        saver.put_writes(first, [("m", 5)], "task")
        assert saver.get_tuple(first) is not None
        assert len(list(saver.list(cfg("t")))) == 2
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"t", "other"}
        monkeypatch.undo()
        assert saver.get_tuple(first) is not None
        assert orphans(client, prefix) == set()


@pytest.mark.standalone
@pytest.mark.parametrize("ttl", [None, 3600])
def test_a_server_that_replicates_scripts_verbatim_takes_every_write(
    redis_url: str, prefix: str, redis_kind: str, ttl: int | None
) -> None:
    """Redis 5 and 6 can be set to replicate a script as its source, where a write after a
    non-deterministic command (TIME, PTTL) is refused unless the script switches to
    replicating its effects, as every script of the saver does (the only mode from Redis 7)."""
    admin = redis.Redis.from_url(redis_url, protocol=2)
    if redis_kind == "redis-5":
        verbatim, effects = (
            ("DEBUG", "lua-always-replicate-commands", "0"),
            ("DEBUG", "lua-always-replicate-commands", "1"),
        )
    elif redis_kind == "redis-6":
        verbatim, effects = (
            ("CONFIG", "SET", "lua-replicate-commands", "no"),
            ("CONFIG", "SET", "lua-replicate-commands", "yes"),
        )
    else:
        pytest.skip(f"{redis_kind} always replicates a script's effects")
    admin.execute_command(*verbatim)
    try:
        with RedisSaver(redis_url, prefix=prefix, ttl=ttl) as saver:
            c = saver.put(cfg("t"), checkpoint({"m": 0}, {"m": 1}), {}, {"m": 1})
            saver.put_writes(c, [("m", 1)], "task")
            c = saver.put(c, checkpoint({"m": 1}, {"m": 2}), {}, {"m": 2})
            saver.copy_thread("t", "u")
            saver.prune(["u"])
            got = saver.get_tuple(cfg("t"))
            assert got is not None and got.checkpoint["channel_values"] == {"m": 1}
            assert [t.config["configurable"]["thread_id"] for t in saver.list(None, limit=1)]
            saver.put(cfg("v"), checkpoint({"m": 0}, {"m": 1}), {"run_id": "r"}, {"m": 1})
            saver.delete_for_runs(["r"])
            saver.delete_thread("u")
            assert saver.get_tuple(cfg("v")) is None and saver.get_tuple(cfg("u")) is None
    finally:
        admin.execute_command(*effects)
        admin.close()


def test_a_ttl_taken_up_by_a_thread_written_without_one_covers_its_old_keys(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    # 0.1.0 data migrated without a TTL, then an app saver with one: nothing is left behind.
    with RedisSaver(redis_url, prefix=prefix) as forever:
        c = forever.put(
            cfg("t"), checkpoint({"m": 1, "k": 1}, {"m": 1, "k": 1}), {}, {"m": 1, "k": 1}
        )
        forever.put_writes(c, [("m", 2)], "task")
        c = forever.put(
            c, checkpoint({"m": 2, "k": 1}, {"m": 2, "k": 1}), {"run_id": "r"}, {"m": 2}
        )
    # Listed while kept for ever: a SCAN after the 1 s TTL call may come too late to see them.
    before = keys_under(client, prefix)
    with RedisSaver(redis_url, prefix=prefix, ttl=1) as saver:
        saver.put(c, checkpoint({"m": 3, "k": 1}, {"m": 3, "k": 1}), {}, {"m": 3})
        ks = KeySpace(prefix)
        stored = (before | keys_under(client, prefix)) - {ks.threads.encode()}
        if isinstance(client, RedisCluster):  # run sets live in other slots: scripts leave them
            stored -= {ks.run("r").encode()}
        assert all_expire(client, stored)
        time.sleep(1.3)
        assert saver.get_tuple(cfg("t")) is None
        assert list(saver.list(None)) == []
        left = set(client.scan_iter(match=f"{prefix}:*", count=1000))
        assert left <= {ks.threads.encode(), ks.run("r").encode()}
        assert isinstance(client, RedisCluster) or left <= {ks.threads.encode()}


def test_a_thread_written_without_a_ttl_after_one_with_keeps_all_it_reads(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    # Both savers open, `forever` connected, before the timed put: the takeover comes well
    # within its 2 s TTL, even on a busy machine.
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=2) as saver,
        RedisSaver(redis_url, prefix=prefix) as forever,
    ):
        forever.get_tuple(cfg("warm"))
        c = saver.put(
            cfg("t"), checkpoint({"m": 1, "k": 1}, {"m": 1, "k": 1}), {}, {"m": 1, "k": 1}
        )
        c = forever.put(
            c, checkpoint({"m": 2, "k": 1}, {"m": 2, "k": 1}), {"run_id": "r"}, {"m": 2}
        )
        forever.put_writes(c, [("m", 3)], "task")
        time.sleep(2.3)
        got = forever.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["channel_values"] == {"m": 2, "k": 1}
        assert got.pending_writes == [("task", "m", 3)]
        forever.put(c, checkpoint({"m": 4, "k": 1}, {"m": 4, "k": 1}), {}, {"m": 4})
        assert [t.checkpoint["channel_values"]["m"] for t in forever.list(cfg("t"))] == [4, 2]
        assert all(client.pttl(k) == -1 for k in client.scan_iter(match=f"{prefix}:*"))
        assert orphans(client, prefix) == set()


def test_writes_without_a_ttl_keep_the_checkpoint_they_belong_to_for_ever(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """A saver without a TTL records an interrupt on a checkpoint another saver stored with
    one: the checkpoint, all it reads and the newest of the timeline stay with the writes,
    for ever, as if that saver had stored them (no thread listed for ever with nothing in it).

    Both savers open, `forever` connected, before the timed puts: the writes come well
    within their 2 s TTL, even on a busy machine."""
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=2) as timed,
        RedisSaver(redis_url, prefix=prefix) as forever,
    ):
        forever.get_tuple(cfg("warm"))
        first = timed.put(
            cfg("t"),
            checkpoint({"m": 1, "k": 1}, {"m": 1, "k": 1}),
            {"run_id": "r"},
            {"m": 1, "k": 1},
        )
        newest = timed.put(first, checkpoint({"m": 2, "k": 1}, {"m": 2, "k": 1}), {}, {"m": 2})
        forever.put_writes(first, [("__interrupt__", "approve?")], "task")
        time.sleep(2.3)
        listed = list(forever.list(cfg("t")))
        assert [t.config for t in listed] == [newest, first]
        assert listed[1].pending_writes == [("task", "__interrupt__", "approve?")]
        assert listed[0].checkpoint["channel_values"] == {"m": 2, "k": 1}
        assert all(client.pttl(k) == -1 for k in client.scan_iter(match=f"{prefix}:*"))
        assert orphans(client, prefix) == set()


def keys_under(client: Any, prefix: str) -> set[bytes]:
    return set(client.scan_iter(match=f"{prefix}:*", count=1000))


def dumps_under(client: Any, prefix: str) -> dict[bytes, bytes]:
    """Every value under `prefix`, as DUMP gives it, by key."""
    return {k: client.dump(k) for k in keys_under(client, prefix)}


def swap_for_list(client: Any, prefix: str, key: str) -> dict[bytes, bytes]:
    """Replaces our value at `key` with someone else's list, and returns `dumps_under`
    after it, to compare with once a refused call is over."""
    assert client.delete(key) == 1
    client.rpush(key, "someone else's")
    return dumps_under(client, prefix)


def all_expire(client: Any, keys: set[bytes]) -> bool:
    """Whether there are keys and none is kept for ever. Read in one pipeline: a key read one
    by one may expire before its turn when the TTL is short (-2, which is fine here)."""
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.pttl(k)
    return bool(keys) and -1 not in pipe.execute()


def thread_keys_left(client: Any, prefix: str) -> set[bytes]:
    """Keys under the prefix but the registry and run sets (shared with other threads)."""
    ks = KeySpace(prefix)
    return {
        k
        for k in keys_under(client, prefix)
        if k != ks.threads.encode() and not k.startswith(ks.run_prefix.encode())
    }


@pytest.mark.parametrize("checkpoints", [2, 600])
def test_a_refreshing_reader_or_a_writer_with_a_ttl_adopts_the_whole_thread(
    redis_url: str, prefix: str, client: redis.Redis, checkpoints: int
) -> None:
    # Values shared by checkpoints kept for ever must not expire under them: the whole thread
    # takes the TTL, however long it is.
    with RedisSaver(redis_url, prefix=prefix) as forever:
        c = cfg("t")
        for step in range(checkpoints):
            c = forever.put(
                c,
                checkpoint({"m": step, "k": 1}, {"m": step + 1, "k": 1}),
                {},
                {"m": step + 1, "k": 1},
            )
    # Listed while kept for ever: a SCAN after the 1 s TTL call may come too late to see them.
    before = thread_keys_left(client, prefix)
    with RedisSaver(redis_url, prefix=prefix, ttl=1, refresh_on_read=True) as saver:
        if checkpoints == 2:
            assert saver.get_tuple(cfg("t")) is not None  # a read that refreshes
        else:
            saver.put(c, checkpoint({"m": -1, "k": 1}, {"m": 0, "k": 1}), {}, {"m": 0})
        assert all_expire(client, before | thread_keys_left(client, prefix))
        time.sleep(1.3)
        assert saver.get_tuple(cfg("t")) is None
        assert thread_keys_left(client, prefix) == set()


@pytest.mark.parametrize("how", ["put", "put_writes", "refresh_on_read", "copy_thread"])
def test_a_takeover_by_a_ttl_takes_the_threads_subgraph_namespaces_along(
    redis_url: str, prefix: str, client: redis.Redis, how: str
) -> None:
    """A thread stored without a TTL, with subgraph namespaces no later write touches: a
    writer (or refreshing reader, or a copy onto it) with a TTL gives them its TTL too, so
    the whole thread expires. Before, they stayed for ever, and list(None) listed the thread
    after its root had expired."""
    with RedisSaver(redis_url, prefix=prefix) as forever:
        root = forever.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "r"}, {"m": 1})
        for ns in ("child:1", "child:1|grand:2"):
            sub = forever.put(cfg("t", ns), checkpoint({"m": 2}, {"m": 1}), {}, {"m": 1})
            forever.put_writes(sub, [("m", 3)], "task")
        if how == "copy_thread":
            forever.put(cfg("src"), checkpoint({"m": 9}, {"m": 9}), {}, {"m": 9})
    # Listed while kept for ever: a SCAN after the 1 s TTL call may come too late to see them.
    before = thread_keys_left(client, prefix)
    with RedisSaver(redis_url, prefix=prefix, ttl=1, refresh_on_read=True) as saver:
        if how == "put":
            saver.put(root, checkpoint({"m": 4}, {"m": 2}), {}, {"m": 2})
        elif how == "put_writes":
            saver.put_writes(root, [("m", 5)], "task")
        elif how == "refresh_on_read":
            assert saver.get_tuple(cfg("t")) is not None
        else:
            saver.copy_thread("src", "t")
        left = before | thread_keys_left(client, prefix)
        assert all_expire(client, {k for k in left if b"{t}" in k})
        time.sleep(1.3)
        assert [c for c in saver.list(None) if c.config["configurable"]["thread_id"] == "t"] == []
        assert {k for k in thread_keys_left(client, prefix) if b"{t}" in k} == set()


@pytest.mark.parametrize("how", ["put", "put_writes", "refresh_on_read"])
def test_a_takeover_refused_by_a_foreign_subgraph_index_changes_nothing(
    redis_url: str, prefix: str, client: redis.Redis, how: str
) -> None:
    tk = KeySpace(prefix).thread("t")
    with RedisSaver(redis_url, prefix=prefix) as forever:
        root = forever.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
        forever.put(cfg("t", "child:1"), checkpoint({"m": 2}, {"m": 1}), {}, {"m": 1})
    client.delete(tk.keys("child:1"))
    client.set(tk.keys("child:1"), "foreign")
    before = dumps_under(client, prefix)
    with RedisSaver(redis_url, prefix=prefix, ttl=60, refresh_on_read=True) as saver:
        with pytest.raises(WrongTypeError, match="zset") as info:
            if how == "put":
                saver.put(root, checkpoint({"m": 4}, {"m": 2}), {}, {"m": 2})
            elif how == "put_writes":
                saver.put_writes(root, [("m", 5)], "task")
            else:
                saver.get_tuple(cfg("t"))
    assert info.value.key == tk.keys("child:1")
    assert dumps_under(client, prefix) == before
    assert all(client.pttl(k) == -1 for k in before)


def test_a_copy_without_a_ttl_over_one_with_keeps_everything(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    with RedisSaver(redis_url, prefix=prefix) as forever:
        c = forever.put(cfg("src"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "r"}, {"m": 1})
        forever.put_writes(c, [("m", 2)], "task")
        with RedisSaver(redis_url, prefix=prefix, ttl=1) as saver:
            saver.copy_thread("src", "dst")
        forever.copy_thread("src", "dst")
        time.sleep(1.3)
        got = forever.get_tuple(cfg("dst"))
        assert got is not None and got.pending_writes == [("task", "m", 2)]
        assert all(client.pttl(k) == -1 for k in keys_under(client, prefix))
        assert orphans(client, prefix) == set()


def test_a_copy_without_a_ttl_skips_a_namespace_that_expired_in_the_source(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
        RedisSaver(redis_url, prefix=prefix, ttl=60) as long,
        RedisSaver(redis_url, prefix=prefix) as forever,
    ):
        short.put(cfg("src", "a"), checkpoint({}, {}), {}, {})
        long.put(cfg("src"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
        long.put(cfg("dst", "a"), checkpoint({"k": 1}, {"k": 1}), {}, {"k": 1})
        time.sleep(1.3)  # "a" of src has expired; its namespace entry is still listed
        forever.copy_thread("src", "dst")
        assert forever.get_tuple(cfg("dst")).checkpoint["channel_values"] == {"m": 1}
        assert forever.get_tuple(cfg("dst", "a")).checkpoint["channel_values"] == {"k": 1}
        assert orphans(client, prefix) == set()


def test_a_run_set_kept_for_ever_stays_so_when_a_ttl_writer_joins_it(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    run_set = KeySpace(prefix).run("r")
    with RedisSaver(redis_url, prefix=prefix) as forever:
        forever.put(cfg("keep"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "r"}, {"m": 1})
    with RedisSaver(redis_url, prefix=prefix, ttl=1) as saver:
        saver.copy_thread("keep", "scratch")
        saver.put(cfg("other"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "r"}, {"m": 1})
        assert client.pttl(run_set) == -1 and client.scard(run_set) == 3
        time.sleep(1.3)
        saver.delete_for_runs(["r"])
        assert saver.get_tuple(cfg("keep")) is None


@pytest.mark.parametrize("how", ["put", "put_writes", "refresh_on_read"])
def test_a_thread_taken_over_by_a_ttl_takes_its_own_run_sets_along(
    redis_url: str, prefix: str, client: redis.Redis, how: str
) -> None:
    """A thread stored without a TTL has run sets naming several of its checkpoints; when a
    writer (or refreshing reader) with a TTL takes it over, the run sets naming only that
    thread's checkpoints expire with it. One that also names a checkpoint kept for ever
    elsewhere stays, so `delete_for_runs` still finds that one."""
    if isinstance(client, RedisCluster):
        pytest.skip("on a cluster, run sets kept for ever stay so (another slot)")
    ks = KeySpace(prefix)
    with RedisSaver(redis_url, prefix=prefix) as forever:
        c = cfg("t")
        for step in range(3):
            c = forever.put(c, checkpoint({"m": step}, {"m": step + 1}), {"run_id": "r"}, {})
        c = forever.put(c, checkpoint({"m": 9}, {"m": 9}), {"run_id": "shared"}, {"m": 9})
        kept = forever.put(cfg("keep"), checkpoint({}, {}), {"run_id": "shared"}, {})
    assert client.scard(ks.run("r")) == 3 and client.pttl(ks.run("r")) == -1
    with RedisSaver(redis_url, prefix=prefix, ttl=1, refresh_on_read=True) as saver:
        if how == "put":
            saver.put(c, checkpoint({"m": 10}, {"m": 10}), {"run_id": "new"}, {"m": 10})
        elif how == "put_writes":
            saver.put_writes(c, [("m", 1)], "task")
        else:
            assert saver.get_tuple(cfg("t")) is not None
        p = client.pttl(ks.run("r"))
        assert p == -2 or 0 < p <= 1000  # expiring (or already gone, after a stall)
        assert client.pttl(ks.run("shared")) == -1
        time.sleep(1.3)
        assert saver.get_tuple(cfg("t")) is None
        assert not client.exists(ks.run("r"))
        saver.delete_for_runs(["shared"])
        assert saver.get_tuple(kept) is None
    assert keys_under(client, prefix) <= {ks.threads.encode()}


@pytest.mark.parametrize("how", ["put", "put_writes", "refresh_on_read", "copy"])
def test_a_ttl_takeover_never_cuts_a_value_a_longer_lived_checkpoint_reads(
    redis_url: str, prefix: str, client: redis.Redis, how: str
) -> None:
    """A checkpoint kept 10 s reads value k; a writer without a TTL keeps k for ever; a
    writer with a 0.5 s TTL then takes the thread over: k lives as long as the longest-lived
    key of the timeline, not 0.5 s, so no checkpoint comes back without it. (10 s, checked
    as > 2 s: room for stalls between the first put and the check.)"""
    blob = KeySpace(prefix).thread("t").blob("", "k", "1")
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=10) as long,
        RedisSaver(redis_url, prefix=prefix) as forever,
        RedisSaver(redis_url, prefix=prefix, ttl=0.5, refresh_on_read=True) as short,
    ):
        values = {"k": "keep me", "m": 1}
        c1 = long.put(cfg("t"), checkpoint(values, {"k": "1", "m": "1"}), {}, {"k": "1", "m": "1"})
        values["m"] = 2
        c2 = forever.put(c1, checkpoint(values, {"k": "1", "m": "2"}), {}, {"m": "2"})
        assert client.pttl(blob) == -1
        if how == "put":
            short.put(c2, checkpoint({**values, "m": 3}, {"k": "1", "m": "3"}), {}, {"m": "3"})
        elif how == "put_writes":
            short.put_writes(c2, [("m", 3)], "task")
        elif how == "refresh_on_read":
            assert short.get_tuple(cfg("t")) is not None
        else:
            forever.copy_thread("t", "u")
            short.copy_thread("u", "t")
        assert client.pttl(blob) > 2000
        time.sleep(0.8)  # past the short TTL
        kept = [saved.checkpoint["channel_values"] for saved in long.list(cfg("t"))]
        assert len(kept) >= 2 and all(v["k"] == "keep me" for v in kept)


@pytest.mark.parametrize("how", ["put", "put_writes", "copy"])
def test_a_shorter_ttl_never_lets_the_newest_state_expire_before_an_older_one(
    redis_url: str, prefix: str, how: str
) -> None:
    """A deployment lowers its TTL from 30 s to 1 s: what the 1 s writer adds to a thread the
    30 s one wrote lives as long as what is there, so the thread never falls back to the older
    state (before: past 1 s the older checkpoint read back as the newest, and its pending
    writes were gone)."""
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=30) as long,
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
    ):
        c1 = long.put(cfg("t"), checkpoint({"m": 1}, {"m": "1"}), {}, {"m": "1"})
        if how == "put":
            newest = short.put(c1, checkpoint({"m": 2}, {"m": "2"}), {}, {"m": "2"})
        elif how == "put_writes":
            short.put_writes(c1, [("m", 3)], "task")
            newest = c1
        else:
            newest = short.put(cfg("src"), checkpoint({"m": 2}, {"m": "2"}), {}, {"m": "2"})
            short.copy_thread("src", "t")
        time.sleep(1.3)
        got = short.get_tuple(cfg("t"))
        assert got is not None
        assert (
            got.config["configurable"]["checkpoint_id"] == newest["configurable"]["checkpoint_id"]
        )
        if how == "put_writes":
            assert got.pending_writes == [("task", "m", 3)]
        else:
            assert got.checkpoint["channel_values"] == {"m": 2}


@pytest.mark.parametrize("how", ["put", "put_writes", "refresh_on_read", "copy"])
def test_a_checkpoint_never_outlives_a_value_it_reads(
    redis_url: str, prefix: str, client: Any, how: str
) -> None:
    """Every key a script gives a TTL expires at one instant. Before, each expired `ttl` after
    the command that set it: on Redis 5 to 7.0 the values a put set before the checkpoint
    expired a few ms before it (the more, the larger the put), and a read in between found
    the checkpoint without them."""
    if isinstance(client, RedisCluster):
        pytest.skip("one thread's keys share a slot: the cluster adds nothing here")
    big = {f"c{i}": os.urandom(50_000).hex() for i in range(60)}  # 6 MB, incompressible
    versions = dict.fromkeys(big, "1")
    with RedisSaver(redis_url, prefix=prefix, ttl=60, refresh_on_read=True) as saver:
        thread = "src" if how == "copy" else "t"
        c1 = saver.put(cfg(thread), checkpoint(big, versions), {}, versions)
        if how == "put_writes":
            time.sleep(0.05)
            saver.put_writes(c1, [(ch, 1) for ch in big], "task")
        elif how == "refresh_on_read":
            time.sleep(0.05)
            assert saver.get_tuple(cfg("t")) is not None
        else:
            saver.copy_thread("src", "t")
    tk = KeySpace(prefix).thread("t")
    cid = c1["configurable"]["checkpoint_id"]
    reads = [tk.blob("", ch, "1") for ch in big]
    if how == "put_writes":
        reads.append(tk.wr("", cid))
    # In one script: what the checkpoint reads, then the checkpoint. Where both expire at one
    # instant, what was read first has no less time left.
    left = client.eval(
        "local t = {} for i, k in ipairs(KEYS) do t[i] = redis.call('PTTL', k) end return t",
        len(reads) + 1,
        *reads,
        tk.cp("", cid),
    )
    assert min(left[:-1]) >= left[-1] > 0


def test_copying_again_keeps_what_the_target_reads_that_expired_in_the_source(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """A value that expired in the source (its index entry not swept yet) is not "absent at
    that version": copying the source again leaves the target's live copy of it alone.

    Steps 2.2 s apart with a 4 s TTL: each has ~1.8 s to spare."""
    with RedisSaver(redis_url, prefix=prefix, ttl=4) as saver:
        v = {"k": "1", "m": "1"}
        c1 = saver.put(cfg("src"), checkpoint({"k": "v1", "m": 1}, v), {}, v)
        saver.copy_thread("src", "dst")
        time.sleep(2.2)
        saver.put(c1, checkpoint({"k": "v2", "m": 1}, {"k": "2", "m": "1"}), {}, {"k": "2"})
        dst = cfg("dst", cid=c1["configurable"]["checkpoint_id"])
        saver.put(dst, checkpoint({"k": "v1", "m": 2}, {"k": "1", "m": "2"}), {}, {"m": "2"})
        time.sleep(2.2)  # the source's first checkpoint and its k have expired
        assert saver.get_tuple(cfg("dst")).checkpoint["channel_values"] == {"k": "v1", "m": 2}
        saver.copy_thread("src", "dst")
        assert saver.get_tuple(cfg("dst")).checkpoint["channel_values"] == {"k": "v1", "m": 2}


def test_a_copy_by_a_shorter_ttl_keeps_the_run_set_naming_what_lives_longer(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """A copy by a saver with a shorter TTL leaves a checkpoint copied before for longer its
    life, and its run marker and run-set membership as long: `delete_for_runs` finds it."""
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=30) as long,
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
    ):
        v = {"m": "1"}
        c1 = long.put(cfg("src"), checkpoint({"m": 1}, v), {"run_id": "r"}, v)
        long.copy_thread("src", "dst")
        short.copy_thread("src", "dst")
        time.sleep(1.3)
        # a put with a TTL sweeps the expired index entries of dst's timeline
        short.put(cfg("dst"), checkpoint({"x": 1}, {"x": "1"}), {"run_id": "other"}, {"x": "1"})
        copied = cfg("dst", cid=c1["configurable"]["checkpoint_id"])
        assert long.get_tuple(copied) is not None
        long.delete_for_runs(["r"])
        assert long.get_tuple(copied) is None
        assert long.get_tuple(c1) is None


@pytest.mark.parametrize("how", ["delete_for_runs", "prune"])
def test_removing_checkpoints_resettles_what_is_left(
    redis_url: str, prefix: str, client: redis.Redis, how: str
) -> None:
    with RedisSaver(redis_url, prefix=prefix, ttl=1) as saver:
        c = saver.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "r1"}, {"m": 1})
    with RedisSaver(redis_url, prefix=prefix) as forever:
        forever.put(c, checkpoint({"m": 2}, {"m": 2}), {"run_id": "r2"}, {"m": 2})
        if how == "delete_for_runs":
            forever.delete_for_runs(["r2"])  # leaves only checkpoints with a TTL
        else:
            forever.prune(["t"], strategy="keep_latest")
        time.sleep(1.3)
        if how == "delete_for_runs":
            assert forever.get_tuple(cfg("t")) is None
            assert thread_keys_left(client, prefix) == set()
        else:  # the newest, kept for ever, stays whole
            assert forever.get_tuple(cfg("t")).checkpoint["channel_values"] == {"m": 2}
            assert orphans(client, prefix) == set()


def test_dropping_the_longest_lived_timeline_resettles_the_namespaces(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    with RedisSaver(redis_url, prefix=prefix) as forever:
        forever.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "r1"}, {"m": 1})
        with RedisSaver(redis_url, prefix=prefix, ttl=1) as saver:
            saver.put(cfg("t", "sub"), checkpoint({"k": 1}, {"k": 1}), {}, {"k": 1})
        forever.delete_for_runs(["r1"])  # drops the timeline kept for ever
        time.sleep(1.3)
        assert list(forever.list(None)) == []
        assert thread_keys_left(client, prefix) == set()


def test_a_copy_with_a_ttl_adopts_the_target_and_keeps_longer_lives(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    with RedisSaver(redis_url, prefix=prefix) as forever:
        s1 = forever.put(
            cfg("src"), checkpoint({"m": 1, "k": "v"}, {"m": 1, "k": 1}), {}, {"m": 1, "k": 1}
        )
        forever.copy_thread("src", "dst")
        forever.put(
            cfg("dst", cid=s1["configurable"]["checkpoint_id"]),
            checkpoint({"m": 2, "k": "v"}, {"m": 2, "k": 1}),
            {},
            {"m": 2},
        )
        # Listed while kept for ever: a SCAN after the 1 s TTL call may come too late.
        before = thread_keys_left(client, prefix)
        with RedisSaver(redis_url, prefix=prefix, ttl=1) as saver:
            saver.copy_thread("src", "dst")  # the target takes the TTL as a whole
        left = before | thread_keys_left(client, prefix)
        assert all_expire(client, {k for k in left if b"{dst}" in k})
        time.sleep(1.3)
        assert forever.get_tuple(cfg("dst")) is None
        assert orphans(client, prefix) == set()


def test_a_shorter_ttl_never_cuts_what_a_longer_lived_checkpoint_reads(
    redis_url: str, prefix: str
) -> None:
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=60) as long,
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
    ):
        c1 = long.put(
            cfg("t"), checkpoint({"m": 1, "k": 1}, {"m": 1, "k": 1}), {}, {"m": 1, "k": 1}
        )
        long.put_writes(c1, [("m", 9)], "task")
        short.put(c1, checkpoint({"m": 2, "k": 1}, {"m": 2, "k": 1}), {}, {"m": 2})
        short.put_writes(c1, [("m", 10)], "other")
        time.sleep(1.3)
        old = long.get_tuple(c1)
        assert old is not None and old.checkpoint["channel_values"] == {"m": 1, "k": 1}
        assert sorted(old.pending_writes) == [("other", "m", 10), ("task", "m", 9)]


def test_a_retried_put_by_a_shorter_ttl_keeps_what_a_longer_lived_checkpoint_reads(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """A put repeated (same id, same versions) by a writer with a shorter TTL rewrites
    values that exist already: they keep their longer life, since the child checkpoint the
    longer-lived writer put reads one of them (it came back without it)."""
    tk = KeySpace(prefix).thread("t")
    versions = {"k": "0000000001.aaaaaaaaaaaa", "m": "0000000001.bbbbbbbbbbbb"}
    first = checkpoint({"k": "keep me", "m": 1}, versions)
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=3600) as long,
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
    ):
        c1 = long.put(cfg("t"), first, {"run_id": "r"}, dict(versions))
        child = {"k": versions["k"], "m": "0000000002.cccccccccccc"}
        c2 = long.put(c1, checkpoint({"k": "keep me", "m": 2}, child), {}, {"m": child["m"]})
        short.put(cfg("t"), first, {"run_id": "r"}, dict(versions))
        assert client.pttl(tk.blob("", "k", versions["k"])) > 3_000_000
        assert client.pttl(tk.cp("", first["id"])) > 3_000_000  # the checkpoint itself too
        time.sleep(1.3)
        got = long.get_tuple(c2)
        assert got is not None and got.checkpoint["channel_values"] == {"k": "keep me", "m": 2}
        again = long.get_tuple(c1)
        assert again is not None and again.checkpoint["channel_values"]["k"] == "keep me"


@pytest.mark.standalone
@pytest.mark.parametrize("how", ["delete_thread", "ttl_takeover"])
def test_a_run_set_shared_with_a_thread_kept_for_ever_expires_once_that_one_no_longer_is(
    redis_url: str, prefix: str, client: redis.Redis, how: str
) -> None:
    """Run r names a 1 s checkpoint of thread A and one kept for ever of thread B, so its
    set is kept for ever. Once B is deleted, or taken over by a writer with a TTL, the set
    lives as long as what it still names: nothing is left once all has expired (it used to
    stay for ever, named by no index)."""
    run_set = KeySpace(prefix).run("r")
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
        RedisSaver(redis_url, prefix=prefix) as forever,
    ):
        short.put(cfg("A"), checkpoint({"m": 1}, {"m": "1"}), {"run_id": "r"}, {"m": "1"})
        b = forever.put(cfg("B"), checkpoint({"m": 1}, {"m": "1"}), {"run_id": "r"}, {"m": "1"})
        assert client.pttl(run_set) == -1 and client.scard(run_set) == 2
        if how == "delete_thread":
            forever.delete_thread("B")
        else:
            short.put(b, checkpoint({"m": 2}, {"m": "2"}), {"run_id": "r2"}, {"m": "2"})
        left = client.pttl(run_set)
        assert left == -2 or 0 < left <= 1000, left
        time.sleep(1.3)
        assert not client.exists(run_set)
        for thread in ("A", "B"):
            forever.delete_thread(thread)
    assert keys_under(client, prefix) <= {KeySpace(prefix).threads.encode()}


def test_a_retried_put_under_another_run_gives_that_run_set_the_life_it_kept(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """A put repeated by a saver with a shorter TTL under another run keeps the checkpoint's
    longer life; its new run set lives as long, or `delete_for_runs` missed the checkpoint
    once the set expired."""
    ks = KeySpace(prefix)
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=3600) as long,
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
    ):
        c = checkpoint({"m": 1}, {"m": "1"})
        stored = long.put(cfg("t"), c, {"run_id": "r1"}, {"m": "1"})
        short.put(cfg("t"), c, {"run_id": "r2"}, {"m": "1"})
        if not isinstance(client, RedisCluster):  # a cluster adds it before the script
            assert client.pttl(ks.run("r2")) > 3_000_000
            time.sleep(1.3)
            short.delete_for_runs(["r2"])
            assert long.get_tuple(stored) is None


@pytest.mark.standalone
def test_a_put_taking_a_checkpoint_kept_for_ever_to_another_run_settles_the_old_set(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """Run r1 names A's 1 s checkpoint and B's kept for ever; B's is put again under r2 by a
    saver with a TTL. r1 then names only A's: it expires with it (it stayed for ever)."""
    ks = KeySpace(prefix)
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
        RedisSaver(redis_url, prefix=prefix) as forever,
    ):
        short.put(cfg("A"), checkpoint({"m": 1}, {"m": "1"}), {"run_id": "r1"}, {"m": "1"})
        c = checkpoint({"m": 1}, {"m": "1"})
        forever.put(cfg("B"), c, {"run_id": "r1"}, {"m": "1"})
        assert client.pttl(ks.run("r1")) == -1
        short.put(cfg("B"), c, {"run_id": "r2"}, {"m": "1"})
        assert 0 < client.pttl(ks.run("r1")) <= 1000
        time.sleep(1.3)
        assert not client.exists(ks.run("r1"))
        for thread in ("A", "B"):
            forever.delete_thread(thread)
    assert keys_under(client, prefix) <= {ks.threads.encode()}


@pytest.mark.standalone
def test_prune_drops_the_run_set_member_of_a_checkpoint_that_expired_unswept(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """c1 (1 s) and c2 (kept for ever) share run r, whose set is kept for ever; c1's payload
    expires before any put sweeps its index entries, then `prune` keeps only c3: c1's member
    leaves the run set by its run marker (the payload that named the run is gone), and the
    set, naming nothing alive, goes. It used to stay for ever, named by no index."""
    ks = KeySpace(prefix)
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
        RedisSaver(redis_url, prefix=prefix) as forever,
    ):
        c1 = short.put(cfg("T"), checkpoint({"m": 1}, {"m": "1"}), {"run_id": "r"}, {"m": "1"})
        c2 = forever.put(c1, checkpoint({"m": 2}, {"m": "2"}), {"run_id": "r"}, {"m": "2"})
        forever.put(c2, checkpoint({"m": 3}, {"m": "3"}), {"run_id": "r2"}, {"m": "3"})
        assert client.pttl(ks.run("r")) == -1
        time.sleep(1.3)
        forever.prune(["T"], strategy="keep_latest")
        assert not client.exists(ks.run("r"))
        got = forever.get_tuple(cfg("T"))
        assert got is not None and got.checkpoint["channel_values"] == {"m": 3}
        forever.delete_thread("T")
    assert keys_under(client, prefix) <= {ks.threads.encode()}


@pytest.mark.standalone
def test_a_foreign_run_set_never_fails_a_ttl_call_half_way(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    with RedisSaver(redis_url, prefix=prefix) as forever:
        forever.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "r0"}, {"m": 1})
    client.set(KeySpace(prefix).run("r0"), "not a set")
    with RedisSaver(redis_url, prefix=prefix, ttl=60, refresh_on_read=True) as saver:
        got = saver.get_tuple(cfg("t"))
        assert got is not None and got.checkpoint["channel_values"] == {"m": 1}
        assert all_expire(client, thread_keys_left(client, prefix))
    assert client.get(KeySpace(prefix).run("r0")) == b"not a set"


@pytest.mark.standalone
def test_a_copy_without_a_ttl_keeps_its_run_set(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    # Both savers open, `forever` connected, before the timed put: the copy comes well
    # within its 2 s TTL, even on a busy machine.
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=2) as saver,
        RedisSaver(redis_url, prefix=prefix) as forever,
    ):
        forever.get_tuple(cfg("warm"))
        saver.put(cfg("a"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "r"}, {"m": 1})
        forever.copy_thread("a", "b")
        assert client.pttl(KeySpace(prefix).run("r")) == -1
        time.sleep(2.3)
        forever.delete_for_runs(["r"])
        assert forever.get_tuple(cfg("b")) is None


def test_expired_entries_are_swept_faster_than_wide_puts_add_them(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    # A put adds 2 index entries plus one per blob; it drops at least twice as many. The
    # first put has a 1 s TTL and has expired by the next; the next two have 30 s, so
    # nothing else expires, however slow the machine.
    channels = 100
    tk = KeySpace(prefix).thread("wide")
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
        RedisSaver(redis_url, prefix=prefix, ttl=30) as saver,
    ):
        c = cfg("wide")
        for step in (1, 2, 3):
            values = {f"ch{i}": step for i in range(channels)}
            versions = dict.fromkeys(values, step)
            c = (short if step == 1 else saver).put(c, checkpoint(values, versions), {}, versions)
            if step == 1:
                first = client.zrange(tk.keys(""), 0, -1)
                time.sleep(1.3)
        # the first put's entries expired before the second put, which swept all of them
        assert not set(first) & set(client.zrange(tk.keys(""), 0, -1))
        assert client.zcard(tk.keys("")) == 2 * (channels + 2)
        assert client.zcard(tk.idx("")) == 2
        assert orphans(client, prefix) == set()


@pytest.mark.standalone
def test_run_sets_drop_expired_checkpoints_and_copies_keep_a_ttl(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    run_set = KeySpace(prefix).run("r")
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
        RedisSaver(redis_url, prefix=prefix, ttl=30) as saver,
    ):
        ids = []
        # The first checkpoint lives 1 s and has expired by the next; the run set, refreshed
        # by the next two (30 s, so nothing else expires on a slow machine), outlives it.
        for step in range(3):
            c = (short if step == 0 else saver).put(
                cfg("a"), checkpoint({"m": step}, {"m": step + 1}), {"run_id": "r"}, {"m": step + 1}
            )
            ids.append(c["configurable"]["checkpoint_id"])
            if step == 0:
                time.sleep(1.3)
        assert client.smembers(run_set) == {f"a::{cid}".encode() for cid in ids[1:]}
        saver.copy_thread("a", "b")
        assert client.scard(run_set) == 4 and 0 < client.pttl(run_set) <= 30_000


def test_a_put_keeps_the_writes_already_stored_for_its_checkpoint(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    # Steps 2.1 s apart with a 4 s TTL: each has ~1.9 s to spare, and the read still comes
    # after the writes' own TTL ended.
    with RedisSaver(redis_url, prefix=prefix, ttl=4) as saver:
        cp = checkpoint({"m": 1}, {"m": 1})
        target = cfg("w", cid=cp["id"])
        saver.put_writes(target, [("m", 2)], "task")
        time.sleep(2.1)
        saver.put(cfg("w"), cp, {}, {"m": 1})
        time.sleep(2.1)
        got = saver.get_tuple(cfg("w"))
        assert got is not None and got.pending_writes == [("task", "m", 2)]


class _AsyncSaverOfMine(AsyncRedisSaver):
    """A subclass, named as an application would."""


@pytest.mark.parametrize("side", ["async", "async subclass", "sync"])
async def test_a_resp3_client_on_redis_5_is_told_to_use_protocol_2(
    server_pool: Any, side: str, prefix: str
) -> None:
    url = server_pool.get("redis-5")
    # The fix names the client class the saver takes: it named the blocking redis.Redis
    # for AsyncRedisSaver too, which refuses it, and then for a subclass of it.
    if side == "sync":
        client: Any = redis.Redis.from_url(url, protocol=3)
        fix = r"protocol=2, e\.g\. redis\.Redis\.from_url\(url, protocol=2\)"
        with pytest.raises(PlainRedisError, match=fix):
            RedisSaver(client=client, prefix=prefix).get_tuple(cfg("t"))
        client.close()
    else:
        aclient = aioredis.Redis.from_url(url, protocol=3)
        fix = r"protocol=2, e\.g\. redis\.asyncio\.Redis\.from_url\(url, protocol=2\)"
        cls = AsyncRedisSaver if side == "async" else _AsyncSaverOfMine
        with pytest.raises(PlainRedisError, match=fix):
            await cls(client=aclient, prefix=prefix).aget_tuple(cfg("t"))
        await aclient.aclose()


@pytest.mark.parametrize("side", ["async", "sync"])
async def test_protocol_3_given_to_a_saver_on_redis_5_is_told_to_leave_it_out(
    server_pool: Any, side: str, prefix: str
) -> None:
    # Its fix told to build a client= with protocol=2, which the caller had not done.
    url = server_pool.get("redis-5")
    fix = r"leave protocol=3 out: the saver's default, protocol=2, works on any Redis$"
    if side == "sync":
        with RedisSaver(url, prefix=prefix, protocol=3) as saver:
            with pytest.raises(PlainRedisError, match=fix):
                saver.get_tuple(cfg("t"))
    else:
        if int(redis.__version__.split(".")[0]) < 6:
            # its asyncio pool keeps the connection whose HELLO 3 failed: the next call waits
            # for one until the pool's timeout ("No connection available")
            pytest.skip("redis-py 5's asyncio pool does not get back a refused connection")
        async with AsyncRedisSaver(url, prefix=prefix, protocol=3) as asaver:
            with pytest.raises(PlainRedisError, match=fix):
                await asaver.aget_tuple(cfg("t"))


def test_an_error_raised_while_handling_the_resp3_one_is_not_taken_for_it(
    server_pool: Any, prefix: str
) -> None:
    """Only a cluster client's chain is searched for the refusal of HELLO 3: a foreign key
    met by a fallback saver in the except block of the RESP3 error was reported as that
    RESP3 error, quoting itself."""
    url = server_pool.get("redis-5")
    resp3 = redis.Redis.from_url(url, protocol=3)
    resp2 = redis.Redis.from_url(url, protocol=2)
    resp2.set(f"{prefix}:threads", "not a sorted set")
    raised: list[BaseException] = []
    try:
        try:
            RedisSaver(client=resp3, prefix=prefix).get_tuple(cfg("t"))
        except PlainRedisError as first:
            assert "does not speak RESP3" in str(first)
            try:
                RedisSaver(client=resp2, prefix=prefix).get_tuple(cfg("t"))
            except Exception as error:  # noqa: BLE001 - what it raised is the point
                raised.append(error)
        assert len(raised) == 1 and isinstance(raised[0], WrongTypeError), raised
    finally:
        resp2.delete(f"{prefix}:threads")
        resp2.close()
        resp3.close()


def test_refresh_on_read_keeps_a_read_thread_alive(redis_url: str, prefix: str) -> None:
    # Reads 1.1 s apart with a 3 s TTL, the last 3.3 s after the put: each has ~1.9 s to spare.
    with RedisSaver(redis_url, prefix=prefix, ttl=3, refresh_on_read=True) as saver:
        saver.put(cfg("r"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
        for _ in range(3):
            time.sleep(1.1)
            assert saver.get_tuple(cfg("r")) is not None
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["r"]


# -- atomicity -------------------------------------------------------------------------


@pytest.mark.standalone
def test_a_put_cut_off_mid_send_writes_nothing(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    saver = RedisSaver(redis_url, prefix=prefix)
    plan = next(saver._put_steps(cfg("cut"), checkpoint({"m": [1] * 1000}, {"m": 1}), {}, {"m": 1}))
    from langgraph_checkpoint_plainredis._shell import wire_args

    packed = b"".join(redis.connection.Connection().pack_command(*wire_args(plan[0], True)))
    host, port = (
        client.connection_pool.connection_kwargs["host"],
        client.connection_pool.connection_kwargs["port"],
    )
    with socket.create_connection((host, port)) as sock:
        sock.sendall(packed[: len(packed) // 2])
    time.sleep(0.1)
    assert set(client.scan_iter(match=f"{prefix}:*")) == set()
    saver.close()


def test_a_refused_put_writes_nothing(
    sync_saver: RedisSaver, client: redis.Redis, prefix: str
) -> None:
    tk = KeySpace(prefix).thread("t")
    client.set(tk.idx(""), "foreign")
    with pytest.raises(WrongTypeError, match="zset") as info:
        sync_saver.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
    assert info.value.key == tk.idx("")
    # A cluster writes the registry entry first (another slot); it points at nothing.
    left = set(client.scan_iter(match=f"{prefix}:*")) - {KeySpace(prefix).threads.encode()}
    assert left == {tk.idx("").encode()}


def test_delete_racing_put_leaves_no_orphans(
    sync_saver: RedisSaver, client: redis.Redis, prefix: str
) -> None:
    stop = time.monotonic() + 1.5

    def writer() -> None:
        c = cfg("busy")
        step = 0
        while time.monotonic() < stop:
            step += 1
            c = sync_saver.put(
                cfg("busy", cid=c["configurable"].get("checkpoint_id")),
                checkpoint({"m": step}, {"m": step}),
                {"run_id": "r1"},
                {"m": step},
            )
            sync_saver.put_writes(c, [("m", step)], "task")

    def deleter() -> None:
        while time.monotonic() < stop:
            sync_saver.delete_thread("busy")

    threads = [threading.Thread(target=writer), threading.Thread(target=deleter)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert orphans(client, prefix) == set()
    sync_saver.delete_thread("busy")
    assert set(client.scan_iter(match=f"{prefix}:*")) == set()


@pytest.mark.parametrize("given", [7, uuid.UUID("0b9e3bd2-5a8d-4a57-a4b5-3a1d6f0c2e11")])
async def test_an_int_or_uuid_thread_id_comes_back_as_given(saver: Any, given: Any) -> None:
    """As from InMemorySaver, the configs put, get_tuple and list return for a thread hold
    its id as the caller gave it; its text names the same thread."""
    memory = InMemorySaver()
    got: dict[str, list[Any]] = {}
    for name, s in (("memory", memory), ("ours", saver)):
        conf = {"configurable": {"thread_id": given, "checkpoint_ns": ""}}
        first = await s.aput(conf, checkpoint({"m": 1}, {"m": "1"}, cid="1"), {}, {"m": "1"})
        second = await s.aput(first, checkpoint({"m": 2}, {"m": "2"}, cid="2"), {}, {"m": "2"})
        latest = await s.aget_tuple(conf)
        by_id = await s.aget_tuple(first)
        listed = [t async for t in s.alist(conf)]
        got[name] = [
            first,
            second,
            latest.config,
            latest.parent_config,
            by_id.config,
            [(t.config, t.parent_config) for t in listed],
        ]
    assert got["ours"] == got["memory"]
    assert type(got["ours"][2]["configurable"]["thread_id"]) is type(given)
    text = await saver.aget_tuple(cfg(str(given)))
    assert text.config == cfg(str(given), cid="2")


async def test_a_version_equal_to_the_stored_one_reads_its_value(saver: Any) -> None:
    """A checkpoint naming version 1.0 (or True) of a channel reads the value put at 1, as
    from InMemorySaver, whose dicts hold equal versions as one key."""
    for name, s in (("memory", InMemorySaver()), ("ours", saver)):
        first = await s.aput(cfg("v"), checkpoint({"a": "A"}, {"a": 1}, cid="1"), {}, {"a": 1})
        for n, same in enumerate((1.0, True), start=2):
            child = checkpoint({}, {"a": same}, cid=str(n))
            config = await s.aput(first, child, {}, {})
            got = await s.aget_tuple(config)
            assert got.checkpoint["channel_values"] == {"a": "A"}, (name, same)


# -- bad input -------------------------------------------------------------------------


async def test_config_without_thread_id_names_the_missing_key(saver: Any) -> None:
    with pytest.raises(ValueError, match="thread_id"):
        await saver.aget_tuple({"configurable": {}})
    with pytest.raises(ValueError, match="thread_id"):
        await saver.aput({"configurable": {"checkpoint_ns": ""}}, checkpoint({}, {}), {}, {})


async def test_a_namespace_of_none_says_it_is_none_and_what_to_pass(saver: Any) -> None:
    none_ns = {"configurable": {"thread_id": "t", "checkpoint_ns": None}}
    with pytest.raises(ValueError, match=r"\['checkpoint_ns'\] is None: pass a str \(''"):
        await saver.aget_tuple(none_ns)


async def test_writes_of_a_task_id_or_channel_not_a_str_are_refused_naming_them(
    saver: Any,
) -> None:
    """An int task id or channel crashed deep in the key and value encoders (TypeError from
    `re`, AttributeError from `.encode`); each is now a TypeError naming the value."""
    c = await put(saver, "t", {"m": 1}, {"m": "1"})
    with pytest.raises(TypeError, match="task_id must be a str, got int 3"):
        await saver.aput_writes(c, [("m", 5)], 3)
    with pytest.raises(TypeError, match="task_path must be a str, got int 7"):
        await saver.aput_writes(c, [("m", 5)], "task", 7)
    with pytest.raises(TypeError, match="channel must be a str, got int 1"):
        await saver.aput_writes(c, [(1, 5)], "task")
    got = await saver.aget_tuple(c)
    assert got is not None and got.pending_writes == []  # nothing written


async def test_an_int_parent_id_is_stored_as_its_string(saver: Any) -> None:
    """LangGraph's ids are strings; an int parent id (from a hand-made config) crashed the
    encoder with AttributeError. It is stored and read back as its string, as thread ids are."""
    parent = await put(saver, "t", {"m": 1}, {"m": "1"}, cid="5")
    child = checkpoint({"m": 2}, {"m": "2"})
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": 5}}
    stored = await saver.aput(config, child, {}, {"m": "2"})
    got = await saver.aget_tuple(stored)
    assert got is not None and got.parent_config is not None
    assert got.parent_config["configurable"]["checkpoint_id"] == "5"
    assert parent["configurable"]["checkpoint_id"] == "5"


def test_the_deltachannels_seen_are_kept_right_by_many_threads() -> None:
    """What a saver remembers of each thread's DeltaChannels was changed without a lock: past
    4,096 (thread, namespace) pairs, a put from one thread while another evicted raised
    "dictionary changed size during iteration" (about 1 call in 1,000 with threads switching
    every µs), and two threads putting on one thread could each drop what the other added.
    Nothing here connects: the record is kept before any script is sent."""
    import sys

    saver = RedisSaver("redis://127.0.0.1:1/0")
    errors: list[BaseException] = []
    stop = time.monotonic() + 1.5

    def fresh_threads(w: int) -> None:
        i = 0
        while time.monotonic() < stop:
            i += 1
            meta = {"counters_since_delta_snapshot": {"messages": 1}}
            try:
                saver._remember_delta(f"w{w}-{i}", "", meta)
            except Exception as error:
                errors.append(error)

    def one_thread(w: int) -> None:
        for i in range(200):
            saver._remember_delta("shared", "", {"counters_since_delta_snapshot": {f"c{w}-{i}": 1}})

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for target in (fresh_threads, one_thread):
            workers = [threading.Thread(target=target, args=(w,)) for w in range(8)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
    finally:
        sys.setswitchinterval(before)
    assert errors == []
    channels = saver._remember_delta("shared", "", {})
    assert sorted(channels) == sorted(f"c{w}-{i}" for w in range(8) for i in range(200))


async def test_an_int_id_bounds_a_listing_as_its_string(saver: Any) -> None:
    """`get_tuple` and `put` take an int id as its string; `list` with one raised "can only
    concatenate str (not 'int') to str" (in `before`) or compared int with str (in the
    config)."""
    for cid in ("3", "5", "7"):
        await put(saver, "t", {"m": 1}, {"m": cid}, cid=cid)
    five = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": 5}}
    ids = [t.checkpoint["id"] async for t in saver.alist(cfg("t"), before=five)]
    assert ids == ["3"]
    assert [t.checkpoint["id"] async for t in saver.alist(None, before=five)] == ["3"]
    assert [t.checkpoint["id"] async for t in saver.alist(five)] == ["5"]
    seven = {"configurable": {"checkpoint_id": "7"}}
    assert [t.checkpoint["id"] async for t in saver.alist(five, before=seven)] == ["5"]


async def test_a_checkpoint_id_naming_no_checkpoint_is_refused(saver: Any) -> None:
    """A put with id '' (or 0) was stored and returned a config naming it, which names no
    checkpoint: reading it back gave the newest checkpoint instead, and the stored one could
    never be read by its id. Writes to such an id stayed until the thread was deleted."""
    kept = await put(saver, "t", {"m": 1}, {"m": "1"})
    with pytest.raises(ValueError, match=r"checkpoint\['id'\] is '': pass a checkpoint"):
        await put(saver, "t", {"m": 2}, {"m": "2"}, cid="")
    with pytest.raises(ValueError, match=r"checkpoint\['id'\] is 0: pass a checkpoint"):
        await put(saver, "t", {"m": 2}, {"m": "2"}, cid=0)  # type: ignore[arg-type]
    # writes to no checkpoint stayed until the thread was deleted
    for empty in ("", 0):
        named = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": empty}}
        with pytest.raises(ValueError, match=r"\['checkpoint_id'\] is .*names no checkpoint"):
            await saver.aput_writes(named, [("m", 5)], "task")
    assert [t.config async for t in saver.alist(cfg("t"))] == [kept]
    assert (await saver.aget_tuple(kept)).pending_writes == []


async def test_an_empty_config_lists_every_thread_as_none_does(saver: Any) -> None:
    """`list({})` walks every thread, as `list(None)` does, like InMemorySaver and
    PostgresSaver (both test the config for truth); it raised "thread_id is missing"."""
    await put(saver, "a-" + uuid.uuid4().hex, {"m": 1}, {"m": "1"})
    everything = [t.config async for t in saver.alist(None)]
    assert everything and [t.config async for t in saver.alist({})] == everything


async def test_corrupted_payload_names_the_key_and_spares_the_rest(
    saver: Any, client: redis.Redis, prefix: str
) -> None:
    a = await put(saver, "c", {"m": 1}, {"m": "1"})
    b = await put(saver, "c", {"m": 2}, {"m": "2"}, parent=a["configurable"]["checkpoint_id"])
    tk = KeySpace(prefix).thread("c")
    bad = tk.cp("", b["configurable"]["checkpoint_id"])
    client.set(bad, client.get(bad)[:-7])
    with pytest.raises(CorruptDataError) as info:
        await saver.aget_tuple(cfg("c"))
    assert info.value.key == bad and bad in str(info.value)
    assert (await saver.aget_tuple(a)).checkpoint["channel_values"] == {"m": 1}
    client.set(tk.blob("", "m", "1"), b"\x01m\xc1")
    with pytest.raises(CorruptDataError, match="blob"):
        await saver.aget_tuple(a)


@pytest.mark.parametrize("raised", [MemoryError, RecursionError, TimeoutError])
def test_a_serializer_out_of_memory_is_not_reported_as_a_damaged_key(
    redis_url: str, prefix: str, raised: type[BaseException]
) -> None:
    """A MemoryError (or RecursionError, or a timeout a signal raised) out of the serializer
    came back as a CorruptDataError whose message says to delete the key: good data."""
    with RedisSaver(redis_url, prefix=prefix) as saver:
        c = saver.put(cfg("t"), checkpoint({"m": 1}, {"m": "1"}), {}, {"m": "1"})

        class Failing(JsonPlusSerializer):
            def loads_typed(self, data: tuple[str, bytes]) -> Any:
                raise raised("the serializer's own failure")

        reader = RedisSaver(redis_url, prefix=prefix, serde=Failing())
        with reader, pytest.raises(raised, match="serializer's own failure"):
            reader.get_tuple(c)
        assert saver.get_tuple(c) is not None  # the data was good


def cut_in_refs(payload: bytes) -> bytes:
    """The payload cut a few bytes into its third field, the blobs it reads."""
    pos = 1
    for _ in range(2):  # parent id, run
        colon = payload.index(b":", pos)
        pos = colon + 1 + int(payload[pos:colon]) + 1
    return payload[: payload.index(b":", pos) + 6]


def test_a_damaged_payload_keeps_its_blobs_through_prune_and_delete_for_runs(
    redis_url: str, client: redis.Redis, prefix: str
) -> None:
    tk = KeySpace(prefix).thread("d")
    with RedisSaver(redis_url, prefix=prefix) as saver:
        first = saver.put(
            cfg("d"),
            checkpoint({"m": "first", "s": "shared"}, {"m": "1", "s": "1"}),
            {},
            {"m": "1", "s": "1"},
        )
        second = saver.put(
            first,
            checkpoint({"m": "second", "s": "shared"}, {"m": "2", "s": "1"}),
            {"run_id": "drop"},
            {"m": "2"},
        )
        third = saver.put(
            second, checkpoint({"m": "third", "s": "shared"}, {"m": "3", "s": "1"}), {}, {"m": "3"}
        )
        blobs = sorted(client.scan_iter(f"{prefix}:blob:*"))
        # An unreadable payload hides what it references: no blob may go while it is there.
        # garbage early in the payload, or a cut inside the list of blobs it reads
        for damaged, cut, cleanup in ((first, False, lambda: saver.delete_for_runs(["drop"])),
                                      (third, True, lambda: saver.prune(["d"]))):  # fmt: skip
            key = tk.cp("", damaged["configurable"]["checkpoint_id"])
            good = client.get(key)
            client.set(key, cut_in_refs(good) if cut else good[:9] + b"\xff" * 5)
            cleanup()
            client.set(key, good)
            assert sorted(client.scan_iter(f"{prefix}:blob:*")) == blobs
        assert saver.get_tuple(third).checkpoint["channel_values"] == {"m": "third", "s": "shared"}
        assert saver.get_tuple(second) is None and saver.get_tuple(first) is None
        # intact again: the next collection frees what nothing reads
        saver.prune(["d"])
        assert len(list(client.scan_iter(f"{prefix}:blob:*"))) == 2


async def test_foreign_value_under_the_prefix_is_a_clear_error(
    saver: Any, client: redis.Redis, prefix: str
) -> None:
    c = await put(saver, "f", {}, {})
    wr = KeySpace(prefix).thread("f").wr("", c["configurable"]["checkpoint_id"])
    client.set(wr, "not a hash")
    with pytest.raises(WrongTypeError, match="hash"):
        await saver.aget_tuple(c)
    with pytest.raises(WrongTypeError, match="hash"):
        await saver.aput_writes(c, [("x", 1)], "t")
    assert client.get(wr) == b"not a hash"


@pytest.mark.parametrize("kind", ["cp", "wr", "blob", "idx", "keys"])
def test_a_copy_onto_a_foreign_value_writes_nothing(
    redis_url: str, prefix: str, client: redis.Redis, kind: str
) -> None:
    """Every key a copy would write is checked before the first write: a foreign value at
    any of them is a clear error naming it, and the target keeps what it had (nothing)."""
    with RedisSaver(redis_url, prefix=prefix) as saver:
        c1 = saver.put(cfg("src"), checkpoint({"a": 1}, {"a": "1"}), {}, {"a": "1"})
        c2 = saver.put(c1, checkpoint({"a": 2}, {"a": "2"}), {}, {"a": "2"})
        saver.put_writes(c2, [("a", 3)], "task")
        dst, cid = KeySpace(prefix).thread("dst"), c2["configurable"]["checkpoint_id"]
        foreign = {
            "cp": dst.cp("", cid),
            "wr": dst.wr("", cid),
            "blob": dst.blob("", "a", "2"),
            "idx": dst.idx(""),
            "keys": dst.keys(""),
        }[kind]
        client.rpush(foreign, "someone else's")
        with pytest.raises(WrongTypeError, match=re.escape(repr(foreign))):
            saver.copy_thread("src", "dst")
        registry = KeySpace(prefix).threads.encode()
        left = {k for k in keys_under(client, prefix) if b"{src}" not in k and k != registry}
        assert left == {foreign.encode()}
        assert client.lrange(foreign, 0, -1) == [b"someone else's"]
        client.delete(foreign)
        saver.copy_thread("src", "dst")
        assert saver.get_tuple(cfg("dst")).pending_writes == [("task", "a", 3)]


@pytest.mark.parametrize("kind", ["cp", "wr", "blob", "keys"])
def test_a_copy_from_a_foreign_value_is_a_clear_error(
    redis_url: str, prefix: str, client: redis.Redis, kind: str
) -> None:
    """A source key of the wrong type stops a copy with the error a read of it gives, naming
    the key: the copy would read differently from its source (a checkpoint or its writes
    left out, a value taken for absent). The target gets nothing."""
    with RedisSaver(redis_url, prefix=prefix) as saver:
        c1 = saver.put(cfg("src"), checkpoint({"a": 1}, {"a": "1"}), {}, {"a": "1"})
        c2 = saver.put(c1, checkpoint({"a": 2}, {"a": "2"}), {}, {"a": "2"})
        saver.put_writes(c2, [("a", 3)], "task")
        src = KeySpace(prefix).thread("src")
        foreign = {
            "cp": src.cp("", c1["configurable"]["checkpoint_id"]),
            "wr": src.wr("", c2["configurable"]["checkpoint_id"]),
            "blob": src.blob("", "a", "2"),
            "keys": src.keys(""),
        }[kind]
        before = swap_for_list(client, prefix, foreign)
        with pytest.raises(WrongTypeError, match=re.escape(repr(foreign))):
            saver.copy_thread("src", "dst")
        assert dumps_under(client, prefix) == before


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        ("keep_latest", "idx"),
        ("keep_latest", "cp"),  # the checkpoint it removes is read for its run
        ("keep_latest", "run"),  # the run set that checkpoint leaves
        ("delete", "idx"),
        ("delete", "run"),
        ("delete_for_runs", "idx"),
        ("delete_for_runs", "cp"),
        ("delete_for_runs", "run"),
    ],
)
def test_a_call_on_many_threads_changes_none_when_one_holds_a_foreign_value(
    redis_url: str, prefix: str, client: redis.Redis, call: str, kind: str
) -> None:
    """prune and delete_for_runs run a script per thread (on a cluster the threads live in
    different slots): every thread is checked before any changes, so a foreign value in one
    stops the call with a clear error and the other threads are left whole."""
    after = kind == "run" and call != "delete_for_runs" and isinstance(client, RedisCluster)
    ks = KeySpace(prefix)
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for thread in ("good", "bad"):
            old = {"run_id": "other" if thread == "bad" else "r"}
            c1 = saver.put(cfg(thread), checkpoint({"a": 1}, {"a": "1"}), old, {"a": "1"})
            saver.put(c1, checkpoint({"a": 2}, {"a": "2"}), {"run_id": "r"}, {"a": "2"})
        old_cid = c1["configurable"]["checkpoint_id"]
        foreign = {
            "idx": ks.thread("bad").idx(""),
            "cp": ks.thread("bad").cp("", old_cid),
            "run": ks.run("other"),
        }[kind]
        before = swap_for_list(client, prefix, foreign)
        with pytest.raises(WrongTypeError, match=re.escape(repr(foreign))):
            if call == "delete_for_runs":
                saver.delete_for_runs(["r", "other"])
            else:
                saver.prune(["good", "bad"], strategy=call)
        if after:  # on a cluster run sets change after the thread scripts (cluster.md)
            assert client.lrange(foreign, 0, -1) == [b"someone else's"]
        else:
            assert dumps_under(client, prefix) == before


def test_a_stray_registry_or_run_set_member_is_a_clear_error(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """A member no saver wrote, in the registry or in a run set, is a CorruptDataError that
    names the key and the member, and nothing stored changes."""
    ks = KeySpace(prefix)
    with RedisSaver(redis_url, prefix=prefix) as saver:
        c = saver.put(cfg("good"), checkpoint({"m": 1}, {"m": "1"}), {"run_id": "r"}, {"m": "1"})
        if not isinstance(client, RedisCluster):
            client.zadd(ks.threads, {"%ZZ": float("inf")})
            with pytest.raises(CorruptDataError, match=f"{ks.threads}.*'%ZZ'.*Remove that member"):
                list(saver.list(None))
            client.zrem(ks.threads, "%ZZ")
            client.zadd(ks.threads, {b"\xe9": float("inf")})  # not UTF-8
            with pytest.raises(CorruptDataError, match=f"{ks.threads}.*xe9.*not UTF-8"):
                list(saver.list(None))
            client.zrem(ks.threads, b"\xe9")
        client.sadd(ks.run("r"), b"\xe9:x:y")
        with pytest.raises(CorruptDataError, match="not UTF-8"):
            saver.delete_for_runs(["r"])
        client.srem(ks.run("r"), b"\xe9:x:y")
        client.sadd(ks.run("r"), "no-colons")
        with pytest.raises(CorruptDataError, match=f"{ks.run('r')}.*'no-colons'"):
            saver.delete_for_runs(["r"])
        assert saver.get_tuple(c) is not None
        client.srem(ks.run("r"), "no-colons")
        saver.delete_for_runs(["r"])
        assert saver.get_tuple(c) is None


def test_a_stray_namespace_member_is_a_clear_error(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """A member no saver wrote in a thread's namespace zset is a CorruptDataError that names
    the key and the member when a listing meets it, and nothing stored changes."""
    tk = KeySpace(prefix).thread("t")
    with RedisSaver(redis_url, prefix=prefix) as saver:
        c = saver.put(cfg("t"), checkpoint({"m": 1}, {"m": "1"}), {}, {"m": "1"})
        cid = c["configurable"]["checkpoint_id"]
        client.zadd(tk.ns, {b"\xe9": float("inf")})  # not UTF-8
        for listing in ({"configurable": {"thread_id": "t"}}, None):
            with pytest.raises(CorruptDataError, match=f"{re.escape(tk.ns)}.*xe9.*not UTF-8"):
                list(saver.list(listing))
        client.zrem(tk.ns, b"\xe9")
        # A '%' that starts no escape, with a timeline and a payload under it (copied keys).
        client.zadd(tk.ns, {"%ZZ": float("inf")})
        client.zadd(tk.idx_prefix + "%ZZ", {cid: 0})
        client.set(tk.cp_prefix + "%ZZ:" + cid, client.get(tk.cp("", cid)))
        with pytest.raises(CorruptDataError, match=f"{re.escape(tk.ns)}.*'%ZZ'.*Remove that"):
            list(saver.list({"configurable": {"thread_id": "t"}}))
        with pytest.raises(CorruptDataError, match=f"{re.escape(tk.ns)}.*'%ZZ'"):
            list(saver.list(None, filter={"step": 1}))  # the metadata filter's path
        client.zrem(tk.ns, "%ZZ")
        assert [t.config for t in saver.list({"configurable": {"thread_id": "t"}})] == [c]
        assert saver.get_tuple(c).checkpoint["channel_values"] == {"m": 1}


def test_a_timeline_member_that_is_not_utf8_is_a_clear_error(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """A checkpoint id no saver wrote (not UTF-8) with a payload under it, in a thread's
    timeline: `list` and `get_tuple` raised a bare UnicodeDecodeError. It is a
    CorruptDataError naming the timeline and the member, and nothing stored changes."""
    tk = KeySpace(prefix).thread("t")
    with RedisSaver(redis_url, prefix=prefix) as saver:
        c = saver.put(cfg("t"), checkpoint({"m": 1}, {"m": "1"}), {}, {"m": "1"})
        cid = c["configurable"]["checkpoint_id"]
        payload = client.get(tk.cp("", cid))
        client.zadd(tk.idx(""), {b"\xff": 0})  # after every id: the newest
        client.set(tk.cp_prefix.encode() + b":\xff", payload)
        error = f"{re.escape(tk.idx(''))}.*xff.*not UTF-8"
        with pytest.raises(CorruptDataError, match=error):
            list(saver.list({"configurable": {"thread_id": "t"}}))
        with pytest.raises(CorruptDataError, match=error):
            saver.get_tuple({"configurable": {"thread_id": "t"}})
        client.zrem(tk.idx(""), b"\xff")
        assert saver.get_tuple(cfg("t")).config == c


@pytest.mark.standalone
def test_keyspace_of_010_asks_for_the_migration(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    client.hset(f"{prefix}:threads", f"{prefix}:idx:t:", '{"thread": "t", "ns": ""}')
    with RedisSaver(redis_url, prefix=prefix) as saver:
        with pytest.raises(LegacyKeyspaceError, match="migrate"):
            saver.put(cfg("t"), checkpoint({}, {}), {}, {})
    assert client.type(f"{prefix}:threads") == b"hash"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"ttl": 0}, ValueError, "ttl=0"),
        ({"ttl": -5}, ValueError, "ttl"),
        ({"ttl": "1h"}, TypeError, "ttl"),
        ({"ttl": 1e16}, ValueError, "ttl=1e[+]16 is more than 1,000,000,000 seconds"),
        ({"prefix": "a{b}"}, ValueError, "prefix"),
        ({"prefix": ""}, ValueError, "prefix"),
        ({"refresh_on_read": "yes"}, TypeError, "refresh_on_read"),
    ],
)
def test_invalid_arguments_say_what_to_pass(
    redis_url: str, kwargs: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        RedisSaver(redis_url, **kwargs)
    with pytest.raises(error, match=match):
        AsyncRedisSaver(redis_url, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"ttl": t} for t in (0, -5, "1h", True, 1e16, 1e300, float("nan"))]
    + [{"prefix": p} for p in ("", "a*", "lg:", 5, None, b"lg")],
)
def test_every_invalid_ttl_or_prefix_is_a_value_error(
    redis_url: str, kwargs: dict[str, Any]
) -> None:
    for cls in (RedisSaver, AsyncRedisSaver):
        with pytest.raises(ValueError, match="ttl" if "ttl" in kwargs else "prefix"):
            cls(redis_url, **kwargs)


def test_the_longest_ttl_works(redis_url: str, prefix: str, client: redis.Redis) -> None:
    with RedisSaver(redis_url, prefix=prefix, ttl=10**9) as saver:
        c = saver.put(cfg("long"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
        saver.put_writes(c, [("m", 2)], "task")
        assert saver.get_tuple(cfg("long")).pending_writes == [("task", "m", 2)]
    ttls = [client.pttl(k) for k in client.scan_iter(f"{prefix}:*")]
    assert ttls and all(t > (10**9 - 60) * 1000 for t in ttls if t != -1)


def test_a_saver_needs_a_url_or_client() -> None:
    with pytest.raises(ValueError, match="url="):
        RedisSaver()
    with pytest.raises(ValueError, match="decode_responses=False"):
        RedisSaver(client=redis.Redis(decode_responses=True))
    # the pool carries the setting: a client sharing it decodes too, and is refused too
    decoding = redis.ConnectionPool(decode_responses=True)
    with pytest.raises(ValueError, match="pool of its own"):
        RedisSaver(client=redis.Redis(connection_pool=decoding))
    with pytest.raises(ValueError, match="decode_responses=False"):
        AsyncRedisSaver(client=aioredis.Redis(decode_responses=True))


def test_a_decoding_client_is_refused_naming_a_client_its_saver_takes() -> None:
    """The fix for a client (or url= options) with decode_responses=True was
    `client=redis.Redis.from_url(url)` for AsyncRedisSaver too, which refuses a blocking
    client, and it left out protocol=2, which Redis 5 needs (redis-py 8 speaks RESP3)."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    url = "redis://127.0.0.1:6379/0"
    plain, cluster = "redis.Redis.from_url", "redis.cluster.RedisCluster.from_url"
    aplain, acluster = "redis.asyncio.Redis.from_url", "redis.asyncio.cluster.RedisCluster.from_url"
    given: list[tuple[Any, dict[str, Any], str]] = [
        (RedisSaver, {"client": redis.Redis.from_url(url, decode_responses=True)}, plain),
        (AsyncRedisSaver, {"client": aioredis.Redis.from_url(url, decode_responses=True)}, aplain),
        (
            AsyncRedisSaver,
            {"client": AsyncRedisCluster.from_url(url, decode_responses=True)},
            acluster,
        ),
        (RedisSaver, {"url": url, "decode_responses": True}, plain),
        (AsyncRedisSaver, {"url": f"{url}?decode_responses=yes"}, aplain),
        (RedisSaver, {"url": url, "cluster": True, "decode_responses": True}, cluster),
        (AsyncRedisSaver, {"url": url, "cluster": True, "decode_responses": True}, acluster),
    ]
    for cls, kwargs, fix in given:
        with pytest.raises(ValueError, match="decode_responses=False") as info:
            cls(**kwargs)
        assert f"client={fix}(url, protocol=2), " in str(info.value), (cls, kwargs)


@pytest.mark.parametrize("cls", [RedisSaver, AsyncRedisSaver])
def test_a_bad_connection_option_is_refused_at_construction_naming_it(cls: Any) -> None:
    """A misspelt or misplaced keyword failed at the first call, as a bare TypeError from
    redis-py's connection; a cluster client dropped it silently."""
    url = "redis://127.0.0.1:6379/0"
    with pytest.raises(TypeError, match=r"socket_timout=1, .*did you mean socket_timeout="):
        cls(url, socket_timout=1)
    with pytest.raises(TypeError, match=r"sockettimeout='3' in the url.*socket_timeout="):
        cls(f"{url}?sockettimeout=3")
    with pytest.raises(TypeError, match=r"pass client=redis.Redis\(connection_pool=pool\)"):
        cls(url, connection_pool=redis.ConnectionPool())
    with pytest.raises(TypeError, match="read_from_replicas=True, .*pass cluster=True"):
        cls(url, read_from_replicas=True)
    # with cluster=True a typo is caught as well; nothing here connects
    with pytest.raises(TypeError, match="did you mean socket_timeout="):
        cls(url, cluster=True, socket_timout=1)
    with pytest.raises(TypeError, match="cluster must be True, False or None .*got str 'no'"):
        cls(url, cluster="no")  # a cluster client, which failed to connect
    cls(url, cluster=0)  # cluster=int(os.environ[...]) works as before
    if cls is AsyncRedisSaver:  # the blocking client takes it, and connects at once
        with pytest.raises(TypeError, match="an option of the client.* pass client="):
            cls(url, single_connection_client=True)
    for good in ({"socket_timeout": 1, "max_connections": 5}, {"health_check_interval": 3}):
        cls(url, **good)
    cls(f"{url}?socket_timeout=3&health_check_interval=2")
    cls("unix:///tmp/redis.sock?db=3")
    cls("rediss://127.0.0.1:6380/2", ssl_cert_reqs="none")
    # options a client or pool takes itself, never a connection
    cache_config = pytest.importorskip("redis.cache").CacheConfig  # redis-py 5.1+
    if cls is RedisSaver:
        cls(url, single_connection_client=False)
        cls(url, protocol=3, cache_config=cache_config())
    else:  # redis.asyncio's connections refuse it at the first call
        with pytest.raises(TypeError, match="cache_config="):
            cls(url, protocol=3, cache_config=cache_config())


@contextlib.contextmanager
def only_ctrl_c_handled() -> Iterator[None]:
    """Python's own signal handling, for the duration: its SIGINT handler (a run started in
    the background of a shell, or under nohup, ignores SIGINT), and no Python handler of any
    other signal (the test harness makes SIGTERM raise KeyboardInterrupt, so that its
    servers stop)."""
    saved = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    for number in signal.valid_signals():
        handler = signal.getsignal(number)
        if number != signal.SIGINT and callable(handler):
            saved[number] = handler
            signal.signal(number, signal.SIG_DFL)
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


class InterruptedOnce(JsonPlusSerializer):
    """Decodes as JsonPlusSerializer, except that a Ctrl-C lands in the first decode's
    ext_hook: ormsgpack reports it as ValueError('ext_hook failed'), as it does on damaged
    bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        if self.armed and data[0] == "msgpack":

            def hook(code: int, payload: bytes) -> Any:
                self.armed = False  # the first value holding an ext type
                raise KeyboardInterrupt

            ormsgpack.unpackb(data[1], ext_hook=hook)
        return super().loads_typed(data)


def test_ctrl_c_while_a_value_is_decoded_is_an_interrupt_not_damage(
    redis_url: str, prefix: str
) -> None:
    """A Ctrl-C inside the serializer's ext_hook was reported as a damaged key, with the
    advice to delete it; found by a review of the CLI (`plainredis migrate`, `show`)."""
    serde = InterruptedOnce()
    saver = RedisSaver(redis_url, prefix=prefix, serde=serde)
    cp = empty_checkpoint()
    cp["channel_values"] = {"when": datetime.datetime(2026, 12, 5)}  # an ext type
    cp["channel_versions"] = {"when": 1}
    saver.put(cfg("t"), cp, {}, {"when": 1})
    serde.armed = True
    with only_ctrl_c_handled(), pytest.raises(KeyboardInterrupt):
        saver.get_tuple(cfg("t"))
    assert not serde.armed
    got = saver.get_tuple(cfg("t"))  # the key is sound
    assert got is not None and got.checkpoint["channel_values"]["when"].day == 5
    # the migration's decoding of 0.1.0 values, likewise
    serde.armed = True
    with only_ctrl_c_handled(), pytest.raises(KeyboardInterrupt):
        _migrate._loads(serde, serde.dumps_typed(cp["channel_values"]["when"]), "lg:blob:x")
    # Off the main thread no Ctrl-C lands (a signal handler's timeout may, in the main thread
    # with a SIGALRM handler): not an interrupt of the program, and still no damage.
    raised: list[BaseException] = []

    def read() -> None:
        try:
            saver.get_tuple(cfg("t"))
        except BaseException as error:
            raised.append(error)

    serde.armed = True
    worker = threading.Thread(target=read)
    worker.start()
    worker.join()
    assert len(raised) == 1 and type(raised[0]) is PlainRedisError
    assert "was interrupted" in str(raised[0]) and "the stored bytes are sound" in str(raised[0])
    saver.close()


def test_a_decode_interrupted_by_a_signal_handler_of_its_own_is_no_ctrl_c() -> None:
    """Only Ctrl-C may become `KeyboardInterrupt`: under `asyncio.run` (whose SIGINT
    handler raises it on a second Ctrl-C) it is; with a Python handler of another signal (a
    SIGTERM's exit, an alarm's timeout) it is not, since that handler may have raised."""

    async def inside() -> bool:
        return _core._only_ctrl_c()

    with only_ctrl_c_handled():
        assert _core._only_ctrl_c() and asyncio.run(inside())
        signal.signal(signal.SIGTERM, lambda number, frame: None)
        try:
            assert not _core._only_ctrl_c()
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert _core._only_ctrl_c()


@pytest.mark.parametrize("cls", [RedisSaver, AsyncRedisSaver])
def test_a_url_whose_database_is_not_a_number_is_refused(cls: Any) -> None:
    """redis-py reads 'redis://host/abc' as database 0: a saver would share db 0."""
    for url in ("redis://127.0.0.1:6379/abc", "redis://127.0.0.1:6379/1x", "rediss://h/-1"):
        with pytest.raises(
            ValueError, match=r"url names database .*not a number: a Redis database is a number"
        ):
            cls(url)
    for url in ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379/", "redis://127.0.0.1/15"):
        cls(url)
    # what redis-py reads right: a query's db wins over the path, the path is unquoted
    cls("redis://127.0.0.1:6379/abc?db=2")
    cls("redis://127.0.0.1:6379/%31")
    # a raw '/' in a password cuts the URL: said so, without echoing what follows it
    with pytest.raises(ValueError, match="'/' in its username or password: write it as %2F") as e:
        cls("redis://user:top/secret@127.0.0.1:6379/0")
    assert "secret" not in str(e.value)


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_a_client_on_another_encoding_is_refused(encoding: str) -> None:
    """Keys are UTF-8: a client encoding them otherwise would build other keys for the same
    thread (and registry entries other savers cannot read)."""
    for cls, client_cls in ((RedisSaver, redis.Redis), (AsyncRedisSaver, aioredis.Redis)):
        with pytest.raises(ValueError, match=f"encoding='utf-8', got encoding='{encoding}'"):
            cls(client=client_cls(encoding=encoding))
    for same in ("utf-8", "UTF8", "utf_8"):
        RedisSaver(client=redis.Redis(encoding=same))
    # nor may URL options, given as arguments or in the URL's query
    url = "redis://127.0.0.1:6379/0"
    for cls in (RedisSaver, AsyncRedisSaver):
        with pytest.raises(ValueError, match=f"got encoding='{encoding}'"):
            cls(url, encoding=encoding)
        with pytest.raises(ValueError, match=f"got encoding='{encoding}'"):
            cls(f"{url}?encoding={encoding}")
        with pytest.raises(ValueError, match="decode_responses=False"):
            cls(url, decode_responses=True)
        with pytest.raises(ValueError, match="decode_responses=False"):
            cls(f"{url}?decode_responses=yes")
        cls(f"{url}?decode_responses=false", encoding="utf8")


@pytest.mark.parametrize("errors", ["replace", "ignore", "surrogateescape"])
def test_a_client_that_encodes_ids_lossily_is_refused(errors: str) -> None:
    """With encoding_errors='replace' (or 'ignore'), ids UTF-8 cannot encode became the key
    of another id: thread 'user\\ud800' read what 'user\\udfff' (or 'user') stored."""
    url = "redis://127.0.0.1:6379/0"
    for cls, client_cls in ((RedisSaver, redis.Redis), (AsyncRedisSaver, aioredis.Redis)):
        with pytest.raises(ValueError, match=f"encoding_errors='strict', got .*'{errors}'"):
            cls(client=client_cls(encoding_errors=errors))
        with pytest.raises(ValueError, match=f"encoding_errors='strict', got .*'{errors}'"):
            cls(url, encoding_errors=errors)
        with pytest.raises(ValueError, match=f"encoding_errors='strict', got .*'{errors}'"):
            cls(f"{url}?encoding_errors={errors}")
        cls(url, encoding_errors="strict")


def test_an_id_utf8_cannot_encode_is_refused_naming_it(sync_saver: RedisSaver) -> None:
    """A lone surrogate (a JSON escape like \\ud800 makes one) cannot be in a UTF-8 key: a
    ValueError names the id and the field, before anything is sent."""
    lone = "user\ud800"
    with pytest.raises(ValueError, match=r"thread_id.*'user\\ud800'.*position 4"):
        sync_saver.put(cfg(lone), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
    with pytest.raises(ValueError, match="checkpoint_ns"):
        sync_saver.get_tuple(cfg("t", ns=lone))
    with pytest.raises(ValueError, match="delete_thread"):
        sync_saver.delete_thread(lone)
    with pytest.raises(ValueError, match="copy_thread"):
        sync_saver.copy_thread("t", lone)
    assert sync_saver.get_tuple(cfg("user")) is None


def _bad_calls() -> list[tuple[str, Any, type, str]]:
    good = checkpoint({"m": 1}, {"m": 1}, "c-bad")
    no_id = {k: v for k, v in good.items() if k != "id"}
    unserializable = checkpoint({"m": object()}, {"m": 1}, "c-bad")
    put = "put"
    return [
        (put, ({**good, "id": None}, {}, {}), ValueError, r"checkpoint\['id'\] is None"),
        (put, (no_id, {}, {}), ValueError, r"checkpoint\['id'\] is missing.*empty_checkpoint"),
        (put, ({**good, "id": "c\ud800"}, {}, {}), ValueError, r"checkpoint\['id'\].*surrogate"),
        (put, ([1, 2], {}, {}), TypeError, "checkpoint must be a dict"),
        (put, ({**good, "channel_versions": None}, {}, {}), TypeError, "channel_versions"),
        (put, (good, {}, None), TypeError, r"new_versions must be a dict.*pass \{\}"),
        (put, (good, None, {}), TypeError, r"metadata must be a dict"),
        (put, ({**good, "channel_versions": {1: 1}}, {}, {}), TypeError, "not a str: int 1"),
        (put, ({**good, "channel_versions": {"\ud800": 1}}, {}, {}), ValueError, "channel name"),
        (put, (good, {"run_id": "r\ud800"}, {}), ValueError, r"metadata\['run_id'\]"),
        (put, (good, {"x": object()}, {}), TypeError, "the metadata cannot be serialized"),
        (put, (unserializable, {}, {"m": 1}), TypeError, "value of channel 'm' cannot be seria"),
        ("put_writes", ([("a", 1, 2)], "t1"), TypeError, r"write #0 must be a \(channel"),
        ("put_writes", ({"a": 1}, "t1"), TypeError, "writes must be a sequence"),
        ("put_writes", ([("\ud800", 1)], "t1"), ValueError, "write #0's channel"),
        ("put_writes", ([("a", 1)], "t\ud800"), ValueError, "task_id"),
        ("put_writes", ([("a", object())], "t1"), TypeError, "value written to 'a' cannot be"),
        ("get_tuple", (), ValueError, r"get_tuple: config\['configurable'\]\['checkpoint_id'\]"),
        ("list", (), ValueError, r"list: before: config"),
    ]


@pytest.mark.parametrize(
    ("method", "args", "error", "match"),
    _bad_calls(),
    ids=lambda v: v if isinstance(v, str) and len(v) < 12 else None,
)
def test_bad_arguments_are_refused_naming_them_and_store_nothing(
    sync_saver: RedisSaver, method: str, args: Any, error: type, match: str
) -> None:
    """Arguments LangGraph never passes are refused before anything is sent, with what to
    pass (they raised KeyError, AttributeError or the encoder's bare errors)."""
    stored = sync_saver.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
    before = sync_saver.get_tuple(cfg("t"))
    with pytest.raises(error, match=match):
        if method == "put":
            sync_saver.put(cfg("t"), *args)
        elif method == "put_writes":
            sync_saver.put_writes(stored, *args)
        elif method == "get_tuple":
            sync_saver.get_tuple(cfg("t", cid="c\ud800"))
        else:
            list(sync_saver.list(cfg("t"), before=cfg("t", cid="c\ud800")))
    assert sync_saver.get_tuple(cfg("t")) == before
    assert len(list(sync_saver.list(cfg("t")))) == 1


def test_writes_given_as_a_generator_are_all_stored(sync_saver: RedisSaver) -> None:
    """The checks read the writes before the encoding does: a generator was spent by them
    and nothing was stored (InMemorySaver stores it)."""
    stored = sync_saver.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
    sync_saver.put_writes(stored, ((ch, v) for ch, v in [("a", 1), ("b", 2)]), "task")
    tup = sync_saver.get_tuple(cfg("t"))
    assert tup is not None
    assert [(task, ch, v) for task, ch, v in tup.pending_writes] == [
        ("task", "a", 1),
        ("task", "b", 2),
    ]


# -- the two classes -------------------------------------------------------------------


async def test_wrong_side_names_the_class_to_use(
    sync_saver: RedisSaver, async_saver: AsyncRedisSaver
) -> None:
    with pytest.raises(NotImplementedError, match="AsyncRedisSaver"):
        await sync_saver.aget_tuple(cfg("x"))
    with pytest.raises(NotImplementedError, match="RedisSaver"):
        async_saver.get_tuple(cfg("x"))
    with pytest.raises(NotImplementedError, match="RedisSaver"):
        async_saver.list(None)


def test_sync_and_async_classes_stay_parallel() -> None:
    """Same methods in the same order; only the calling style differs."""
    api = {
        "get_tuple",
        "list",
        "put",
        "put_writes",
        "delete_thread",
        "delete_for_runs",
        "copy_thread",
        "prune",
        "get_delta_channel_history",
        "reindex",
        "close",
        "setup",
    }
    renames = {"__aenter__": "__enter__", "__aexit__": "__exit__"}

    def as_sync(name: str) -> str:
        if name in renames:
            return renames[name]
        if name.startswith("a") and name[1:] in api:
            return name[1:]
        return "a" + name if name in api else name

    def names(cls: type) -> list[str]:  # its methods: not its connection state (Shared)
        return [
            n
            for n, v in vars(cls).items()
            # __slotnames__: cached on the class by the first copy.copy of an instance
            if not n.startswith("__doc") and n != "__slotnames__" and not isinstance(v, Shared)
        ]

    sync_names = names(RedisSaver)
    async_names = [as_sync(n) for n in names(AsyncRedisSaver)]
    assert async_names == sync_names


async def test_one_thread_written_by_one_class_is_read_by_the_other(
    sync_saver: RedisSaver, async_saver: AsyncRedisSaver
) -> None:
    c = await asyncio.to_thread(
        sync_saver.put, cfg("mixed"), checkpoint({"m": [1]}, {"m": 1}), {}, {"m": 1}
    )
    await async_saver.aput_writes(c, [("m", 2)], "task")
    c2 = await async_saver.aput(c, checkpoint({"m": [1, 2]}, {"m": 2}), {}, {"m": 2})
    tup = await asyncio.to_thread(sync_saver.get_tuple, cfg("mixed"))
    assert tup.config == c2 and tup.checkpoint["channel_values"] == {"m": [1, 2]}
    assert (await asyncio.to_thread(sync_saver.get_tuple, c)).pending_writes == [("task", "m", 2)]


def test_a_passed_client_is_reused_and_left_open(client: redis.Redis, prefix: str) -> None:
    # Connection arguments beside a client are ignored: RESP3 would fail on Redis 5, and a
    # 1 µs timeout anywhere.
    saver = RedisSaver(client=client, prefix=prefix, protocol=3, socket_timeout=1e-6)
    assert saver.client is client
    saver.put(cfg("p"), checkpoint({}, {}), {}, {})
    saver.close()
    assert client.ping()


async def test_a_passed_async_client_is_reused_and_left_open(
    redis_url: str, redis_kind: str, prefix: str
) -> None:
    cluster = redis_kind.endswith("-cluster")
    factory = aioredis.RedisCluster if cluster else aioredis.Redis
    aclient = factory.from_url(redis_url, protocol=2)
    saver = AsyncRedisSaver(client=aclient, prefix=prefix, protocol=3, socket_timeout=1e-6)
    assert saver.client is aclient
    c = await saver.aput(cfg("p"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
    assert (await saver.aget_tuple(c)).checkpoint["channel_values"] == {"m": 1}
    await saver.aclose()
    assert await aclient.ping()
    await aclient.aclose()


@pytest.mark.parametrize("wrap", [None, Forwarding, Transparent])
def test_a_client_of_the_other_style_is_refused_naming_the_saver_to_use(
    wrap: Any,
) -> None:
    """A wrapper of a `redis.asyncio` client was taken by RedisSaver, whose first call then
    failed with "cannot unpack non-iterable coroutine object"; AsyncRedisSaver refused it
    saying to use RedisSaver "for a blocking client". Nothing here connects."""
    url = "redis://127.0.0.1:6379/0"

    def given(client: Any) -> Any:
        return client if wrap is None else wrap(client)

    with pytest.raises(TypeError, match="RedisSaver needs a blocking redis client, .*AsyncR"):
        RedisSaver(client=given(aioredis.Redis.from_url(url)))
    with pytest.raises(TypeError, match="AsyncRedisSaver needs a redis.asyncio client, .*use R"):
        AsyncRedisSaver(client=given(redis.Redis.from_url(url)))


@pytest.mark.parametrize("wrap", [Forwarding, Transparent])
def test_a_wrapper_of_a_client_serves_the_saver(
    redis_url: str, redis_kind: str, prefix: str, wrap: Any
) -> None:
    """A wrapper that hands attributes on, around a cluster client, was taken for a
    standalone client: the first put failed, its keys in more than one slot."""
    factory = RedisCluster if redis_kind.endswith("-cluster") else redis.Redis
    client = factory.from_url(redis_url, protocol=2)
    saver = RedisSaver(client=wrap(client), prefix=prefix)
    c = saver.put(cfg("w"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
    saver.put_writes(c, [("m", 2)], "task")
    tup = saver.get_tuple(cfg("w"))
    assert tup.checkpoint["channel_values"] == {"m": 1}
    assert tup.pending_writes == [("task", "m", 2)]
    assert [t.config for t in saver.list(cfg("w"))] == [c]
    saver.delete_thread("w")
    assert saver.get_tuple(cfg("w")) is None
    saver.close()
    assert client.ping()
    client.close()


@pytest.mark.parametrize("wrap", [Forwarding, Transparent])
async def test_a_wrapper_of_an_async_client_serves_the_async_saver(
    redis_url: str, redis_kind: str, prefix: str, wrap: Any
) -> None:
    """A wrapper of a `redis.asyncio` client was refused, the message saying to use
    RedisSaver "for a blocking client"."""
    factory = aioredis.RedisCluster if redis_kind.endswith("-cluster") else aioredis.Redis
    aclient = factory.from_url(redis_url, protocol=2)
    saver = AsyncRedisSaver(client=wrap(aclient), prefix=prefix)
    c = await saver.aput(cfg("w"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
    await saver.aput_writes(c, [("m", 2)], "task")
    tup = await saver.aget_tuple(cfg("w"))
    assert tup.checkpoint["channel_values"] == {"m": 1}
    assert tup.pending_writes == [("task", "m", 2)]
    assert [t.config async for t in saver.alist(cfg("w"))] == [c]
    await saver.adelete_thread("w")
    assert await saver.aget_tuple(cfg("w")) is None
    await saver.aclose()
    assert await aclient.ping()
    await aclient.aclose()


async def test_async_resp3_on_request(server_pool: Any, prefix: str) -> None:
    async with AsyncRedisSaver(server_pool.get("redis-7"), prefix=prefix, protocol=3) as saver:
        assert saver.client.connection_pool.connection_kwargs["protocol"] == 3
        c = await saver.aput(cfg("r3"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
        await saver.aput_writes(c, [("m", 2)], "t")
        tup = await saver.aget_tuple(c)
        assert tup.checkpoint["channel_values"] == {"m": 1}
        assert tup.pending_writes == [("t", "m", 2)]
        listed = [t.checkpoint["id"] async for t in saver.alist(None)]
        assert listed == [c["configurable"]["checkpoint_id"]]
        await saver.adelete_thread("r3")
        assert await saver.aget_tuple(c) is None


def test_resp3_on_request(server_pool: Any, prefix: str) -> None:
    with RedisSaver(server_pool.get("redis-7"), prefix=prefix, protocol=3) as saver:
        assert saver.client.connection_pool.connection_kwargs["protocol"] == 3
        c = saver.put(cfg("r3"), checkpoint({"m": 1}, {"m": 1}), {}, {"m": 1})
        saver.put_writes(c, [("m", 2)], "t")
        tup = saver.get_tuple(c)
        assert tup.checkpoint["channel_values"] == {"m": 1} and tup.pending_writes == [
            ("t", "m", 2)
        ]
        assert [t.checkpoint["id"] for t in saver.list(None)] == [
            c["configurable"]["checkpoint_id"]
        ]


def test_a_read_by_id_with_refresh_keeps_the_newest_checkpoint_as_long(
    redis_url: str, prefix: str, client: Any
) -> None:
    """A read of an older checkpoint by id (`get_state` at a checkpoint_id) refreshed only
    that one: it outlived the newest, and once the newest expired the thread read as rolled
    back to it. It now refreshes the timeline's newest too (its run set as well)."""
    ttl = 60
    ks = KeySpace(prefix)
    tk = ks.thread("t")
    with RedisSaver(redis_url, prefix=prefix, ttl=ttl, refresh_on_read=True) as saver:
        c1 = saver.put(cfg("t"), checkpoint({"n": 1}, {"n": "1"}), {"run_id": "r1"}, {"n": "1"})
        c2 = saver.put(c1, checkpoint({"n": 2}, {"n": "2"}), {"run_id": "r2"}, {"n": "2"})
        time.sleep(1.0)  # the newest's keys are a second older than a refresh would make them
        got = saver.get_tuple(c1)
        assert got is not None and got.checkpoint["channel_values"] == {"n": 1}
        newest = c2["configurable"]["checkpoint_id"]
        keys = [tk.cp("", newest), tk.blob("", "n", "2"), ks.run("r2")]
        left = [client.pttl(k) for k in keys]
        assert all(ms > ttl * 1000 - 500 for ms in left), dict(zip(keys, left, strict=True))
        assert saver.get_tuple(cfg("t")).config["configurable"]["checkpoint_id"] == newest


async def test_prune_keeps_the_writes_of_a_checkpoint_still_being_put(saver: Any) -> None:
    """A graph puts a step's writes in the background, so they can land before the
    checkpoint they belong to: keep_latest deleted them as writes of no checkpoint, and the
    checkpoint came without them (a resumed run redid those tasks). Such writes of a newer
    checkpoint stay; older ones of no checkpoint go."""
    parent = None
    ids = []
    for _ in range(3):
        cp = empty_checkpoint()
        ids.append(cp["id"])
        config = await saver.aput(cfg("t", cid=parent), cp, {}, {})
        parent = config["configurable"]["checkpoint_id"]
    orphan, landing = empty_checkpoint(), empty_checkpoint()
    orphan["id"] = ids[0][:-1] + ("0" if ids[0][-1] != "0" else "1")  # older, never put
    await saver.aput_writes(cfg("t", cid=orphan["id"]), [("ch", "lost")], "task0")
    await saver.aput_writes(cfg("t", cid=landing["id"]), [("ch", "kept")], "task1")
    await saver.aprune(["t"], strategy="keep_latest")
    await saver.aput(cfg("t", cid=parent), landing, {}, {})
    got = await saver.aget_tuple(cfg("t"))
    assert got is not None and got.checkpoint["id"] == landing["id"]
    assert got.pending_writes == [("task1", "ch", "kept")]
    await saver.aput(cfg("t", cid=landing["id"]), orphan, {}, {})
    old = await saver.aget_tuple(cfg("t", cid=orphan["id"]))
    assert old is not None and old.pending_writes == []


def test_delete_for_runs_keeps_a_checkpoint_the_run_wrote_meanwhile_findable(
    redis_url: str, prefix: str
) -> None:
    """delete_for_runs read a run set, removed those checkpoints, then deleted the whole set:
    a checkpoint the run put in between stayed, and no later delete_for_runs of the run
    could find it. Only the members read leave the set now."""
    with (
        RedisSaver(redis_url, prefix=prefix) as saver,
        RedisSaver(redis_url, prefix=prefix) as other,
    ):
        saver.put(cfg("t"), checkpoint({"m": 1}, {"m": 1}), {"run_id": "R"}, {"m": 1})
        steps = saver._delete_for_runs_steps(["R"])
        reply = saver._run(next(steps))  # the run set's members, read
        other.put(cfg("t2"), checkpoint({"m": 9}, {"m": 9}), {"run_id": "R"}, {"m": 9})
        with contextlib.suppress(StopIteration):
            while True:
                reply = saver._run(steps.send(reply))
        assert saver.get_tuple(cfg("t")) is None
        assert saver.get_tuple(cfg("t2")) is not None  # written after the read: kept
        saver.delete_for_runs(["R"])
        assert saver.get_tuple(cfg("t2")) is None


@pytest.mark.standalone
def test_delete_for_runs_keeps_a_checkpoint_the_run_put_again_findable(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """The run putting a checkpoint again (a retried put) after delete_for_runs removed it,
    and before the call took the members it read out of the run set: the checkpoint stayed,
    its member gone, and no later delete_for_runs of the run could find it (its keys stayed
    for ever). On a standalone server the member leaves in the script that removes its
    checkpoint. (On a cluster the run sets live in other slots: documented.)"""
    with (
        RedisSaver(redis_url, prefix=prefix) as saver,
        RedisSaver(redis_url, prefix=prefix) as other,
    ):
        cp = checkpoint({"m": 1}, {"m": 1})
        saver.put(cfg("t"), cp, {"run_id": "R"}, {"m": 1})
        steps = saver._delete_for_runs_steps(["R"])
        reply = saver._run(next(steps))  # the run set's members, read
        reply = saver._run(steps.send(reply))  # their checkpoints removed
        other.put(cfg("t"), cp, {"run_id": "R"}, {"m": 1})  # the run puts it again
        with contextlib.suppress(StopIteration):
            while True:
                reply = saver._run(steps.send(reply))
        assert saver.get_tuple(cfg("t")) is not None
        saver.delete_for_runs(["R"])
        assert saver.get_tuple(cfg("t")) is None
        assert set(client.scan_iter(match=f"{prefix}:*")) <= {
            f"{prefix}:threads".encode()  # the registry, on a standalone server
        }


def test_delete_for_runs_keeps_a_checkpoint_another_run_put_again_meanwhile(
    redis_url: str, prefix: str
) -> None:
    """delete_for_runs removed every checkpoint its run sets named, also one that another run
    had put again (same id) since they were read: that checkpoint is the other run's now,
    and stays, as the reference's delete_for_runs (by the stored run id) keeps it."""
    with (
        RedisSaver(redis_url, prefix=prefix) as saver,
        RedisSaver(redis_url, prefix=prefix) as other,
    ):
        cp = checkpoint({"m": 1}, {"m": 1})
        saver.put(cfg("t"), cp, {"run_id": "R"}, {"m": 1})
        saver.put(cfg("u"), checkpoint({"m": 2}, {"m": 1}), {"run_id": "R"}, {"m": 1})
        steps = saver._delete_for_runs_steps(["R"])
        reply = saver._run(next(steps))  # the run set's members, read
        other.put(cfg("t"), cp, {"run_id": "R2"}, {"m": 1})  # the same id, run R2's now
        with contextlib.suppress(StopIteration):
            while True:
                reply = saver._run(steps.send(reply))
        kept = saver.get_tuple(cfg("t"))
        assert kept is not None and kept.metadata["run_id"] == "R2"
        assert saver.get_tuple(cfg("u")) is None
        saver.delete_for_runs(["R2"])
        assert saver.get_tuple(cfg("t")) is None
