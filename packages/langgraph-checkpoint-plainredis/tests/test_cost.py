"""Cost, counted exactly: round trips and commands per operation, for both classes.

Standalone servers. On a cluster a run set is in its own hash slot, so a put with a run id
first adds the checkpoint to it, and a delete then removes its members: one more round trip
each (the cluster keeps no registry).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint

from agentstate_testkit.savers import (
    RoundTrips,
    SyncAsAsync,
    counting_async_client,
    counting_client,
)
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver
from langgraph_checkpoint_plainredis._keys import KeySpace
from langgraph_checkpoint_plainredis._scripts import _PRELUDE, SCRIPTS, _definitions

pytestmark = pytest.mark.standalone


@pytest.fixture(params=["async", "sync"])
async def counted(
    request: pytest.FixtureRequest, redis_url: str, prefix: str
) -> AsyncIterator[tuple[Any, RoundTrips]]:
    if request.param == "async":
        aclient, counter = counting_async_client(redis_url)
        yield AsyncRedisSaver(client=aclient, prefix=prefix), counter
        await aclient.aclose()
    else:
        client, counter = counting_client(redis_url)
        yield SyncAsAsync(RedisSaver(client=client, prefix=prefix)), counter
        client.close()


def cfg(thread: str, cid: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if cid:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


async def grow(saver: Any, thread: str, n: int) -> list[dict[str, Any]]:
    configs = []
    parent: str | None = None
    for step in range(n):
        cp = empty_checkpoint()
        cp["id"] = f"{step:06d}"
        cp["channel_values"] = {"m": step, "other": "x"}
        cp["channel_versions"] = {"m": step + 1, "other": 1}
        new = {"m": step + 1, "other": 1} if step == 0 else {"m": step + 1}
        c = await saver.aput(cfg(thread, parent), cp, {"step": step}, new)
        parent = c["configurable"]["checkpoint_id"]
        configs.append(c)
    return configs


async def warm(saver: Any) -> None:
    """Loads every script once, so counts below are the steady state."""
    await grow(saver, "warm", 2)
    await saver.aput_writes(cfg("warm", "000001"), [("x", 1)], "t")
    await saver.aget_tuple(cfg("warm"))
    [t async for t in saver.alist(cfg("warm"), limit=1)]
    await saver.adelete_thread("none")
    await saver.acopy_thread("warm", "warm2")
    await saver.aprune(["warm2"])


async def test_each_operation_costs_a_constant_number_of_round_trips(
    counted: tuple[Any, RoundTrips],
) -> None:
    saver, counter = counted
    await warm(saver)
    for n in (3, 300):
        thread = f"t{n}"
        configs = await grow(saver, thread, n)
        with counter.measure():
            await saver.aput(configs[-1], empty_checkpoint(), {}, {"m": 999})
        assert counter.round_trips == 1
        with counter.measure():
            await saver.aput_writes(configs[-1], [("a", 1), ("__interrupt__", 2)], "task")
        assert counter.round_trips == 1
        with counter.measure():
            assert await saver.aget_tuple(cfg(thread)) is not None
        assert counter.round_trips == 1
        with counter.measure():
            assert await saver.aget_tuple(configs[0]) is not None
        assert counter.round_trips == 1
        with counter.measure():
            assert len([t async for t in saver.alist(cfg(thread), limit=10)]) == min(10, n + 1)
        assert counter.round_trips == 1
        with counter.measure():
            before = cfg(thread, configs[n // 2]["configurable"]["checkpoint_id"])
            assert len([t async for t in saver.alist(cfg(thread), before=before, limit=1)]) == 1
        assert counter.round_trips == 1
        with counter.measure():
            await saver.acopy_thread(thread, thread + "-copy")
        assert counter.round_trips == 2
        with counter.measure():
            await saver.aprune([thread + "-copy"], strategy="keep_latest")
        assert counter.round_trips == 2  # the newest metadata first: it names DeltaChannels
        with counter.measure():
            await saver.adelete_thread(thread)
        assert counter.round_trips == 1


async def test_delete_for_runs_takes_two_round_trips_and_one_more_for_several_threads(
    counted: tuple[Any, RoundTrips],
) -> None:
    """Read the run sets, then a script per thread removing its checkpoints and their
    run-set members (three round trips before: the members left in a third); with several
    threads, the check-only twins of those scripts first."""
    saver, counter = counted

    async def written(run: str, threads: int) -> list[str]:
        names = [f"{run}-{t}" for t in range(threads)]
        for name in names:
            await saver.aput(cfg(name), empty_checkpoint(), {"run_id": run}, {})
        return names

    for run, threads in (("warm", 2), ("one", 1), ("three", 3)):
        names = await written(run, threads)
        with counter.measure():
            await saver.adelete_for_runs([run])
        if run != "warm":  # the scripts loaded
            assert counter.round_trips == (2 if threads == 1 else 3)
        assert [await saver.aget_tuple(cfg(name)) for name in names] == [None] * threads


def test_delete_for_runs_takes_each_member_out_of_its_run_set_once(
    redis_url: str, prefix: str
) -> None:
    """Removing a checkpoint takes its member out of its run set; the script does not take
    it out again (it did for every checkpoint it removed: twice the SREMs)."""
    saver = RedisSaver(redis_url, prefix=prefix)
    admin = redis.Redis.from_url(redis_url, protocol=2)
    for step in range(2):  # warm: the scripts loaded
        saver.put(cfg(f"warm-{step}"), empty_checkpoint(), {"run_id": "warm"}, {})
    saver.delete_for_runs(["warm"])
    parent: str | None = None
    for step in range(5):
        cp = empty_checkpoint()
        cp["id"] = f"{step:06d}"
        parent = saver.put(cfg("t", parent), cp, {"run_id": "r"}, {})["configurable"][
            "checkpoint_id"
        ]
    before = command_calls(admin).get("srem", 0)
    saver.delete_for_runs(["r"])
    assert command_calls(admin).get("srem", 0) - before == 5
    assert saver.get_tuple(cfg("t")) is None
    assert admin.exists(KeySpace(prefix).run("r")) == 0
    saver.close()
    admin.close()


def test_a_list_reply_carries_each_blob_once(redis_url: str, prefix: str) -> None:
    """Neighbouring checkpoints share blobs: a list reply sends each one once, and the
    tuples still get objects of their own."""
    saver = RedisSaver(redis_url, prefix=prefix)
    parent: str | None = None
    for step in range(6):  # "big" changes every other step, "static" never
        cp = empty_checkpoint()
        cp["id"] = f"{step:06d}"
        cp["channel_values"] = {"big": ["x" * 2000, step // 2], "static": "s"}
        cp["channel_versions"] = {"big": step // 2 + 1, "static": 1}
        new: dict[str, Any] = {"big": step // 2 + 1} if step % 2 == 0 else {}
        if step == 0:
            new["static"] = 1
        c = saver.put(cfg("t", parent), cp, {"step": step}, new)
        parent = c["configurable"]["checkpoint_id"]
    replies: list[Any] = []
    run = saver._run

    def recording(plan: Any) -> list[Any]:
        replies.extend(run(plan))
        return replies[-1:]

    saver._run = recording  # type: ignore[method-assign]
    tuples = list(saver.list(cfg("t"), limit=10))
    saver._run = run  # type: ignore[method-assign]
    assert len(replies) == 1 and len(tuples) == 6
    values = [v for _, entry in replies[0][1] for v in entry[3]]
    assert len(values) == 12  # two refs per checkpoint
    assert sum(1 for v in values if v) == 4  # big at versions 1, 2, 3, and static once
    assert [t.checkpoint["channel_values"]["big"][1] for t in tuples] == [2, 2, 1, 1, 0, 0]
    first, second = (t.checkpoint["channel_values"]["big"] for t in tuples[:2])
    assert first == second and first is not second
    saver.close()


def test_a_list_reply_looks_for_a_missing_blob_once(redis_url: str, prefix: str) -> None:
    """Checkpoints sharing a version at which a channel is absent (no key): one list reply
    checks that key's type once, however many of its checkpoints reference it."""
    saver = RedisSaver(redis_url, prefix=prefix)
    admin = redis.Redis.from_url(redis_url, protocol=2)
    types = []
    for thread, length in (("short", 2), ("long", 8)):
        parent: str | None = None
        for step in range(length):
            cp = empty_checkpoint()
            cp["id"] = f"{step:06d}"
            cp["channel_values"] = {"m": step}
            cp["channel_versions"] = {"m": step + 1, "gone": 1}
            new = {"m": step + 1, "gone": 1} if step == 0 else {"m": step + 1}
            c = saver.put(cfg(thread, parent), cp, {}, new)
            parent = c["configurable"]["checkpoint_id"]
        before = command_calls(admin).get("type", 0)
        assert len(list(saver.list(cfg(thread), limit=10))) == length
        types.append(command_calls(admin)["type"] - before)
    assert types[0] == types[1]
    saver.close()
    admin.close()


