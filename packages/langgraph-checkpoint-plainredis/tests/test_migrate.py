"""Upgrading in place from 0.1.0: data really written by the published package."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from wrappers import Forwarding, Transparent

from langgraph_checkpoint_plainredis import (
    AsyncRedisSaver,
    LegacyKeyspaceError,
    PlainRedisError,
    RedisSaver,
    migrate_v010,
)
from langgraph_checkpoint_plainredis._cli import main
from langgraph_checkpoint_plainredis._keys import LegacyKeys

# 0.1.0 could write to a cluster but not read back from one: its data is standalone.
pytestmark = pytest.mark.standalone

DUMP = json.loads((Path(__file__).parent / "data" / "v010_dump.json").read_text())


def _bytes(entry: dict[str, Any], value: str) -> bytes:
    return base64.b64decode(value) if entry.get("encoding") == "base64" else value.encode()


def restore(client: redis.Redis, rename: dict[str, str]) -> None:
    """Loads the recorded keys, each prefix renamed so the test owns its keys."""

    def move(name: str) -> str:
        for old, new in rename.items():
            if name.startswith(old + ":"):
                return new + name[len(old) :]
        raise AssertionError(name)

    for entry in DUMP["keys"]:
        key = move(entry["key"])
        if entry["type"] == "string":
            client.set(key, _bytes(entry, entry["value"]))
        elif entry["type"] == "hash":
            for field, value in entry["value"].items():
                field = move(field) if field.startswith(tuple(rename)) else field
                client.hset(key, field, _bytes(entry, value))
        else:
            client.zadd(key, {member: score for member, score in entry["value"]})


@pytest.fixture
def restored(client: redis.Redis) -> dict[str, str]:
    rename = {p: f"test:{uuid.uuid4().hex[:8]}:{p}" for p in DUMP["prefixes"]}
    restore(client, rename)
    return rename


def contents(values: dict[str, Any]) -> list[str]:
    return [m.content for m in values.get("messages", [])]


def check_against_010_reading(saver: RedisSaver, expected: dict[str, Any]) -> None:
    conf = {"thread_id": expected["thread_id"], "checkpoint_ns": expected["checkpoint_ns"]}
    listed = list(saver.list({"configurable": conf}))
    assert [t.checkpoint["id"] for t in listed] == expected["checkpoint_ids"]
    by_id = {t.checkpoint["id"]: t for t in listed}
    for want in expected["checkpoints"]:
        got = by_id[want["checkpoint_id"]]
        assert contents(got.checkpoint["channel_values"]) == want["messages"]
        parent = got.parent_config["configurable"]["checkpoint_id"] if got.parent_config else None
        assert parent == want["parent_checkpoint_id"]
        assert [[w[0], w[1]] for w in got.pending_writes] == want["pending_writes"]
    latest = saver.get_tuple({"configurable": conf})
    want = expected["latest"]
    assert latest.checkpoint["id"] == want["checkpoint_id"]
    assert latest.metadata == want["metadata"]
    assert sorted(latest.checkpoint["channel_values"]) == sorted(want["channel_values_keys"])
    # Integer versions became strings in the same order.
    assert sorted(want["channel_versions"], key=want["channel_versions"].get) == sorted(
        latest.checkpoint["channel_versions"], key=latest.checkpoint["channel_versions"].get
    )


def check_lg_threads(url: str, prefix: str) -> None:
    """The dump's threads that 0.1.0 wrote under `lg`, read under `prefix` by a saver, are
    what 0.1.0 read back."""
    with RedisSaver(url, prefix=prefix) as saver:
        for thread in DUMP["expected"]["threads"]:
            if thread["prefix"] == "lg":
                check_against_010_reading(saver, thread)


def test_migration_reads_back_what_010_read(
    client: redis.Redis, redis_url: str, restored: dict[str, str]
) -> None:
    for old, new in restored.items():
        with RedisSaver(redis_url, prefix=new) as saver:
            with pytest.raises(LegacyKeyspaceError, match="plainredis migrate"):
                saver.get_tuple({"configurable": {"thread_id": "t-fork"}})
        report = migrate_v010(client, new)
        assert report.skipped == [] and report.checkpoints > 0
        with RedisSaver(redis_url, prefix=new) as saver:
            for expected in DUMP["expected"]["threads"]:
                if expected["prefix"] == old:
                    check_against_010_reading(saver, expected)
            for deleted in DUMP["expected"]["deleted_threads"]:
                if deleted["prefix"] == old:
                    assert (
                        saver.get_tuple({"configurable": {"thread_id": deleted["thread_id"]}})
                        is None
                    )
        # Only keys of the current layout remain; a second run changes nothing.
        keys = sorted(client.scan_iter(match=f"{new}:*"))
        assert all(b":{" in k or k in (f"{new}:threads".encode(),) or b":run:" in k for k in keys)
        again = migrate_v010(client, new)
        assert (again.threads, again.checkpoints) == (0, 0)
        assert sorted(client.scan_iter(match=f"{new}:*")) == keys


def test_a_migration_that_does_not_read_back_deletes_nothing(
    client: redis.Redis, redis_url: str, restored: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_checkpoint_plainredis import PlainRedisError, _migrate

    new = next(iter(restored.values()))
    before = {k for k in client.scan_iter(match=f"{new}:*") if b":{" not in k}
    real = _migrate.encode_blob
    # A writer that stores something else: the read-back must catch it before deleting.
    monkeypatch.setattr(_migrate, "encode_blob", lambda typed: real(("json", b'"tampered"')))
    with pytest.raises(PlainRedisError, match="does not read back .* channel values differ"):
        migrate_v010(client, new)
    left = {k for k in client.scan_iter(match=f"{new}:*") if b":{" not in k}
    assert before - left <= {f"{new}:threads".encode()}  # parked, not deleted
    monkeypatch.undo()
    assert migrate_v010(client, new).skipped == []
    old = next(iter(restored))
    with RedisSaver(redis_url, prefix=new) as saver:
        for expected in DUMP["expected"]["threads"]:
            if expected["prefix"] == old:
                check_against_010_reading(saver, expected)


@pytest.mark.parametrize("ttl", [None, 3600])
def test_a_value_010_let_expire_migrates_as_absent(
    client: redis.Redis, redis_url: str, restored: dict[str, str], ttl: int | None
) -> None:
    """A blob 0.1.0 let expire while checkpoints reading it remain: they read the channel as
    absent, in 0.1.0 and after the migration, with a TTL or without. With a TTL the put of
    such a checkpoint was refused as reading an expired value, and every run failed."""
    old, new = next(iter(restored.items()))
    victim = next(k for k in sorted(client.scan_iter(match=f"{new}:blob:*")) if b"messages" in k)
    client.delete(victim)
    report = migrate_v010(client, new, ttl=ttl)
    assert report.skipped == [] and report.checkpoints > 0
    with RedisSaver(redis_url, prefix=new) as saver:
        missing = 0
        for expected in DUMP["expected"]["threads"]:
            if expected["prefix"] == old:
                conf = {
                    "thread_id": expected["thread_id"],
                    "checkpoint_ns": expected["checkpoint_ns"],
                }
                listed = list(saver.list({"configurable": conf}))
                assert [t.checkpoint["id"] for t in listed] == expected["checkpoint_ids"]
                missing += sum("messages" not in t.checkpoint["channel_values"] for t in listed)
        assert missing > 0


def test_values_without_equality_migrate(
    client: redis.Redis, redis_url: str, restored: dict[str, str]
) -> None:
    """The read-back compares values as stored: NaN is not equal to itself."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    new = next(iter(restored.values()))
    blob = next(k for k in sorted(client.scan_iter(match=f"{new}:blob:*")))
    kind, data = JsonPlusSerializer().dumps_typed(float("nan"))
    client.set(blob, json.dumps({"t": kind, "d": base64.b64encode(data).decode()}))
    report = migrate_v010(client, new)
    assert report.skipped == [] and report.checkpoints > 0


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def test_a_migrated_thread_resumes_and_forks_safely(
    client: redis.Redis, redis_url: str, restored: dict[str, str]
) -> None:
    prefix = restored["lg"]
    assert main(["migrate", "--url", redis_url, "--prefix", prefix]) == 0

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}

    def polish(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"polished: {state['messages'][-1].content}")]}

    with RedisSaver(redis_url, prefix=prefix) as saver:
        graph = (
            StateGraph(State)
            .add_node("agent", agent)
            .add_node("polish", polish)
            .add_edge(START, "agent")
            .add_edge("agent", "polish")
            .add_edge("polish", END)
            .compile(checkpointer=saver)
        )
        config = {"configurable": {"thread_id": "t-fork"}}
        before = [(s.config, contents(s.values)) for s in graph.get_state_history(config)]
        graph.invoke({"messages": [HumanMessage("three")]}, config)
        assert contents(graph.get_state(config).values)[-3:] == [
            "three",
            "echo: three",
            "polished: echo: three",
        ]
        # A fork from a migrated checkpoint leaves every existing checkpoint as it was.
        graph.invoke({"messages": [HumanMessage("fork")]}, before[3][0])
        for old_config, old_contents in before:
            assert contents(graph.get_state(old_config).values) == old_contents


def test_migrate_command_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate"])
    assert exit_info.value.code == 2
    assert "--url" in capsys.readouterr().err


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_every_call_refuses_a_keyspace_010_wrote(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Not only reads and writes: a copy or a delete by runs found nothing there, and the
    command line's delete and prune said the thread did not exist."""
    prefix = restored["lg"]
    before = {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}:*")}
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for call in (
            lambda: saver.copy_thread("t-fork", "copy"),
            lambda: saver.delete_for_runs(["any run"]),
            lambda: saver.prune(["t-fork", "other"]),
        ):
            with pytest.raises(LegacyKeyspaceError, match="plainredis migrate"):
                call()
    for command in ("delete", "prune"):
        code, err = cli(capsys, command, "t-fork", "--yes", "--url", redis_url, "--prefix", prefix)
        assert code == 1 and err.count("\n") == 1 and "plainredis migrate" in err
    assert {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}:*")} == before


async def test_a_migration_that_stopped_halfway_is_refused_until_it_ends(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The threads it had not reached read as empty, and a graph run on one started it anew
    (a rerun then mixed two timelines): the savers and the commands refuse the keyspace while
    0.1.0's registry is parked, and name the fix."""

    prefix = restored["lg"]
    done = interrupt_after_one(monkeypatch, client, prefix)
    parked = f"{prefix}:v010:threads"
    expected = [t for t in DUMP["expected"]["threads"] if t["prefix"] == "lg"]
    waiting = next(t for t in expected if t["thread_id"] != done[0])
    config = {"configurable": {"thread_id": waiting["thread_id"], "checkpoint_ns": ""}}
    with RedisSaver(redis_url, prefix=prefix) as saver:
        with pytest.raises(LegacyKeyspaceError, match=f"has not finished.*{parked!r}"):
            saver.get_tuple(config)
    asaver = AsyncRedisSaver(redis_url, prefix=prefix)
    with pytest.raises(LegacyKeyspaceError, match="has not finished"):
        await asaver.aget_tuple(config)
    await asaver.aclose()
    code, err = cli(capsys, "threads", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and err.count("\n") == 1 and "has not finished" in err

    assert migrate_v010(client, prefix).skipped == []
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for thread in expected:
            check_against_010_reading(saver, thread)


def test_an_unreadable_value_or_entry_stops_the_migration_with_one_line(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A value the serializer cannot read names its key and the fix (a traceback before);
    an unreadable registry entry is listed, and the keyspace stays refused until it is
    removed and the migration runs again."""
    prefix = restored["lg"]
    blob = next(k for k in client.scan_iter(match=f"{prefix}:blob:t-fork:*"))
    good = client.get(blob)
    client.set(blob, json.dumps({"t": "pickle", "d": base64.b64encode(b"x").decode()}))
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and err.count("\n") == 1
    assert repr(blob.decode()) in err and "serde=" in err
    client.set(blob, good)  # type: ignore[arg-type]

    parked = f"{prefix}:v010:threads"
    client.hset(parked, "not a 0.1.0 index key", "not json")
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and "'not a 0.1.0 index key'" in err and "HDEL" in err
    with RedisSaver(redis_url, prefix=prefix) as saver:
        with pytest.raises(LegacyKeyspaceError, match="repaired or removed"):
            saver.get_tuple({"configurable": {"thread_id": "t-fork"}})
    client.hdel(parked, "not a 0.1.0 index key")
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)[0] == 0
    check_lg_threads(redis_url, prefix)


@pytest.mark.parametrize("kind", ["stash", "idx", "cp", "blob", "wr"])
def test_a_foreign_value_stops_the_migration_with_one_line_and_loses_nothing(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    """A key where 0.1.0 kept a string, hash or zset that holds another type (a list here)
    stops the migration with an error naming it and the fix (a bare WRONGTYPE before); once
    it is moved aside the migration runs on and every thread reads back whole."""
    prefix = restored["lg"]
    parked = f"{prefix}:v010:threads"
    if kind == "stash":
        foreign = parked
    elif kind == "idx":
        foreign = _s(next(iter(client.hkeys(f"{prefix}:threads"))))
    else:
        foreign = _s(next(iter(client.scan_iter(match=f"{prefix}:{kind}:t-*"))))
    saved = client.dump(foreign) if client.exists(foreign) else None
    client.delete(foreign)
    client.rpush(foreign, "someone else's")
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and err.count("\n") == 1, err
    assert repr(foreign) in err and "is a list" in err and "RENAME" in err
    assert client.lrange(foreign, 0, -1) == [b"someone else's"]

    client.delete(foreign)
    if saved is not None:
        client.restore(foreign, 0, saved)
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)[0] == 0
    assert not client.exists(parked)
    check_lg_threads(redis_url, prefix)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# -- 0.1.0 thread ids whose keys are keys of the current layout ---------------------------


def restore_thread(
    client: redis.Redis, prefix: str, thread_id: str, src: tuple[str, str]
) -> dict[str, Any]:
    """Loads the recorded 0.1.0 thread `src` (prefix, thread) as 0.1.0 would have written it
    for `thread_id` under `prefix`; returns what 0.1.0 read from it, for `thread_id`."""
    src_prefix, src_thread = src
    for entry in DUMP["keys"]:
        key = entry["key"]
        if entry["type"] == "hash" and key == f"{src_prefix}:threads":
            for value in entry["value"].values():
                where = json.loads(value)
                if where["thread"] == src_thread:
                    ns = where["ns"]
                    where["thread"] = thread_id
                    client.hset(
                        f"{prefix}:threads", f"{prefix}:idx:{thread_id}:{ns}", json.dumps(where)
                    )
            continue
        kind = next(
            (
                k
                for k in ("cp", "wr", "blob", "idx")
                if key.startswith(f"{src_prefix}:{k}:{src_thread}:")
            ),
            None,
        )
        if kind is None:
            continue
        new = f"{prefix}:{kind}:{thread_id}:" + key[len(f"{src_prefix}:{kind}:{src_thread}:") :]
        if entry["type"] == "string":
            client.set(new, _bytes(entry, entry["value"]))
        elif entry["type"] == "hash":
            for field, value in entry["value"].items():
                client.hset(new, field, _bytes(entry, value))
        else:
            client.zadd(new, {member: score for member, score in entry["value"]})
    expected = [
        {**t, "thread_id": thread_id}
        for t in DUMP["expected"]["threads"]
        if (t["prefix"], t["thread_id"]) == src
    ]
    assert expected
    return {"threads": expected}


# Recorded 0.1.0 threads: the first two have the root namespace only, so a registry of them
# stays a small hash, which Redis lists in the order it was written.
SOURCES = [
    ("lg", "t-fork"),
    ("myapp:agent", "user-42:session-7"),
    ("lg", "user-42:session-7"),
    ("myapp:agent", "用户-7:会话-1"),
]


def everything(client: redis.Redis, prefix: str) -> dict[bytes, Any]:
    return {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}:*")}


@pytest.mark.parametrize(
    ("threads", "sources", "ordered"),
    [
        (("a", "{a}"), (0, 1), True),
        (("{a}", "a"), (0, 1), True),
        (("a", "{a}", "{%7Ba%7D}"), (0, 1, 0), True),
        (("a", "{a}", "{%}", "", "{x}:y", "x"), (2, 3, 0, 1, 2, 3), False),
    ],
    ids=["plain-first", "braced-first", "chain", "namespaces"],
)
def test_a_010_thread_whose_keys_are_another_threads_keys_migrates_whole(
    client: redis.Redis,
    redis_url: str,
    prefix: str,
    threads: tuple[str, ...],
    sources: tuple[int, ...],
    ordered: bool,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """0.1.0's keys of thread '{a}' ('lg:idx:{a}:', 'lg:cp:{a}::C') are thread 'a''s keys in
    the current layout: migrating 'a' first wrote into '{a}''s 0.1.0 timeline, and every
    run after it stopped on a value 'not a 0.1.0 value'. Every thread now reads back as 0.1.0
    read it, whatever the registry's order, and a second run changes nothing."""
    from langgraph_checkpoint_plainredis._inspect import Inspector

    expected = [
        restore_thread(client, prefix, thread, SOURCES[src])
        for thread, src in zip(threads, sources, strict=True)
    ]
    if ordered:  # the registry names them in this order
        registry = [_s(f) for f in client.hkeys(f"{prefix}:threads")]
        assert registry == [f"{prefix}:idx:{thread}:" for thread in threads]
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert (code, err) == (0, "")
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for restored in expected:
            for thread in restored["threads"]:
                check_against_010_reading(saver, thread)
        listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert listed == set(threads)
    with Inspector.connect(redis_url, prefix) as inspector:
        assert inspector.usage(scan=True).orphans == []  # no 0.1.0 key is left behind
    keys = everything(client, prefix)
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix) == (0, "")
    assert everything(client, prefix) == keys


def test_keep_old_is_refused_when_010_keys_would_be_another_threads(
    client: redis.Redis, redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --keep-old, 0.1.0's keys of thread '{a}' stayed as keys of thread 'a': a later
    graph run on a new thread 'a' read them and failed. Refused before anything is written,
    naming both threads; without --keep-old, or into another prefix, it migrates."""
    expected = restore_thread(client, prefix, "{a}", SOURCES[0])["threads"]
    restore_thread(client, prefix, "b", SOURCES[1])
    before = everything(client, prefix)
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix, "--keep-old")
    assert code == 1 and err.count("\n") == 1, err
    assert "thread '{a}'" in err and "thread 'a'" in err and "--keep-old" in err
    assert everything(client, prefix) == before
    with pytest.raises(PlainRedisError, match="keep_old"):
        migrate_v010(client, prefix, keep_old=True)
    assert everything(client, prefix) == before

    # Into a prefix of its own the old keys can stay.
    target = f"{prefix}-new"
    code, err = cli(
        capsys, "migrate", "--url", redis_url, "--prefix", prefix, "--to-prefix", target,
        "--keep-old",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert {k for k in before if not k.endswith(b":threads")} <= set(everything(client, prefix))
    with RedisSaver(redis_url, prefix=target) as saver:
        for thread in expected:
            check_against_010_reading(saver, thread)


def test_keep_old_leaves_the_010_keys(
    client: redis.Redis, redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = restore_thread(client, prefix, "t", SOURCES[0])["threads"]
    old = {k for k in everything(client, prefix) if not k.endswith(b":threads")}
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix, "--keep-old")[0] == 0
    assert old <= set(everything(client, prefix))
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for thread in expected:
            check_against_010_reading(saver, thread)


# -- 0.1.0 prefixes the savers refuse ------------------------------------------------------


@pytest.mark.parametrize("shape", ["{agents-%s}", "my app %s"])
def test_a_prefix_010_accepted_migrates_into_another(
    client: redis.Redis, redis_url: str, shape: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.1.0 accepted any prefix ('{agents}' for a cluster hash tag, 'my app'); migrate
    refused the ones the savers refuse, and their data stayed where no saver reads it.
    --to-prefix (to_prefix=) names where it goes; without it the error names the option."""
    tag = uuid.uuid4().hex[:8]
    old, new = shape % tag, f"agents-{tag}"
    rename = {"lg": old}
    restore(client, {**rename, "myapp:agent": f"test:{tag}:unused"})
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--url", redis_url, "--prefix", old])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and repr(old) in err and "--to-prefix" in err
    with pytest.raises(ValueError, match=r"to_prefix="):
        migrate_v010(client, old)

    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", old, "--to-prefix", new)
    assert (code, err) == (0, "")
    assert list(client.scan_iter(match=f"{old}:*")) == []
    check_lg_threads(redis_url, new)
    keys = everything(client, new)
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", old, "--to-prefix", new)[0] == 0
    report = migrate_v010(client, old, to_prefix=new)
    assert (report.threads, report.checkpoints) == (0, 0)
    assert everything(client, new) == keys


def test_an_unfinished_migration_into_another_prefix_is_resumed_only_from_its_source(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The registry is parked under the target prefix, where its savers look; a rerun that
    names the target as the source would read the 0.1.0 keys under the wrong prefix."""
    old = restored["lg"]
    new = f"{old}-new"
    interrupt_after_one(monkeypatch, client, old, to_prefix=new)
    with RedisSaver(redis_url, prefix=new) as saver:
        with pytest.raises(LegacyKeyspaceError, match="has not finished"):
            saver.get_tuple({"configurable": {"thread_id": "t-fork"}})
    before = everything(client, old), everything(client, new)
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", new)
    assert code == 1 and err.count("\n") == 1, err
    assert f"--prefix {old} --to-prefix {new}" in err
    assert (everything(client, old), everything(client, new)) == before
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", old, "--to-prefix", new)[0] == 0
    check_lg_threads(redis_url, new)


@contextlib.contextmanager
def ctrl_c_after_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """For the duration, a migration run is stopped as by Ctrl-C (or a crash) after its first
    (thread, namespace): the rest stay parked. Yields the threads it migrated."""
    from langgraph_checkpoint_plainredis import _migrate

    real = _migrate._migrate_timeline
    done: list[str] = []

    def stop_after_one(*args: Any, **kw: Any) -> Any:
        if done:
            raise KeyboardInterrupt
        done.append(args[4])
        return real(*args, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(_migrate, "_migrate_timeline", stop_after_one)
        yield done


def interrupt_after_one(
    monkeypatch: pytest.MonkeyPatch, client: redis.Redis, prefix: str, **kwargs: Any
) -> list[str]:
    """`migrate_v010(client, prefix, **kwargs)` stopped after its first (thread, namespace)
    (`ctrl_c_after_one`). Returns the thread it migrated."""
    with ctrl_c_after_one(monkeypatch) as done, pytest.raises(KeyboardInterrupt):
        migrate_v010(client, prefix, **kwargs)
    assert done
    return done


@pytest.mark.parametrize(
    ("into", "keep_old"),
    [("another", False), ("another", True), ("same", False), ("same", True)],
)
def test_an_unfinished_migration_is_resumed_only_into_its_target(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    into: str,
    keep_old: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run from 'lg' into 'lg2' stopped half-way parks 0.1.0's registry under 'lg2'. A
    rerun into 'lg' (no --to-prefix) or 'lg3' found no registry under 'lg', said 'migrated
    0' with exit 0 (and deleted 'lg:seq'): the threads not migrated yet stayed parked where
    only a rerun into 'lg2' reaches them. Refused now, naming the --to-prefix that finishes
    the run, and nothing is changed; that rerun finishes, and a rerun after it is a no-op."""
    old = restored["lg"]
    target = f"{old}-new" if into == "another" else old
    other = f"{old}-3"
    keep = ["--keep-old"] if keep_old else []
    interrupt_after_one(monkeypatch, client, old, to_prefix=target, keep_old=keep_old)
    assert client.hlen(f"{target}:v010:threads") > 0  # parked, waiting for a rerun

    def keyspaces() -> list[dict[bytes, Any]]:
        return [everything(client, p) for p in (old, f"{old}-new", other)]

    before = keyspaces()
    wrong: list[list[str]] = [["--to-prefix", other]]
    if into == "another":
        wrong.append([])  # the default target, the source prefix
    for argv in wrong:
        code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", old, *argv, *keep)
        assert code == 1 and err.count("\n") == 1, (argv, err)
        assert f"--prefix {old} --to-prefix {target}`" in err, err
        assert keyspaces() == before, argv
        to_prefix = argv[1] if argv else None
        with pytest.raises(PlainRedisError, match=f"to_prefix='{target}'"):
            migrate_v010(client, old, to_prefix=to_prefix, keep_old=keep_old)
        assert keyspaces() == before, argv
    with RedisSaver(redis_url, prefix=target) as saver:  # still refused, where it was
        with pytest.raises(LegacyKeyspaceError, match="has not finished"):
            saver.get_tuple({"configurable": {"thread_id": "t-fork"}})

    code, err = cli(
        capsys, "migrate", "--url", redis_url, "--prefix", old, "--to-prefix", target, *keep
    )
    assert (code, err) == (0, "")
    check_lg_threads(redis_url, target)
    assert not client.exists(f"{old}:v010:parked", f"{target}:v010:threads")

    # Finished: a rerun, into any prefix, finds nothing and changes nothing.
    after = keyspaces()
    for argv in [["--to-prefix", target], *wrong]:
        code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", old, *argv, *keep)
        assert (code, err) == (0, ""), argv
        assert keyspaces() == after, argv

    # The record of a run stopped after its last thread (its parked registry is gone)
    # holds nothing back: a run into another prefix finds nothing and removes it.
    client.set(f"{old}:v010:parked", target)
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", old, *wrong[0], *keep)
    assert (code, err) == (0, "")
    assert not client.exists(f"{old}:v010:parked")


def test_unreadable_entries_left_parked_keep_a_rerun_into_another_prefix_refused(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run into another prefix that skipped an unreadable registry entry (exit 1) leaves
    it parked under the target; a rerun without --to-prefix exited 0 'migrated 0'. It is
    refused until the entry is removed, and the rerun the message names finishes."""
    old = restored["lg"]
    new = f"{old}-new"
    client.hset(f"{old}:threads", f"{old}:idx:lost:", "not json")
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", old, "--to-prefix", new)
    assert code == 1 and f"{new}:v010:threads" in err and "HDEL" in err
    before = everything(client, old), everything(client, new)
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", old)
    assert code == 1 and err.count("\n") == 1 and f"--to-prefix {new}`" in err, err
    assert (everything(client, old), everything(client, new)) == before

    client.hdel(f"{new}:v010:threads", f"{old}:idx:lost:")
    argv = ["migrate", "--url", redis_url, "--prefix", old, "--to-prefix", new]
    assert cli(capsys, *argv) == (0, "")
    assert not client.exists(f"{old}:v010:parked", f"{new}:v010:threads", f"{old}:seq")
    check_lg_threads(redis_url, new)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--prefix", "lg", "--to-prefix", "lg:v2"], "--to-prefix lg:v2"),
        (["--prefix", "lg:v2", "--to-prefix", "lg"], "--to-prefix lg"),
        (["--prefix", "lg:"], "--prefix lg"),
        (["--prefix", ""], "--prefix lg"),
        (["--prefix", "x", "--to-prefix", "{x}"], "'{x}'"),
    ],
)
def test_migrate_refuses_prefixes_it_cannot_migrate_between(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--url", "redis://127.0.0.1:1/0", *argv])
    assert exit_info.value.code == 2 and named in capsys.readouterr().err


# -- a cluster -----------------------------------------------------------------------------


def test_migrate_on_a_cluster_says_it_needs_a_standalone_server(
    server_pool: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bare 'MOVED 1234 127.0.0.1:7001' before, on any node: one line now, exit 1, from
    INFO or, for a user without INFO, from the cluster's reply."""
    from redis.cluster import RedisCluster

    url = server_pool.get("redis-7-cluster")
    cluster = RedisCluster.from_url(url)
    nodes = [f"redis://{n.host}:{n.port}/0" for n in cluster.get_nodes()]
    with pytest.raises(PlainRedisError, match="standalone"):
        migrate_v010(cluster, "lg")
    cluster.close()
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    for node in nodes:
        code, err = cli(capsys, "migrate", "--url", node, "--prefix", prefix)
        assert code == 1 and err.count("\n") == 1, err
        assert "Cluster" in err and "standalone" in err and "MOVED" not in err

    def no_info(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise redis.exceptions.NoPermissionError("NOPERM this user has no permissions")

    monkeypatch.setattr(redis.Redis, "info", no_info)
    failed = 0
    for node in nodes:
        code, err = cli(capsys, "migrate", "--url", node, "--prefix", prefix)
        if code:
            failed += 1
            assert err.count("\n") == 1 and "standalone" in err, err
    assert failed  # its keys are spread over the nodes: some node answers MOVED


# -- values that decode but are not what 0.1.0 stored --------------------------------------


def wrapped(value: Any) -> str:
    """`value` as 0.1.0 stored a value: JSON around the serializer's type and base64 bytes."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    kind, data = JsonPlusSerializer().dumps_typed(value)
    return json.dumps({"t": kind, "d": base64.b64encode(data).decode()})


@pytest.mark.parametrize(
    "case", ["checkpoint-a-list", "checkpoint-not-a-dict", "writes-field", "write-not-3"]
)
def test_a_misshapen_010_value_stops_the_migration_with_one_line_and_loses_nothing(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    """A value whose JSON and base64 are fine but whose content is not what 0.1.0 stored
    there (a checkpoint value that is no {checkpoint, metadata, parent_id} document, a
    writes-hash field without ':index', a write that is no (task, channel, value)) printed a
    bare TypeError, IndexError or ValueError traceback. It is a CorruptDataError naming the
    key and the fix now; once the key is repaired, the rerun migrates every thread whole."""
    prefix = restored["lg"]
    cp_key = _s(min(client.scan_iter(match=f"{prefix}:cp:t-fork::*")))
    wr_key = cp_key.replace(f"{prefix}:cp:", f"{prefix}:wr:", 1)
    good = client.get(cp_key)
    if case == "checkpoint-a-list":
        client.set(cp_key, wrapped(["not", "a", "document"]))
    elif case == "checkpoint-not-a-dict":
        client.set(cp_key, wrapped({"checkpoint": "text", "metadata": {}, "parent_id": None}))
    elif case == "writes-field":
        client.hset(wr_key, "no-index-here", wrapped(["task", "channel", 1]))
    else:
        client.hset(wr_key, "bogus-task:0", wrapped({"a": 1}))
    key = wr_key if case.startswith("write") else cp_key
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and err.count("\n") == 1, err
    assert repr(key) in err and "run the migration again" in err and "where it stopped" in err

    client.set(cp_key, good)  # type: ignore[arg-type]
    client.hdel(wr_key, "no-index-here", "bogus-task:0")
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix) == (0, "")
    assert not client.exists(f"{prefix}:v010:threads")
    check_lg_threads(redis_url, prefix)


# -- what an unfinished migration into another prefix tells the user -----------------------


def test_an_unfinished_migration_into_another_prefix_names_the_rerun_that_finishes_it(
    client: redis.Redis,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run from '{agents}' into 'agents' stopped half-way: the savers of 'agents' and
    `plainredis threads --prefix agents` said to run `plainredis migrate --prefix agents`,
    which is refused (the parked entries are of '{agents}'). The command reads the source
    from the parked registry and names the rerun; the saver, which reads only whether the
    registry is parked, says to rerun with the same --prefix and --to-prefix."""
    tag = uuid.uuid4().hex[:8]
    old, new = f"{{agents-{tag}}}", f"agents-{tag}"
    restore(client, {"lg": old, "myapp:agent": f"test:{tag}:unused"})
    interrupt_after_one(monkeypatch, client, old, to_prefix=new)
    rerun = f"--prefix '{old}' --to-prefix {new}"

    code, err = cli(capsys, "threads", "--url", redis_url, "--prefix", new)
    assert code == 1 and err.count("\n") == 1, err
    assert f"`plainredis migrate --url redis://... {rerun}`" in err
    assert f"migrate_v010(client, prefix={old!r}, to_prefix={new!r})" in err
    with RedisSaver(redis_url, prefix=new) as saver:
        with pytest.raises(LegacyKeyspaceError) as refused:
            saver.get_tuple({"configurable": {"thread_id": "t-fork"}})
    message = str(refused.value)
    assert "same --prefix and --to-prefix" in message and f"--to-prefix {new}`" in message
    assert f"--prefix {new}`" not in message

    code, err = cli(capsys, "migrate", "--url", redis_url, *rerun.replace("'", "").split())
    assert (code, err) == (0, "")
    check_lg_threads(redis_url, new)


def test_an_unfinished_migration_in_place_names_its_prefix_alone(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = restored["lg"]
    interrupt_after_one(monkeypatch, client, prefix)
    code, err = cli(capsys, "threads", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and f"`plainredis migrate --url redis://... --prefix {prefix}`" in err, err
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix) == (0, "")


# -- the URL and the Redis user of `plainredis migrate` ------------------------------------


def test_migrate_refuses_a_url_that_decodes_replies_before_it_changes_anything(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`?decode_responses=true` printed the saver's ValueError as a traceback; it exits 2
    with usage, as the other commands do, and nothing is read or written. Its message was
    then the one for Python callers (`client=...`): remove it from the URL."""
    if "?" in redis_url:
        pytest.skip("a URL with a query of its own")
    prefix = restored["lg"]
    before = everything(client, prefix)
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--url", f"{redis_url}?decode_responses=true", "--prefix", prefix])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("usage: plainredis migrate"), err
    assert "decode_responses=true in its query" in err and "remove it from the URL" in err
    assert "client=" not in err and "url=" not in err, err
    assert everything(client, prefix) == before


def test_migrate_takes_a_url_asking_for_resp3_as_the_other_commands_do(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The other commands drop `protocol` from the URL's query (they parse RESP2 replies);
    migrate kept it, and on Redis 5 stopped with "unknown command HELLO"."""
    if "?" in redis_url:
        pytest.skip("a URL with a query of its own")
    prefix = restored["lg"]
    url = f"{redis_url}?protocol=3"
    assert cli(capsys, "migrate", "--url", url, "--prefix", prefix) == (0, "")
    check_lg_threads(redis_url, prefix)


ACCESS = Path(__file__).resolve().parents[3] / "docs" / "operations" / "access.md"


def documented_migrate_rules(prefix: str) -> list[str]:
    """The ACL line of docs/operations/access.md for `prefix`, plus what its note on
    `plainredis migrate` adds."""
    text = ACCESS.read_text()
    (line,) = re.findall(r"^ACL SETUSER \S+ (.+)$", text, re.MULTILINE)
    note = text[text.index("- **`plainredis migrate`**") :].split("\n- ", 1)[0]
    (extra,) = re.findall(r"plus `(\+[^`]+)`", note)
    rules = [f"~{prefix}:*" if r == "~lg:*" else ">pw" if r.startswith(">") else r
             for r in line.split()]  # fmt: skip
    return ["resetkeys", *rules, *extra.split()]


@pytest.mark.parametrize("refused", ["rename", "exec", None])
def test_migrate_as_a_user_without_what_it_needs_names_the_access_note(
    client: redis.Redis,
    redis_url: str,
    redis_kind: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    refused: str | None,
) -> None:
    """A user that may not RENAME (or EXEC) got the inspector's list of what it needs; the
    error names migrate's own needs and the note on it in docs/operations/access.md, whose
    grants suffice. Nothing is changed by a refused run."""
    if redis_kind == "redis-5" or "@" in redis_url or not redis_url.startswith("redis://"):
        pytest.skip("Redis 5 has no ACLs; a URL of another shape")
    prefix = restored["lg"]
    user = f"migrate-{uuid.uuid4().hex[:8]}"
    rules = documented_migrate_rules(prefix)
    if refused:
        rules.append(f"-{refused}")
    client.execute_command("ACL", "SETUSER", user, *rules)
    try:
        url = redis_url.replace("redis://", f"redis://{user}:pw@", 1)
        before = everything(client, prefix)
        code, err = cli(capsys, "migrate", "--url", url, "--prefix", prefix)
        if refused is None:
            assert (code, err) == (0, "")
            check_lg_threads(redis_url, prefix)
            return
        assert code == 1 and err.count("\n") == 1, err
        assert "plainredis migrate needs" in err and "RENAME, MULTI and EXEC" in err
        assert "docs/operations/access.md" in err and "inspector" not in err
        assert everything(client, prefix) == before
    finally:
        client.execute_command("ACL", "DELUSER", user)


# -- 0.1.0 keys that outlived their checkpoint, and registry entries of braced threads -----


def expire_010(client: redis.Redis, prefix: str, thread_id: str, ns: str, ids: list[str]) -> None:
    """What 0.1.0's TTL per key did: the checkpoints `ids` of a timeline expired (its writes
    and values outlived them); with no `ids`, the timeline itself and every checkpoint of it."""
    for cid in ids or [_s(c) for c in client.zrange(f"{prefix}:idx:{thread_id}:{ns}", 0, -1)]:
        assert client.delete(f"{prefix}:cp:{thread_id}:{ns}:{cid}") == 1
    if not ids:
        assert client.delete(f"{prefix}:idx:{thread_id}:{ns}") == 1


def check_expired(saver: RedisSaver, expected: dict[str, Any], gone: list[str]) -> None:
    """A timeline reads as 0.1.0 read it, without the checkpoints `gone`."""
    conf = {"thread_id": expected["thread_id"], "checkpoint_ns": expected["checkpoint_ns"]}
    listed = {t.checkpoint["id"]: t for t in saver.list({"configurable": conf})}
    assert list(listed) == [c for c in expected["checkpoint_ids"] if c not in gone]
    for want in expected["checkpoints"]:
        if want["checkpoint_id"] not in gone:
            got = listed[want["checkpoint_id"]]
            assert contents(got.checkpoint["channel_values"]) == want["messages"]
            assert [[w[0], w[1]] for w in got.pending_writes] == want["pending_writes"]


@pytest.mark.parametrize("where", ["in-place", "to-prefix", "braced"])
def test_the_writes_of_a_010_checkpoint_that_expired_go_with_its_timeline(
    client: redis.Redis,
    redis_url: str,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    """0.1.0 set a TTL per key: the writes of a checkpoint that expired outlived it, and the
    migration, which read a checkpoint's writes only through the checkpoint, left them under
    the prefix for good. The timeline still lists the checkpoint, which names its writes
    key: deleted with the timeline's keys. Its values, which only the checkpoint named, stay
    (`plainredis stats --scan` lists them); the live checkpoints read back whole, a key of
    another program stays, and a rerun changes nothing."""
    braced = where == "braced"
    threads = ("{a}", "a") if braced else ("t-fork", "user-42:session-7")
    expected = [
        t
        for thread, source in zip(threads, (SOURCES[0], SOURCES[2]), strict=True)
        for t in restore_thread(client, prefix, thread, source)["threads"]
    ]
    fork = expected[0]
    gone = fork["checkpoint_ids"][-2:]  # its oldest: the newest outlives them, as under a TTL
    outlived = [f"{prefix}:wr:{fork['thread_id']}::{cid}" for cid in gone]
    assert any(client.exists(key) for key in outlived)
    expire_010(client, prefix, fork["thread_id"], "", gone)
    foreign = f"{prefix}:blob:someone-else"
    client.set(foreign, "not 0.1.0's")
    target = f"{prefix}-new" if where == "to-prefix" else prefix
    argv = ["migrate", "--url", redis_url, "--prefix", prefix, "--to-prefix", target]
    assert cli(capsys, *argv) == (0, "")

    assert not any(client.exists(key) for key in outlived)
    with RedisSaver(redis_url, prefix=target) as saver:
        for thread in expected:
            if thread is fork:
                check_expired(saver, thread, gone)
            else:
                check_against_010_reading(saver, thread)
    left = [_s(k) for k in client.scan_iter(match=f"{prefix}:*") if b":{" not in k or braced]
    old = [k for k in left if k != foreign and ":run:" not in k and k != f"{prefix}:threads"]
    if not braced:  # only values of the expired checkpoints (a braced thread's live keys are
        assert old and all(k.startswith(f"{prefix}:blob:") for k in old)  # the new layout's)
    assert foreign in left
    keys = everything(client, prefix), everything(client, target)
    assert cli(capsys, *argv) == (0, "")
    assert (everything(client, prefix), everything(client, target)) == keys


@pytest.mark.parametrize("then", ["repaired", "dropped"])
@pytest.mark.parametrize("value", ["not json", '{"thread": "a", "ns": ""}'])
def test_a_corrupt_010_registry_entry_of_a_braced_thread_stops_the_migration(
    client: redis.Redis,
    redis_url: str,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    value: str,
    then: str,
) -> None:
    """An unreadable entry for the timeline 'lg:idx:{a}:' was skipped (listed, exit 1) and
    one naming another timeline was taken for that one's, silently: either way '{a}''s 0.1.0
    keys stayed where the migration of thread 'a' writes, mixing the two. It stops the run
    before anything is written, naming the registry, the entry and the fix; once the entry
    is repaired, or the timeline dropped, the rerun migrates the rest whole."""
    from langgraph_checkpoint_plainredis._inspect import Inspector

    braced = restore_thread(client, prefix, "{a}", SOURCES[0])["threads"]
    plain = restore_thread(client, prefix, "a", SOURCES[1])["threads"]
    registry, field = f"{prefix}:threads", f"{prefix}:idx:{{a}}:"
    good = client.hget(registry, field)
    client.hset(registry, field, value)
    before = everything(client, prefix)
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and err.count("\n") == 1, err
    assert repr(registry) in err and repr(field) in err and "thread 'a'" in err, err
    assert "HDEL" in err and "nothing was changed" in err
    assert everything(client, prefix) == before
    with pytest.raises(PlainRedisError, match=re.escape(repr(field))):
        migrate_v010(client, prefix)
    assert everything(client, prefix) == before

    if then == "repaired":
        client.hset(registry, field, good)  # type: ignore[arg-type]
    else:
        client.hdel(registry, field)
        client.delete(field)
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix) == (0, "")
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for thread in plain + (braced if then == "repaired" else []):
            check_against_010_reading(saver, thread)
        listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert listed == ({"a", "{a}"} if then == "repaired" else {"a"})
    with Inspector.connect(redis_url, prefix) as inspector:
        orphans = inspector.usage(scan=True).orphans
    # a dropped timeline's other 0.1.0 keys stay, listed as orphans (as the error says)
    assert bool(orphans) == (then == "dropped")


def test_a_010_registry_entry_naming_another_timeline_is_skipped_and_named(
    client: redis.Redis, redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry whose value names another timeline than its own (its field) was migrated
    from the key its field names, which was then deleted, whatever it was; it is skipped and
    listed as an unreadable entry is."""
    expected = restore_thread(client, prefix, "t", SOURCES[0])["threads"]
    field = f"{prefix}:idx:lost:"
    client.zadd(field, {"not a checkpoint of 't'": 0})
    client.hset(f"{prefix}:threads", field, json.dumps({"thread": "t", "ns": ""}))
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and repr(field) in err and "HDEL" in err, err
    assert client.zrange(field, 0, -1) == [b"not a checkpoint of 't'"]
    client.hdel(f"{prefix}:v010:threads", field)
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix) == (0, "")
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for thread in expected:
            check_against_010_reading(saver, thread)


# -- a long 0.1.0 timeline: no command past Redis's argument limit --------------------------


def write_010_thread(
    client: redis.Redis,
    prefix: str,
    thread_id: str,
    checkpoints: int,
    channels: int,
    value: Callable[[str], str] = wrapped,
) -> None:
    """Writes a 0.1.0 thread as 0.1.0 laid it out: channel ``c{i}`` gets a new version (and
    blob, ``value`` of its text) every ``i + 1`` checkpoints, so most checkpoints name the
    blobs of their parent."""
    versions = dict.fromkeys((f"c{i}" for i in range(channels)), 0)
    parent = None
    for n in range(checkpoints):
        cid = f"00000000-0000-6000-8000-{n:012d}"
        for i, channel in enumerate(versions):
            if n % (i + 1) == 0:
                versions[channel] += 1
                key = f"{prefix}:blob:{thread_id}::{channel}:{versions[channel]}"
                client.set(key, value(f"{channel} at {n}"))
        checkpoint = {
            "v": 4,
            "id": cid,
            "ts": "2026-11-30T10:53:11+00:00",
            "channel_versions": dict(versions),
            "versions_seen": {},
        }
        doc = {"checkpoint": checkpoint, "metadata": {"step": n}, "parent_id": parent}
        client.set(f"{prefix}:cp:{thread_id}::{cid}", wrapped(doc))
        client.hset(f"{prefix}:wr:{thread_id}::{cid}", "task:0", wrapped(["task", "c0", n]))
        client.zadd(f"{prefix}:idx:{thread_id}:", {cid: n})
        parent = cid
    where = json.dumps({"thread": thread_id, "ns": ""})
    client.hset(f"{prefix}:threads", f"{prefix}:idx:{thread_id}:", where)


def counting_client(url: str) -> tuple[redis.Redis, list[tuple[str, list[bytes]]]]:
    """A client of the server at `url` that records every command it sends, as sent."""
    sent: list[tuple[str, list[bytes]]] = []

    class Packer:
        def __init__(self, real: Any) -> None:
            self.real = real

        def pack(self, *args: Any) -> Any:
            sent.append((str(args[0]).upper(), [_b(a) for a in args[1:]]))
            return self.real.pack(*args)

    class Counting(redis.Connection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._command_packer = Packer(self._command_packer)

    return redis.Redis.from_url(url, protocol=2, connection_class=Counting), sent


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def test_a_long_010_timeline_is_deleted_in_commands_redis_takes(
    client: redis.Redis,
    redis_url: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old keys of a timeline went in one DEL naming every channel's blob once per
    checkpoint: past 1,048,576 arguments (17,500 checkpoints of 60 channels) Redis 5 and 6
    drop the connection, and every rerun stopped there. Each key is named once now, in
    commands of at most `_CHUNK` keys (lowered here, so the thread is small), and the
    registry entries a rerun parks go in commands of at most `_CHUNK` fields."""
    from langgraph_checkpoint_plainredis import _migrate

    monkeypatch.setattr(_migrate, "_CHUNK", 5, raising=False)
    new = f"{prefix}-new"
    write_010_thread(client, prefix, "a-long-thread", checkpoints=30, channels=4)
    write_010_thread(client, prefix, "b", checkpoints=2, channels=2)
    counted, sent = counting_client(redis_url)
    interrupt_after_one(monkeypatch, counted, prefix, to_prefix=new)  # longest id first
    # A 0.1.0 writer left running registered more threads: the rerun parks them too.
    for n in range(12):
        write_010_thread(client, prefix, f"s{n}", checkpoints=2, channels=2)
    old = set(client.scan_iter(match=f"{prefix}:*"))
    report = migrate_v010(counted, prefix, to_prefix=new)
    counted.close()
    assert (report.threads, report.checkpoints, report.skipped) == (13, 26, [])

    deleted = [key for command, args in sent if command == "DEL" for key in args]
    assert all(len(args) <= 5 for command, args in sent if command == "DEL")
    assert len(deleted) == len(set(deleted))  # each key once
    assert old <= set(deleted)
    assert [len(args) for command, args in sent if command == "HSET"] == [11, 11, 5]
    assert list(client.scan_iter(match=f"{prefix}:*")) == []
    with RedisSaver(redis_url, prefix=new) as saver:
        listed = list(saver.list({"configurable": {"thread_id": "a-long-thread"}}))
        assert len(listed) == 30
        latest = listed[0]
        assert latest.metadata["step"] == 29 and latest.pending_writes == [("task", "c0", 29)]
        assert latest.checkpoint["channel_values"] == {
            "c0": "c0 at 29",
            "c1": "c1 at 28",
            "c2": "c2 at 27",
            "c3": "c3 at 28",
        }


# -- a long 0.1.0 timeline: round trips and memory per batch, not per checkpoint ----------


def round_trip_client(url: str) -> tuple[redis.Redis, list[int], list[tuple[str, list[bytes]]]]:
    """`counting_client`, connected, that also counts its round trips from now on (a command,
    a pipeline or a transaction: one each). It overrides `send_command`, so that a saver
    sends its scripts through it too (see `_wire.direct_pool`)."""
    trips = [0]
    client, sent = counting_client(url)
    counting = client.connection_pool.connection_class

    class Trips(counting):
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            trips[0] += 1
            super().send_packed_command(command, check_health)

        def send_command(self, *args: Any, **kwargs: Any) -> None:
            super().send_command(*args, **kwargs)

    client.connection_pool.connection_class = Trips
    client.ping()
    trips[0] = 0
    sent.clear()
    return client, trips, sent


def test_a_long_010_timeline_migrates_in_a_few_round_trips_per_batch(
    redis_url: str, client: redis.Redis, prefix: str
) -> None:
    """Each checkpoint cost 9.3 round trips or more (a GET per channel's blob, the put, the
    writes, a get_tuple to read it back): 722 checkpoints/s on loopback, about 100/s at 1 ms
    from the server. A batch of up to `_BATCH` checkpoints costs 4 now (their payloads and
    writes; their blobs, each once; their puts and writes; their read-back), the first of a
    timeline `_FIRST`; a timeline 2 more (its first ids; its keys and registry entry
    deleted)."""
    from langgraph_checkpoint_plainredis import _migrate

    first, batch = _migrate._FIRST, _migrate._BATCH
    # The server has the scripts cached (a first call sends one again, whole).
    write_010_thread(client, f"{prefix}-warm", "t", checkpoints=1, channels=1)
    migrate_v010(client, f"{prefix}-warm")
    trips: dict[int, int] = {}
    for checkpoints in (first, first + batch, first + 3 * batch):
        source = f"{prefix}-{checkpoints}"
        write_010_thread(client, source, "t", checkpoints=checkpoints, channels=4)
        blobs = set(client.scan_iter(match=f"{source}:blob:*"))
        counted, sent, commands = round_trip_client(redis_url)
        report = migrate_v010(counted, source)
        counted.close()
        assert (report.checkpoints, report.skipped) == (checkpoints, [])
        trips[checkpoints] = sent[0]
        # Each 0.1.0 blob is read once, though most checkpoints name their parent's.
        reads = [key for c, args in commands if c in ("GET", "MGET") for key in args]
        assert sorted(key for key in reads if key in blobs) == sorted(blobs)
    # The run's own 12 (its lock, 1; its checks and the parking, 7; the end, 3; the lock's
    # release, 1), the timeline's 2 (its first ids; its keys and registry entry deleted), and
    # 4 per batch: 4 round trips for 64 more checkpoints (9 per checkpoint of 4 channels
    # before). The lock is renewed every few seconds only: no round trip here.
    assert trips == {
        first: 12 + 2 + 4,
        first + batch: 12 + 2 + 4 * 2,
        first + 3 * batch: 12 + 2 + 4 * 4,
    }
    with RedisSaver(redis_url, prefix=f"{prefix}-{first + 3 * batch}") as saver:
        listed = list(saver.list({"configurable": {"thread_id": "t"}}))
    assert len(listed) == first + 3 * batch
    assert listed[0].checkpoint["channel_values"]["c0"] == f"c0 at {first + 3 * batch - 1}"


class Tracked:
    """A channel value that counts how many of its kind are alive, and the most at once."""

    alive = 0
    most = 0

    def __init__(self, text: str) -> None:
        self.text = text
        Tracked.alive += 1
        Tracked.most = max(Tracked.most, Tracked.alive)

    def __del__(self) -> None:
        Tracked.alive -= 1


def tracked(text: str) -> str:
    """A `Tracked` value as 0.1.0 stored it."""
    return json.dumps({"t": "tracked", "d": base64.b64encode(text.encode()).decode()})


def test_a_long_010_timeline_migrates_holding_one_batch(
    client: redis.Redis, redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every decoded checkpoint of a timeline (values, metadata, writes) was held until all
    of it was read back: 800 turns of a chat held 623 MiB. Values are decoded, compared and
    let go a checkpoint at a time now, and a batch holds about `_BATCH_BYTES` of values."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from langgraph_checkpoint_plainredis import _migrate

    class Serde(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            if isinstance(obj, Tracked):
                return "tracked", obj.text.encode()
            return super().dumps_typed(obj)

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            if data[0] == "tracked":
                return Tracked(data[1].decode())
            return super().loads_typed(data)

    checkpoints = _migrate._FIRST + 3 * _migrate._BATCH
    write_010_thread(client, prefix, "long", checkpoints=checkpoints, channels=2, value=tracked)
    Tracked.alive = Tracked.most = 0
    report = migrate_v010(client, prefix, serde=Serde())
    assert (report.checkpoints, report.skipped) == (checkpoints, [])
    assert Tracked.most <= 2  # a checkpoint's two values, read back; 0.1.0's one at a time
    assert Tracked.alive == 0

    # Large values: a batch takes about `_BATCH_BYTES` of them (lowered here).
    monkeypatch.setattr(_migrate, "_BATCH_BYTES", 64 << 10)
    held: list[int] = []
    real = _migrate._verify

    def verify(saver: Any, tk: Any, ns: str, batch: list[Any], blobs: dict[str, Any]) -> None:
        named = {key for checkpoint in batch for key in checkpoint.blob_keys}
        held.append(sum(len(blobs[key].stored) for key in named if blobs[key] is not None))
        real(saver, tk, ns, batch, blobs)

    monkeypatch.setattr(_migrate, "_verify", verify)
    big = f"{prefix}-big"
    write_010_thread(
        client, big, "t", checkpoints=40, channels=2, value=lambda text: wrapped(text * 800)
    )
    assert migrate_v010(client, big).checkpoints == 40
    assert len(held) > 40 // _migrate._FIRST + 1
    assert max(held[1:]) <= 2 * _migrate._BATCH_BYTES, held


def test_a_connection_lost_during_migrate_says_so_and_that_a_rerun_goes_on(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A connection the server dropped mid-run (a command past its argument limit) was
    reported as "cannot connect ...: start Redis there", of a server that is running."""
    from langgraph_checkpoint_plainredis import _migrate

    prefix = restored["lg"]
    real = _migrate._migrate_timeline
    done: list[str] = []

    def drop_after_one(*args: Any, **kw: Any) -> Any:
        if done:
            raise redis.ConnectionError("Error 104 while writing to socket. Connection reset")
        done.append(args[4])
        return real(*args, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(_migrate, "_migrate_timeline", drop_after_one)
        code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and err.count("\n") == 1, err
    assert "lost the connection" in err and "Connection reset" in err
    assert "start Redis" not in err and "goes on where it stopped" in err
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix) == (0, "")
    check_lg_threads(redis_url, prefix)


# -- a target prefix that holds threads of the same ids ------------------------------------


def test_a_migration_into_a_prefix_holding_threads_of_the_same_ids_is_refused(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """0.1.0 wrote thread 'user-42:session-7' under both recorded prefixes; once one is
    migrated, a migration of the other into it mixed the two threads into one timeline,
    silently. It is refused before anything changes, naming the thread and the fixes."""
    lg, other = restored["lg"], restored["myapp:agent"]
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", lg) == (0, "")
    before = everything(client, lg), everything(client, other)
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", other, "--to-prefix", lg)
    assert code == 1 and err.count("\n") == 1, err
    assert "1 of the " in err and "'user-42:session-7'" in err and repr(lg) in err
    assert "empty" in err and "delete" in err and "nothing was changed" in err
    with pytest.raises(PlainRedisError, match="user-42:session-7"):
        migrate_v010(client, other, to_prefix=lg)
    assert (everything(client, lg), everything(client, other)) == before

    with RedisSaver(redis_url, prefix=lg) as saver:
        saver.delete_thread("user-42:session-7")
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", other, "--to-prefix", lg)[0] == 0
    with RedisSaver(redis_url, prefix=lg) as saver:
        for thread in DUMP["expected"]["threads"]:
            if thread["prefix"] == "myapp:agent":
                check_against_010_reading(saver, thread)
            elif thread["thread_id"] != "user-42:session-7":
                check_against_010_reading(saver, thread)


def test_the_refusal_of_a_010_target_does_not_advise_a_merge(
    client: redis.Redis, redis_url: str, restored: dict[str, str]
) -> None:
    """It advised "migrate that one first", after which the run mixed threads of the same
    id; that run is refused now, and the message says so."""
    with pytest.raises(PlainRedisError, match="holds no threads.*refuses the thread ids") as info:
        migrate_v010(client, restored["myapp:agent"], to_prefix=restored["lg"])
    assert "migrate that one first" not in str(info.value)


# -- a saver refused once checks again ------------------------------------------------------


def test_a_sync_saver_refused_once_refuses_while_the_migration_runs(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A saver made ready by its first call never checked again: refused once for the 0.1.0
    registry, it read the threads the running migration had not reached as empty (and a
    graph started them anew). It checks again on its next call."""
    prefix = restored["lg"]
    with RedisSaver(redis_url, prefix=prefix) as saver:
        with pytest.raises(LegacyKeyspaceError, match="Stop every process that uses"):
            saver.get_tuple({"configurable": {"thread_id": "t-fork"}})
        done = interrupt_after_one(monkeypatch, client, prefix)
        waiting = {"configurable": {"thread_id": next(waiting_threads(done))}}
        with pytest.raises(LegacyKeyspaceError, match="has not finished.*every process that uses"):
            saver.get_tuple(waiting)
        migrate_v010(client, prefix)
        assert saver.get_tuple(waiting) is not None


async def test_an_async_saver_refused_once_refuses_while_the_migration_runs(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    prefix = restored["lg"]
    async with AsyncRedisSaver(redis_url, prefix=prefix) as saver:
        with pytest.raises(LegacyKeyspaceError, match="Stop every process that uses"):
            await saver.aget_tuple({"configurable": {"thread_id": "t-fork"}})
        done = interrupt_after_one(monkeypatch, client, prefix)
        waiting = {"configurable": {"thread_id": next(waiting_threads(done))}}
        with pytest.raises(LegacyKeyspaceError, match="has not finished.*every process that uses"):
            await saver.aget_tuple(waiting)
        migrate_v010(client, prefix)
        assert await saver.aget_tuple(waiting) is not None


def waiting_threads(done: list[str]) -> Any:
    """The recorded threads of `lg` that a run stopped after `done` has not migrated."""
    return (
        t["thread_id"]
        for t in DUMP["expected"]["threads"]
        if t["prefix"] == "lg" and t["thread_id"] not in done
    )


# -- what migrate_v010 takes as its client -------------------------------------------------


@pytest.mark.parametrize("kind", ["asyncio", "url"])
def test_migrate_v010_given_no_blocking_client_names_the_type_and_the_fix(
    client: redis.Redis, redis_url: str, restored: dict[str, str], kind: str
) -> None:
    """A `redis.asyncio` client failed with "'coroutine' object has no attribute 'get'",
    a URL with "'str' object has no attribute 'info'"."""
    import redis.asyncio

    prefix = restored["lg"]
    before = everything(client, prefix)
    given: Any = redis.asyncio.Redis.from_url(redis_url) if kind == "asyncio" else redis_url
    name = "redis.asyncio.client.Redis" if kind == "asyncio" else "str"
    with pytest.raises(
        TypeError, match=rf"type {re.escape(name)}:.*redis\.Redis\.from_url\(url, protocol=2\)"
    ) as info:
        migrate_v010(given, prefix)
    if kind == "url":
        assert "plainredis migrate --url" in str(info.value)
    assert everything(client, prefix) == before


def test_migrate_v010_given_a_resp3_client_on_redis_5_names_protocol_2(server_pool: Any) -> None:
    """redis-py 8 speaks RESP3 by default, which Redis 5 lacks: `migrate_v010(redis.Redis.
    from_url(url))`, as the guide showed, failed with a bare "unknown command 'HELLO'". It
    is a PlainRedisError naming protocol=2, before anything is changed, as the savers'."""
    url = server_pool.get("redis-5")
    admin = redis.Redis.from_url(url, protocol=2)
    prefix = f"test:{uuid.uuid4().hex[:8]}"
    write_010_thread(admin, prefix, "t", checkpoints=3, channels=2)
    before = everything(admin, prefix)
    resp3 = redis.Redis.from_url(url, protocol=3)  # redis-py 8's default
    with pytest.raises(PlainRedisError) as info:
        migrate_v010(resp3, prefix)
    message = str(info.value)
    assert "does not speak RESP3" in message and "HELLO" in message
    assert "redis.Redis.from_url(url, protocol=2)" in message
    assert "plainredis migrate --url" in message and "Nothing was changed" in message
    assert everything(admin, prefix) == before
    resp3.close()
    fixed = redis.Redis.from_url(url, protocol=2)  # the fix the message names
    assert migrate_v010(fixed, prefix).threads == 1
    with RedisSaver(client=fixed, prefix=prefix) as saver:
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 3
    fixed.close()
    admin.close()


# -- a rerun into another prefix after a 0.1.0 writer went on ---------------------------------


@pytest.mark.parametrize("keep_old", [False, True])
def test_a_rerun_after_a_010_writer_went_on_is_refused_without_advising_a_delete(
    client: redis.Redis, keep_old: bool
) -> None:
    """A run into another prefix finished; a 0.1.0 writer left running then put the next
    checkpoint of the thread. The rerun is refused, changing nothing, and the message no
    longer advises deleting the migrated thread (that lost its history). Adding to it is no
    fix: the new checkpoint names values the run deleted (without `keep_old`), and the app
    may have gone on on the migrated thread (a review found both with a version that did)."""
    old, new = f"old-{uuid.uuid4().hex[:8]}", f"new-{uuid.uuid4().hex[:8]}"
    write_010_thread(client, old, "t", checkpoints=3, channels=2)
    migrate_v010(client, old, to_prefix=new, keep_old=keep_old)
    cid, parent = "00000000-0000-6000-8000-000000000003", "00000000-0000-6000-8000-000000000002"
    client.set(f"{old}:blob:t::c0:9", wrapped("c0 at 3"))
    checkpoint = {
        "v": 4,
        "id": cid,
        "ts": "2026-11-30T10:53:11+00:00",
        "channel_versions": {"c0": 9, "c1": 2},
        "versions_seen": {},
    }
    doc = {"checkpoint": checkpoint, "metadata": {"step": 3}, "parent_id": parent}
    client.set(f"{old}:cp:t::{cid}", wrapped(doc))
    client.zadd(f"{old}:idx:t:", {cid: 3})
    client.hset(f"{old}:threads", f"{old}:idx:t:", json.dumps({"thread": "t", "ns": ""}))
    before = everything(client, old), everything(client, new)
    with pytest.raises(PlainRedisError, match="0.1.0 writer went on afterwards, keep them") as info:
        migrate_v010(client, old, to_prefix=new, keep_old=keep_old)
    assert "nothing was changed" in str(info.value)
    assert (everything(client, old), everything(client, new)) == before
    with RedisSaver(client=client, prefix=new) as saver:
        listed = list(saver.list({"configurable": {"thread_id": "t"}}))
    assert [t.metadata["step"] for t in listed] == [2, 1, 0]


def test_migrate_v010_takes_a_wrapper_of_a_blocking_client(
    client: redis.Redis, redis_url: str, restored: dict[str, str]
) -> None:
    """A wrapper with `execute_command` and `pipeline` (instrumentation's, say), which
    `RedisSaver` takes, was refused by the check for a blocking client."""

    real = redis.Redis.from_url(redis_url, protocol=2)
    report = migrate_v010(Forwarding(real), restored["lg"])  # type: ignore[arg-type]
    assert report.threads > 0
    real.close()


@pytest.mark.parametrize("how", ["getattr", "class"])
def test_migrate_v010_refuses_a_wrapper_of_an_asyncio_client(
    client: redis.Redis, redis_url: str, restored: dict[str, str], how: str
) -> None:
    """A wrapper passes the duck-typed check; around a `redis.asyncio` client it failed later
    with "'coroutine' object has no attribute 'get'"."""
    import redis.asyncio

    real = redis.asyncio.Redis.from_url(redis_url)
    given = Forwarding(real) if how == "getattr" else Transparent(real)
    before = everything(client, restored["lg"])
    with pytest.raises(TypeError, match="blocking commands"):
        migrate_v010(given, restored["lg"])  # type: ignore[arg-type]
    assert everything(client, restored["lg"]) == before


def test_a_rerun_after_010_expired_a_value_the_stopped_run_had_copied_goes_on(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stopped after writing part of a timeline and before reading it back; 0.1.0's
    TTL then expired a value those checkpoints read. Every rerun stopped with "its channel
    values differ" and the target stayed refused: the copy the stopped run made is kept."""

    class Stopped(BaseException):
        pass

    def stop(*args: Any, **kwargs: Any) -> None:
        raise Stopped

    from langgraph_checkpoint_plainredis import _migrate

    write_010_thread(client, prefix, "t", checkpoints=6, channels=2)
    with monkeypatch.context() as patched:
        patched.setattr(_migrate, "_verify", stop)
        with pytest.raises(Stopped):
            migrate_v010(client, prefix)
    client.delete(f"{prefix}:blob:t::c1:1")  # as 0.1.0's TTL would
    report = migrate_v010(client, prefix)
    assert report.threads == 1
    with RedisSaver(client=client, prefix=prefix) as saver:
        newest = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert newest is not None and newest.metadata["step"] == 5


@pytest.mark.parametrize("cls", [RedisSaver, AsyncRedisSaver])
async def test_a_thread_of_the_current_layout_under_a_010_registry_is_refused_too(
    client: redis.Redis, redis_url: str, prefix: str, cls: Any
) -> None:
    """Under 0.1.0's registry (a hash) `list` and the CLI's `threads`, `history` and `stats`
    refuse the keyspace, but reading one thread checked the registry only when the thread
    was not found: `get_tuple` (and `plainredis show`) of a thread an upgraded saver had
    written returned it. A saver's first call reads the registry's type."""
    with RedisSaver(redis_url, prefix=prefix) as saver:
        saver.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
        )
    client.delete(f"{prefix}:threads")
    client.hset(f"{prefix}:threads", "t", "1")  # a 0.1.0 writer started on the prefix again
    saver2 = cls(redis_url, prefix=prefix)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with pytest.raises(LegacyKeyspaceError, match="Stop every process that uses"):
        if cls is RedisSaver:
            saver2.get_tuple(config)
        else:
            await saver2.aget_tuple(config)
    assert client.type(f"{prefix}:threads") == b"hash"  # nothing changed
    if cls is RedisSaver:
        saver2.close()
    else:
        await saver2.aclose()


# -- stdout gone, Ctrl-C, timelines gone, counts, TTL floor, the lock ----------------------

MIGRATE_DOC = Path(__file__).resolve().parents[3] / "docs" / "migrate" / "plainredis-0.1.md"


@pytest.mark.parametrize("stdout", ["closed pipe", "full disk"])
def test_migrate_goes_on_to_its_end_when_its_stdout_fails(
    client: redis.Redis, redis_url: str, restored: dict[str, str], stdout: str
) -> None:
    """`plainredis migrate | head -3` exited 141 after the reader left, and `> /dev/full`
    with a traceback, both silent on stderr and leaving the keyspace parked (refused by every
    saver until a rerun). The run goes on to its end, and says on stderr what happened."""
    prefix = restored["lg"]
    argv = [sys.executable, "-m", "langgraph_checkpoint_plainredis", "migrate", "--url"]
    argv += [redis_url, "--prefix", prefix]
    with open("/dev/full", "w") if stdout == "full disk" else nullcontext() as full:
        run = subprocess.Popen(
            argv, stdout=full or subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        if run.stdout is not None:
            run.stdout.close()  # the reader left before the first line
        _, err = run.communicate(timeout=120)
    assert run.returncode == 0 and err.count("\n") == 1, err
    assert err.startswith("plainredis: stdout failed during the migration"), err
    assert "went on to its end: migrated 4 thread namespaces" in err, err
    assert not client.exists(f"{prefix}:v010:threads", f"{prefix}:v010:parked")
    check_lg_threads(redis_url, prefix)


def test_ctrl_c_during_migrate_says_where_the_run_stopped_and_how_to_go_on(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C printed only "plainredis: interrupted" while the keyspace was half-migrated."""
    prefix = restored["lg"]
    with ctrl_c_after_one(monkeypatch):
        code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 130, err
    assert "interrupted during the migration" in err, err
    assert "threads migrated so far stay migrated, the rest keep their 0.1.0 keys" in err
    assert "same command run again goes on where it stopped" in err
    assert client.exists(f"{prefix}:v010:threads")  # parked: the savers refuse it
    assert not client.exists(f"{prefix}:v010:lock")  # released: the rerun is not refused
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix) == (0, "")
    check_lg_threads(redis_url, prefix)


def test_a_timeline_that_is_gone_is_reported_skipped_and_not_counted(
    client: redis.Redis, redis_url: str, restored: dict[str, str]
) -> None:
    """A registry entry whose 0.1.0 timeline key had expired was reported as "migrated
    thread ..." and counted."""
    prefix = restored["lg"]
    client.delete(f"{prefix}:idx:t-fork:")  # as 0.1.0's TTL would
    lines: list[str] = []
    report = migrate_v010(client, prefix, progress=lines.append)
    assert report.threads == 3 and report.gone == [("t-fork", "")]
    assert not any("migrated thread 't-fork'" in line for line in lines), lines
    assert (
        f"skipped thread 't-fork' namespace '': gone (its 0.1.0 timeline '{prefix}:idx:t-fork:'"
        in "\n".join(lines)
    )
    assert not client.exists(f"{prefix}:v010:threads")  # its entry went with the run


def test_migrate_counts_the_blobs_it_wrote_and_the_guide_shows_what_it_prints(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The count of blobs was of blob references (a value every checkpoint named, counted per
    checkpoint): 141 checkpoints, 602 blobs when 231 values were written. The guide's example,
    on the recorded keyspace, said 103 blobs; the dump holds 58 blob keys, 19 of them empty
    channels, which the savers store as no key."""
    prefix = restored["lg"]
    code, out, err = cli_out(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 0, err
    written = len(list(client.scan_iter(match=f"{prefix}:blob:{{*")))
    summary = out.splitlines()[-1]
    assert f", {written} blobs, " in summary, summary
    (documented,) = re.findall(
        r"^\s*(migrated \d+ thread namespaces.*)$", MIGRATE_DOC.read_text(), re.MULTILINE
    )
    assert summary == documented


def cli_out(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("ttl", ["0.001", "1", "59.9"])
def test_a_migrate_ttl_too_short_to_read_back_is_refused(
    client: redis.Redis, restored: dict[str, str], capsys: pytest.CaptureFixture[str], ttl: str
) -> None:
    """`--ttl 0.001` was taken: the run deleted the 0.1.0 keys of the first namespaces, whose
    new keys expired at once, and stopped blaming "another program writing under this
    prefix"."""
    prefix = restored["lg"]
    before = everything(client, prefix)
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--url", "redis://127.0.0.1:1/0", "--prefix", prefix, "--ttl", ttl])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --ttl: {ttl!r} is shorter than 60 seconds" in err and "--ttl 60" in err
    with pytest.raises(ValueError, match=rf"ttl={float(ttl)!r} is shorter than 60 seconds"):
        migrate_v010(client, prefix, ttl=float(ttl))
    assert everything(client, prefix) == before


def test_a_read_back_failure_with_a_ttl_names_it(
    client: redis.Redis, restored: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_checkpoint_plainredis import _migrate

    prefix = restored["lg"]
    real = _migrate.encode_blob
    monkeypatch.setattr(_migrate, "encode_blob", lambda typed: real(("json", b'"tampered"')))
    with pytest.raises(PlainRedisError, match=r"their TTL is 3600 s, --ttl / ttl=\)"):
        migrate_v010(client, prefix, ttl=3600)


def test_a_second_run_on_the_prefix_is_refused_while_the_first_runs(
    client: redis.Redis, redis_url: str, restored: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs on one prefix both went: the second reported threads the first moved and
    skipped checkpoints it took for expired. The first renews its lock past its expiry and
    releases it at its end."""
    from langgraph_checkpoint_plainredis import _migrate

    prefix = restored["lg"]
    lock = f"{prefix}:v010:lock"
    monkeypatch.setattr(_migrate, "_LOCK_MS", 400)
    monkeypatch.setattr(_migrate, "_RENEW_S", 0.05)
    real = _migrate._migrate_timeline
    refusals: list[str] = []

    def slow(*args: Any, **kw: Any) -> Any:
        time.sleep(0.25)  # four timelines: the run outlives its lock's expiry twice over
        assert client.pttl(lock) > 0
        with redis.Redis.from_url(redis_url, protocol=2) as other:
            with pytest.raises(PlainRedisError, match="another migration from prefix") as info:
                migrate_v010(other, prefix)
            refusals.append(str(info.value))
        return real(*args, **kw)

    monkeypatch.setattr(_migrate, "_migrate_timeline", slow)
    report = migrate_v010(client, prefix)
    assert report.threads == 4 and len(refusals) == 4
    assert f"it holds the lock {lock!r}" in refusals[0] and "lapses in 0 s" in refusals[0]
    assert not client.exists(lock)
    check_lg_threads(redis_url, prefix)


def test_a_run_that_lost_its_lock_deletes_nothing_more(
    client: redis.Redis, restored: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stalled past its lock's expiry while another run took the lock went on to
    delete the 0.1.0 keys of the timeline it had read back, and noticed only at the next
    one. It confirms the lock before each deletion: it stops there, its timeline's 0.1.0
    keys and parked entry kept, the other run's lock untouched."""
    from langgraph_checkpoint_plainredis import _migrate

    prefix = restored["lg"]
    lock, stash = LegacyKeys(prefix).lock, LegacyKeys(prefix).stash
    monkeypatch.setattr(_migrate, "_LOCK_MS", 300)
    monkeypatch.setattr(_migrate, "_RENEW_S", 0.1)
    real = _migrate._verify
    stalled: list[int] = []

    def stalls_once(*args: Any, **kw: Any) -> Any:
        if not stalled:  # a stall past the lock's expiry, after the batch's renewal
            stalled.append(1)
            time.sleep(0.5)
            assert not client.exists(lock)
            client.set(lock, "run B", px=30_000)  # another run takes the lapsed lock
        return real(*args, **kw)

    monkeypatch.setattr(_migrate, "_verify", stalls_once)
    with pytest.raises(PlainRedisError, match="lost its lock"):
        migrate_v010(client, prefix)
    assert client.hlen(stash) == 4  # every timeline still parked: none deleted
    assert client.get(lock) == b"run B"
    client.delete(lock)
    assert migrate_v010(client, prefix).threads == 4


def test_the_lock_of_a_killed_run_lapses_and_the_rerun_goes_on(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = restored["lg"]
    lock = f"{prefix}:v010:lock"
    client.set(lock, "a killed run", px=30_000)
    before = everything(client, prefix)
    code, err = cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix)
    assert code == 1 and err.count("\n") == 1, err
    assert "another migration from prefix" in err
    left_after = client.pttl(lock)
    said = re.search(r"lapses in (\d+) s \(after 30 s unrenewed\)", err)
    assert said, err
    # The command asked between the SET and this PTTL, however slow the machine:
    # what it said lies between the two, rounded to the second.
    assert left_after / 1000 - 1 <= int(said[1]) <= 30, (left_after, err)
    assert "nothing was changed" in err
    assert everything(client, prefix) == before
    client.pexpire(lock, 100)
    time.sleep(0.2)
    assert cli(capsys, "migrate", "--url", redis_url, "--prefix", prefix) == (0, "")
    assert not client.exists(lock)
    check_lg_threads(redis_url, prefix)


def test_threads_on_the_source_of_an_unfinished_migration_names_it(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`threads` on the source prefix of an unfinished `--to-prefix` run said "0 threads"."""
    old = restored["lg"]
    new = f"{old}-new"
    interrupt_after_one(monkeypatch, client, old, to_prefix=new)
    code, out, err = cli_out(capsys, "threads", "--url", redis_url, "--prefix", old)
    assert code == 0, err
    assert (
        f"0 threads under prefix {old!r}: a migration from it into {new!r} has not finished" in err
    )
    assert f"--prefix {old} --to-prefix {new}` again" in err


# -- a dry run --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["fresh", "keep-old", "stopped", "expired", "unreadable"])
def test_a_dry_run_writes_nothing_and_counts_what_the_run_then_does(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    """A preview of the run: the same counts, the same timelines found gone and entries
    skipped, whether the run starts afresh or finishes one stopped half-way; no key under
    the prefix changes (no lock is taken), and the savers still refuse the keyspace."""
    prefix = restored["lg"]
    keep_old = case == "keep-old"
    threads = [t for t in DUMP["expected"]["threads"] if t["prefix"] == "lg"]
    if case == "stopped":
        interrupt_after_one(monkeypatch, client, prefix)
    elif case == "expired":
        first, second = threads[0], threads[1]
        expire_010(client, prefix, first["thread_id"], first["checkpoint_ns"], [])
        old = second["checkpoint_ids"][-2:]  # the newest outlives them, as under a TTL
        expire_010(client, prefix, second["thread_id"], second["checkpoint_ns"], old)
    elif case == "unreadable":
        client.hset(f"{prefix}:threads", "not a 0.1.0 index key", "not json")
    before = everything(client, prefix)
    lines: list[str] = []
    dry = migrate_v010(client, prefix, keep_old=keep_old, progress=lines.append, dry_run=True)
    assert everything(client, prefix) == before
    with RedisSaver(client=client, prefix=prefix) as saver:
        with pytest.raises(LegacyKeyspaceError):
            saver.get_tuple({"configurable": {"thread_id": threads[0]["thread_id"]}})
    done: list[str] = []
    run = migrate_v010(client, prefix, keep_old=keep_old, progress=done.append)
    assert dry.dry_run and not run.dry_run and dry.checkpoints > 0
    assert dataclasses.replace(dry, dry_run=False) == run
    said = [
        line.replace("would migrate", "migrated").replace("would skip", "skipped") for line in lines
    ]
    assert said == done and len(done) == run.threads + len(run.gone)
    assert bool(run.gone) == (case == "expired") and bool(run.skipped) == (case == "unreadable")
    if case not in ("expired", "unreadable"):
        check_lg_threads(redis_url, prefix)


def test_migrate_dry_run_prints_what_the_run_would_do_and_changes_nothing(
    client: redis.Redis,
    redis_url: str,
    restored: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--dry-run` prints the run's lines and summary in the conditional; what would stop
    the run (a run holding the lock, a value it cannot read) stops it with the run's one
    line, an entry the run would skip is listed with what to do first, and Ctrl-C says
    nothing was written."""
    prefix = restored["lg"]
    argv = ["migrate", "--url", redis_url, "--prefix", prefix]
    before = everything(client, prefix)
    code = main([*argv, "--dry-run"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    *lines, summary = out.splitlines()
    assert lines and all(line.startswith("would migrate thread ") for line in lines), lines
    assert summary.startswith(f"would migrate {len(lines)} thread namespaces, ")
    assert summary.endswith("; nothing was written (--dry-run)")

    lock = f"{prefix}:v010:lock"
    client.set(lock, "another run", px=30_000)
    code, err = cli(capsys, *argv, "--dry-run")
    assert code == 1 and err.count("\n") == 1 and "another migration" in err, err
    client.delete(lock)
    # A target whose registry is a foreign key: the run stopped at its first put, after it
    # had parked 0.1.0's registry (found by review); both refuse it before anything.
    target = f"{prefix}-new"
    client.set(f"{target}:threads", "foreign")
    for dry in (["--dry-run"], []):
        code, err = cli(capsys, *argv, "--to-prefix", target, *dry)
        assert code == 1 and err.count("\n") == 1, err
        assert f"'{target}:threads' is a string" in err, err
        assert everything(client, prefix) == before
    client.delete(f"{target}:threads")
    blob = next(k for k in client.scan_iter(match=f"{prefix}:blob:t-fork:*"))
    good = client.get(blob)
    client.set(blob, json.dumps({"t": "pickle", "d": base64.b64encode(b"x").decode()}))
    code, err = cli(capsys, *argv, "--dry-run")
    assert code == 1 and err.count("\n") == 1 and repr(blob.decode()) in err, err
    client.set(blob, good)  # type: ignore[arg-type]
    assert everything(client, prefix) == before
    registry = client.hgetall(f"{prefix}:threads")
    client.hset(f"{prefix}:threads", "not a 0.1.0 index key", "not json")
    code, err = cli(capsys, *argv, "--dry-run")
    assert code == 1, err
    assert "a run would skip unreadable registry entry 'not a 0.1.0 index key'" in err
    assert "repair or remove them first" in err
    client.hdel(f"{prefix}:threads", "not a 0.1.0 index key")
    assert client.hgetall(f"{prefix}:threads") == registry
    with ctrl_c_after_one(monkeypatch):
        code, err = cli(capsys, *argv, "--dry-run")
    assert code == 130 and "interrupted during the migration. Nothing was written" in err, err
    assert not client.exists(f"{prefix}:v010:threads", f"{prefix}:v010:parked")

    assert main(argv) == 0
    done = capsys.readouterr().out.splitlines()
    # (in another order: the entry added and removed moved the registry's entries)
    assert sorted(line.replace("migrated", "would migrate", 1) for line in done[:-1]) == sorted(
        lines
    )
    assert (
        done[-1].replace("migrated", "would migrate", 1).replace("; deleted", "; would delete")
        + "; nothing was written (--dry-run)"
        == summary
    )
    check_lg_threads(redis_url, prefix)