def command_calls(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the server started (scripts' own commands included)."""
    return {k[len("cmdstat_") :]: int(v["calls"]) for k, v in client.info("commandstats").items()}


async def test_delete_thread_works_in_bulk_on_the_server(
    counted: tuple[Any, RoundTrips], redis_url: str
) -> None:
    """Inside the script: one SREM and one PTTL per run and one DEL per 500 keys, whatever the
    length."""
    saver, _ = counted
    await warm(saver)
    parent: str | None = None
    for step in range(300):
        cp = empty_checkpoint()
        cp["id"] = f"{step:06d}"
        cp["channel_values"] = {"m": step}
        cp["channel_versions"] = {"m": step + 1}
        c = await saver.aput(cfg("long", parent), cp, {"run_id": "run-1"}, {"m": step + 1})
        parent = c["configurable"]["checkpoint_id"]
        await saver.aput_writes(c, [("m", step)], f"task-{step}")
    admin = redis.Redis.from_url(redis_url, protocol=2)
    before = command_calls(admin)
    await saver.adelete_thread("long")
    after = command_calls(admin)
    delta = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    delta.pop("info", None)
    # 300 checkpoints, 300 writes hashes, 300 blobs and 2 timeline keys: 902 keys in 2 DELs,
    # then the namespace zset; run sets from the run markers, so no payload is read (no GET,
    # no MGET); TYPE checks first (namespace, registry, the timeline's two indexes, the run
    # set), all before the first change; one PTTL settles the run set (emptied: gone).
    assert delta == {
        "evalsha": 1, "type": 5, "zrange": 4, "srem": 1, "pttl": 1, "del": 3, "zrem": 1,
    }  # fmt: skip
    admin.close()


async def test_deleting_one_of_many_threads_of_a_run_reads_no_more_of_its_set(
    counted: tuple[Any, RoundTrips], redis_url: str
) -> None:
    """300 threads kept for ever share one run id. Deleting one settles the run set by
    paging through it until a member kept for ever: the first one, so the server reads one
    page and one checkpoint's life, not the set (which made deleting N threads O(N^2))."""
    saver, _ = counted
    await warm(saver)
    for n in range(300):
        cp = empty_checkpoint()
        cp["channel_values"], cp["channel_versions"] = {"m": n}, {"m": 1}
        await saver.aput(cfg(f"t{n}"), cp, {"run_id": "shared"}, {"m": 1})
    work = await server_work(redis_url, saver.adelete_thread("t7"))
    assert work["sscan"] == 1 and work["pttl"] == 2, work  # the set's life, one member's


async def server_work(redis_url: str, call: Awaitable[Any]) -> dict[str, int]:
    """The commands the server ran while `call` was awaited, by name."""
    admin = redis.Redis.from_url(redis_url, protocol=2)
    before = command_calls(admin)
    await call
    after = command_calls(admin)
    admin.close()
    delta = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    delta.pop("info", None)
    return delta


async def test_a_put_writes_its_new_keys_in_bulk(
    counted: tuple[Any, RoundTrips], redis_url: str
) -> None:
    """A put of a fresh checkpoint without a TTL: one EXISTS for the keys it creates (no
    type check or read of each), one MSET for the payload and the values, one ZADD for the
    key index, however many channels it writes. Writing a checkpoint again checks and reads
    what is there."""
    saver, _ = counted
    await warm(saver)
    work = []
    for channels in (1, 6):
        cp = empty_checkpoint()
        cp["id"] = "000000"
        cp["channel_values"] = {f"c{i}": "x" * (i * 300) for i in range(channels)}
        cp["channel_versions"] = {f"c{i}": 1 for i in range(channels)} | {"gone": 1}
        new = dict(cp["channel_versions"])
        put = saver.aput(cfg(f"bulk-{channels}"), cp, {"run_id": "r"}, new)
        work.append(await server_work(redis_url, put))
    assert work[0] == work[1]
    # The first put of a thread: the timeline and the registry checked; ZCOUNT (whether a
    # key of the timeline has a TTL) and ZSCORE (whether the namespace set names the
    # timeline already) check theirs as they read, and SADD, the first write, the run set's;
    # ZADDs: timeline, key index, namespace, registry. TIME and ZRANGEBYSCORE sweep the
    # registry of expired threads (a new thread's first write); nothing gets an expiry time.
    # HKEYS reads the metadata index marker (a field marked complete since would be refused).
    assert work[0] == {
        "evalsha": 1, "exists": 1, "type": 2, "zcount": 1, "zscore": 1, "mset": 1, "zadd": 4,
        "sadd": 1, "persist": 2, "time": 1, "zrangebyscore": 1, "hkeys": 1,
    }  # fmt: skip
    again = await server_work(redis_url, saver.aput(cfg("bulk-6"), cp, {"run_id": "r"}, new))
    # each key the put writes (payload, six values, the absent channel's) checked, the old
    # payload read, and the absent channel's key deleted in case it was there
    assert again["type"] == 1 + 1 + 7 and again["get"] == 1 and again["del"] == 1


async def test_a_thread_written_before_is_not_settled_again(
    counted: tuple[Any, RoundTrips], redis_url: str
) -> None:
    """Without a TTL, once the namespace set and the registry name a timeline and its thread
    for ever, so does everything a settle writes (the set has no TTL): later puts and writes
    read that with two ZSCOREs and neither check nor write the namespace set or the registry
    again. Reads and first writes check the types of what they touch: only the timeline's
    type is looked up. A read checks what it reads as it reads it."""
    saver, _ = counted
    await warm(saver)
    first = await grow(saver, "settled", 2)
    cp = empty_checkpoint()
    cp["id"] = "000002"
    cp["channel_values"] = {"m": 2, "other": "x"}
    cp["channel_versions"] = {"m": 3, "other": 1}
    put = saver.aput(first[-1], cp, {"run_id": "r"}, {"m": 3})
    assert await server_work(redis_url, put) == {
        "evalsha": 1, "exists": 1, "type": 1, "zcount": 1, "zscore": 2, "mset": 1, "zadd": 2,
        "sadd": 1, "persist": 1, "hkeys": 1,
    }  # fmt: skip
    writes = saver.aput_writes(cfg("settled", "000002"), [("m", 1), ("other", 2)], "task")
    assert await server_work(redis_url, writes) == {
        "evalsha": 1, "zcount": 1, "zscore": 2, "hsetnx": 2, "zadd": 1,
    }  # fmt: skip
    assert await server_work(redis_url, saver.aget_tuple(cfg("settled"))) == {
        "evalsha": 1, "zrevrange": 1, "get": 1, "hgetall": 1, "mget": 1,
    }  # fmt: skip


def test_a_put_with_a_ttl_checks_only_what_it_refreshes(redis_url: str, prefix: str) -> None:
    """With a TTL a put also names the blobs its checkpoint reads but does not write, to
    refresh them: those exist, so they are type-checked; what it writes is new (one EXISTS)."""
    saver = RedisSaver(redis_url, prefix=prefix, ttl=3600)
    cp = empty_checkpoint()
    cp["id"] = "000000"
    cp["channel_values"] = {"a": 1, "b": 2, "c": 3}
    cp["channel_versions"] = {"a": 1, "b": 1, "c": 1}
    first = saver.put(cfg("t"), cp, {}, dict(cp["channel_versions"]))
    cp = {**cp, "id": "000001", "channel_values": {"a": 2, "b": 2, "c": 3}}
    cp["channel_versions"] = {"a": 2, "b": 1, "c": 1}
    work = asyncio.run(
        server_work(redis_url, asyncio.to_thread(saver.put, first, cp, {}, {"a": 2}))
    )
    # two of the timeline's three zsets (ZCOUNT reads the key index), its writes hash, the
    # registry, the two refreshed blobs
    assert work["exists"] == 1 and work["type"] == 2 + 1 + 1 + 2 and "get" not in work
    # the key index's entries with a TTL, and those kept for ever (a takeover's sign)
    assert work["zcount"] == 2 and work["time"] == 1
    saver.close()


@pytest.mark.parametrize("style", ["async", "sync"])
async def test_a_put_sends_again_only_blobs_that_expired(
    redis_url: str, prefix: str, style: str
) -> None:
    """A put refreshes the blobs its checkpoint reads but does not write. One that expired
    (a step longer than the TTL) costs one more round trip, to send it from the checkpoint's
    values; a channel absent at its version has no key by design and costs none."""
    if style == "async":
        aclient, counter = counting_async_client(redis_url)
        saver: Any = AsyncRedisSaver(client=aclient, prefix=prefix, ttl=2)
    else:
        client, counter = counting_client(redis_url)
        saver = SyncAsAsync(RedisSaver(client=client, prefix=prefix, ttl=2))
    await warm(saver)
    versions = {"kept": 1, "m": 1, "absent": 1}
    cp = {**empty_checkpoint(), "channel_values": {"kept": "k", "m": 1}}
    c = await saver.aput(cfg("t"), {**cp, "channel_versions": versions}, {}, versions)
    for step, pause in ((2, 0.0), (3, 2.3), (4, 0.0)):
        await asyncio.sleep(pause)
        cp = {**empty_checkpoint(), "channel_values": {"kept": "k", "m": step}}
        cp["channel_versions"] = {**versions, "m": step}
        with counter.measure():
            c = await saver.aput(c, cp, {}, {"m": step})
        assert counter.round_trips == (2 if pause else 1), step
        got = await saver.aget_tuple(cfg("t"))
        assert got.checkpoint["channel_values"] == {"kept": "k", "m": step}
    if style == "async":
        await aclient.aclose()
    else:
        client.close()


async def test_reads_run_the_same_commands_on_a_long_timeline(
    counted: tuple[Any, RoundTrips], redis_url: str
) -> None:
    """list(limit=k) and get_tuple are O(log n + k) on the server: the same commands for a
    timeline of 20 checkpoints as for one of 2,000, one sorted-set range read among them."""
    saver, _ = counted
    await warm(saver)
    work: dict[int, list[dict[str, int]]] = {}
    for n in (20, 2000):
        configs = await grow(saver, f"t{n}", n)
        middle = cfg(f"t{n}", configs[n // 2]["configurable"]["checkpoint_id"])
        work[n] = [
            await server_work(redis_url, _alist(saver, cfg(f"t{n}"), limit=3)),
            await server_work(redis_url, _alist(saver, cfg(f"t{n}"), before=middle, limit=3)),
            await server_work(redis_url, saver.aget_tuple(cfg(f"t{n}"))),
            await server_work(redis_url, saver.aget_tuple(middle)),
        ]
    assert work[20] == work[2000]
    for listing in work[2000][:2]:
        assert listing["zrevrangebylex"] == 1 and listing["get"] == 3 and "zrange" not in listing


async def test_a_filtered_list_reads_writes_and_blobs_of_matches_only(
    counted: tuple[Any, RoundTrips], redis_url: str
) -> None:
    """A filter needs every payload it passes over, and nothing more of a checkpoint that
    does not match: writes and blobs are read for the matches, as many as `limit` wants."""
    saver, counter = counted
    await warm(saver)
    await grow(saver, "f", 2000)  # metadata {"step": 0..1999}
    assert await _alist(saver, cfg("f"), filter={"step": -1}) == []
    miss = await server_work(redis_url, _alist(saver, cfg("f"), filter={"step": -1}))
    assert miss["get"] == 2000 and "mget" not in miss and "hgetall" not in miss
    found = await _alist(saver, cfg("f"), filter={"step": 5}, limit=1)
    assert [t.metadata["step"] for t in found] == [5]
    assert found[0].checkpoint["channel_values"] == {"m": 5, "other": "x"}
    with counter.measure():
        hit = await server_work(redis_url, _alist(saver, cfg("f"), filter={"step": 5}, limit=1))
    assert (hit["mget"], hit["hgetall"]) == (1, 1)
    # 1,995 payloads, newest first down to step 5, in pages of 128, 256, 512, ... (not a round
    # trip per 128: the count grows with log n); then the match itself
    pages, covered = 0, 0
    while covered < 1995:
        covered += min(128 << pages, 4096)
        pages += 1
    assert counter.round_trips == pages + 1 == 6


async def _alist(saver: Any, config: Any, **kwargs: Any) -> list[Any]:
    return [t async for t in saver.alist(config, **kwargs)]


async def test_delete_thread_reads_payloads_only_without_run_markers(
    counted: tuple[Any, RoundTrips], redis_url: str, prefix: str
) -> None:
    """A thread stored before run markers existed: one MGET finds its run sets, and
    deleting it still leaves no run-set member behind."""
    saver, _ = counted
    await warm(saver)
    parent: str | None = None
    for step in range(3):
        cp = empty_checkpoint()
        cp["id"] = f"{step:06d}"
        c = await saver.aput(cfg("old", parent), cp, {"run_id": f"run-{step % 2}"}, {})
        parent = c["configurable"]["checkpoint_id"]
    admin = redis.Redis.from_url(redis_url, protocol=2)
    (index,) = admin.keys(f"{prefix}:keys:{{old}}:*")
    markers = [m for m in admin.zrange(index, 0, -1) if m.startswith(b"r")]
    assert sorted(markers) == [b"rrun-0:000000", b"rrun-0:000002", b"rrun-1:000001"]
    admin.zrem(index, *markers)
    before = command_calls(admin)
    await saver.adelete_thread("old")
    after = command_calls(admin)
    delta = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    assert delta["mget"] == 1 and delta["srem"] == 2
    assert admin.keys(f"{prefix}:*{{old}}*") == []
    assert admin.keys(f"{prefix}:run:*") == []
    admin.close()


async def test_per_thread_operations_ignore_other_threads(
    counted: tuple[Any, RoundTrips], redis_url: str, prefix: str
) -> None:
    saver, counter = counted
    await warm(saver)
    await grow(saver, "mine", 5)
    seen: list[list[tuple[Any, ...]]] = []
    for others in (10, 1000):
        client = redis.Redis.from_url(redis_url, protocol=2)
        # Register other threads cheaply but for real, through the saver's own put.
        for i in range(len(seen) * 10, others):
            await grow(saver, f"other-{i}", 1)
        client.close()
        with counter.measure():
            await saver.aget_tuple(cfg("mine"))
            [t async for t in saver.alist(cfg("mine"), limit=3)]
            [t async for t in saver.alist({"configurable": {"thread_id": "mine"}}, limit=3)]
            await saver.adelete_thread(f"unknown-{uuid.uuid4()}")
        assert len(counter.commands) == 4  # one script call per operation
        registry = KeySpace(prefix).threads.encode()
        touched = [c for c in counter.commands if registry in [_b(a) for a in c]]
        # Scripts name the registry only to touch one member (ZREM, ZADD XX): O(log n).
        assert all(_b(c[0]) == b"EVALSHA" for c in touched)
        assert counter.round_trips == 4
        seen.append([c[:1] for c in counter.commands])
    assert seen[0] == seen[1]
    assert not any(_b(c[0]).upper() in (b"SCAN", b"KEYS", b"HGETALL") for c in counter.commands)


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


FORBIDDEN = [
    r"'ZADD', [^)]*'GT'",
    r"'ZADD', [^)]*'LT'",
    r"GETDEL",
    r"GETEX",
    r"'COPY'",
    r"'EXPIRE', [^)]*'NX'",
    r"'ZRANGE', [^)]*'BYSCORE'",
    r"'ZRANGE', [^)]*'BYLEX'",
    r"'ZRANGE', [^)]*'REV'",
    r"HELLO",
    r"ZRANGESTORE",
    r"LMPOP|ZMPOP|SINTERCARD|ZINTERCARD|HRANDFIELD|ZRANDMEMBER|SMISMEMBER|LPOS",
]


@pytest.mark.parametrize("pattern", FORBIDDEN)
def test_scripts_use_only_redis_5_commands(pattern: str) -> None:
    for script in SCRIPTS.values():
        assert not re.search(pattern, script.source, re.IGNORECASE), (script.name, pattern)


async def test_growing_messages_are_compressed_and_inflated_by_what_changed(
    saver: Any, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put compresses only the messages a step appended; a read of the version this saver
    just wrote inflates nothing, and another saver (another process) inflates it whole."""
    from langchain_core.messages import AIMessage

    from langgraph_checkpoint_plainredis import _codec, _deflate

    compressed: list[int] = []
    inflated: list[int] = []
    real_segment, real_decompress = _deflate._segment, _codec.zlib.decompress

    def segment(data: bytes, start: int, dictionary: bytes = b"") -> bytes:
        compressed.append(len(data) - start)
        return real_segment(data, start, dictionary)

    class Zlib:
        error = _codec.zlib.error

        @staticmethod
        def decompress(data: bytes) -> bytes:
            inflated.append(len(data))
            return real_decompress(data)

    monkeypatch.setattr(_deflate, "_segment", segment)
    monkeypatch.setattr(_codec, "zlib", Zlib)
    messages = [AIMessage(content=f"reply {n} " + "word " * 60, id=f"m{n}") for n in range(6)]
    parent: str | None = None
    for step in (3, 4, 5, 6):
        cp = empty_checkpoint()
        cp["id"] = f"{step:06d}"
        cp["channel_values"] = {"messages": messages[:step]}
        cp["channel_versions"] = {"messages": f"{step:032}.0"}
        config = await saver.aput(cfg("t", parent), cp, {}, {"messages": f"{step:032}.0"})
        parent = config["configurable"]["checkpoint_id"]
        got = await saver.aget_tuple(cfg("t"))
        assert got.checkpoint["channel_values"]["messages"] == messages[:step]
    listed = [t async for t in saver.alist(cfg("t"), limit=1)]
    assert listed[0].checkpoint["channel_values"]["messages"] == messages
    assert inflated == []
    first = len(saver.serde.dumps_typed(messages[:3])[1]) - 1  # all but the array head
    appended = [len(saver.serde.dumps_typed([m])[1]) - 1 for m in messages[3:]]
    assert compressed == [first, *appended]
    with RedisSaver(redis_url, prefix=prefix) as other:
        assert other.get_tuple(cfg("t")).checkpoint["channel_values"]["messages"] == messages
    assert len(inflated) == 1


def _code(lua: str) -> str:
    return re.sub(r"--[^\n]*", "", lua)


PRELUDE_NAMES = {name for name, _ in _definitions(_PRELUDE)}


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=lambda s: s.name)
def test_scripts_define_only_the_functions_they_call(script: Any) -> None:
    """Redis makes every local function of a script anew on each call: a script carries
    only the part of the shared prelude its code can reach (comments left out)."""
    code = _code(script.source)
    for name in re.findall(r"^local function (\w+)", code, re.MULTILINE):
        assert len(re.findall(rf"\b{name}\b", code)) > 1, (script.name, name)


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=lambda s: s.name)
def test_scripts_define_every_prelude_name_they_use(script: Any) -> None:
    """A prelude function or variable left out of a script would fail only on the path
    that calls it: every one the script's code names is defined in it."""
    code = _code(script.source)
    defined = set(re.findall(r"^local (?:function )?(\w+)", code, re.MULTILINE))
    used = PRELUDE_NAMES & set(re.findall(r"\w+", code))
    assert used <= defined, (script.name, used - defined)


async def test_a_ttl_takeover_reads_each_run_set_once(redis_url: str, prefix: str) -> None:
    """A takeover gives the timeline's run sets the TTL when they name only checkpoints it
    reaches: each run set is read once per namespace taken over, however many checkpoints of
    the run (and their run markers) the timeline holds. This one names a checkpoint of the
    thread's other namespace too, so it takes the TTL once that namespace is taken over."""
    with RedisSaver(redis_url, prefix=prefix) as forever:
        c = cfg("t")
        for _ in range(40):
            c = forever.put(c, empty_checkpoint(), {"run_id": "r"}, {})
        sub = {"configurable": {"thread_id": "t", "checkpoint_ns": "sub:1"}}
        forever.put(sub, empty_checkpoint(), {"run_id": "r"}, {})
    with RedisSaver(redis_url, prefix=prefix, ttl=3600) as timed:
        work = await server_work(
            redis_url, asyncio.to_thread(timed.put, c, empty_checkpoint(), {"run_id": "r2"}, {})
        )
    assert work.get("sscan") == 2 and "smembers" not in work  # once per namespace taken over
    assert work["pttl"] < 4 * 41 + 20  # a member at most once per namespace, not per marker
    with redis.Redis.from_url(redis_url, protocol=2) as client:
        assert 0 < client.pttl(KeySpace(prefix).run("r"))
