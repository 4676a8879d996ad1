"""Hostile and bad input, where the package's own tests leave gaps.

The saver tests already cover each hostile id alone, a truncated checkpoint, a corrupted
blob, a writes key of the wrong type, the codec fuzzed without Redis, and the basic
argument checks. Here:

- all hostile ids at once in one keyspace, as threads *and* namespaces: each stays
  isolated, lists, and deletes without touching the others;
- every kind of value (checkpoint, blob, writes) truncated, replaced by garbage or by a key
  of the wrong type, in the middle of a history: the error names the key and the rest of
  the thread reads back; index keys of the wrong type give an error that names them;
- random bytes planted in Redis and read through the savers: only `CorruptDataError`;
- constructor arguments and configs the package tests do not try.

Each case records, in `saver_change`, what the savers got wrong before they were fixed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from reliability_support import assert_sound, cfg, keys_under

from langgraph_checkpoint_plainredis import (
    AsyncRedisSaver,
    CorruptDataError,
    LegacyKeyspaceError,
    RedisSaver,
    WrongTypeError,
)
from langgraph_checkpoint_plainredis._keys import KeySpace

pytestmark = pytest.mark.standalone


def saver_change(reason: str) -> tuple[()]:
    """What a case found wrong before the savers were fixed; kept as a record, no mark."""
    return ()


def checkpoint(values: dict[str, Any], versions: dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions)
    return cp


@pytest.fixture
def saver(redis_url: str, prefix: str) -> Iterator[RedisSaver]:
    with RedisSaver(redis_url, prefix=prefix) as s:
        yield s


# -- hostile ids, all together -------------------------------------------------------------

HOSTILE = [
    "a", "a:b", "a:b:c", "b:c", "*", "?", "[", "]", "[x]", "{t}", "}{", "\\", "%", "%3A",
    " sp ace ", "用户-7:会话-1", "", "\x00\x1f", "k" * 10_240,
]  # fmt: skip


def test_hostile_ids_together_stay_isolated_listable_and_deletable(
    saver: RedisSaver, client: redis.Redis, prefix: str
) -> None:
    # Each thread gets the root namespace and one hostile namespace; channel and task names
    # are hostile too. "a" / "b:c" and "a:b" / "c" are the pairs a naive layout would mix.
    plan = {t: sorted({"", HOSTILE[(i + 3) % len(HOSTILE)]}) for i, t in enumerate(HOSTILE)}
    written: dict[tuple[str, str], str] = {}
    for thread, namespaces in plan.items():
        for ns in namespaces:
            value = f"{thread!r} in {ns!r}"
            stored = saver.put(
                cfg(thread, ns),
                checkpoint({ns: value}, {ns: "1"}),
                {"who": repr(thread)},
                {ns: "1"},
            )
            saver.put_writes(stored, [(thread, value)], ns or "task")
            written[(thread, ns)] = stored["configurable"]["checkpoint_id"]

    def check(remaining: set[str]) -> None:
        everything = {
            (t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"])
            for t in saver.list(None)
        }
        assert everything == {k for k in written if k[0] in remaining}
        for thread in remaining:
            own = list(saver.list({"configurable": {"thread_id": thread}}))
            assert {t.config["configurable"]["checkpoint_ns"] for t in own} == set(plan[thread])
            for ns in plan[thread]:
                (tup,) = saver.list(cfg(thread, ns))
                value = f"{thread!r} in {ns!r}"
                assert tup.checkpoint["channel_values"] == {ns: value}
                assert tup.metadata["who"] == repr(thread)  # LangGraph strips NUL from metadata
                assert tup.pending_writes == [(ns or "task", thread, value)]
        assert_sound(client, prefix)

    check(set(plan))
    remaining = set(plan)
    for thread in sorted(plan, key=len):  # short ids first: "a" goes before "a:b"
        saver.delete_thread(thread)
        remaining.discard(thread)
        assert saver.get_tuple(cfg(thread)) is None
        check(remaining)
    assert keys_under(client, prefix) == set()


# -- damaged values in the middle of a history -------------------------------------------------


def three_checkpoints(saver: RedisSaver) -> list[str]:
    """Thread "t": c1 -> c2 -> c3; "m" changes each time (its own blob), "stable" never does
    (one blob all three read). Each checkpoint has a pending write. Plus a thread "other"."""
    ids: list[str] = []
    for i in range(3):
        # c2's value is large and repetitive, so its blob is stored compressed.
        value = ("abc" * 400) if i == 1 else os.urandom(200).hex()
        versions = {"stable": "1", "m": str(i + 1)}
        new = versions if i == 0 else {"m": str(i + 1)}
        parent = cfg("t", "", ids[-1]) if ids else cfg("t")
        stored = saver.put(parent, checkpoint({"stable": "s", "m": value}, versions), {}, new)
        saver.put_writes(stored, [("m", f"w{i}")], f"task{i}")
        ids.append(stored["configurable"]["checkpoint_id"])
    saver.put(cfg("other"), checkpoint({"m": 1}, {"m": "1"}), {}, {"m": "1"})
    return ids


def damage(client: redis.Redis, key: str, how: str) -> None:
    kind = client.type(key)
    if how == "wrong type":
        client.delete(key)
        client.rpush(key, "foreign")
    elif kind == b"hash":
        field, value = next(iter(client.hgetall(key).items()))
        client.hset(key, field, value[: len(value) // 2] if how == "truncated" else os.urandom(40))
    else:
        value = client.get(key)
        client.set(key, value[: len(value) // 2] if how == "truncated" else os.urandom(40))


DAMAGE = [
    pytest.param(kind, how, id=f"{kind}-{how.replace(' ', '-')}", marks=marks)
    for kind in ("cp", "blob", "wr")
    for how in ("truncated", "garbage", "wrong type")
    for marks in [()]
]


@pytest.mark.parametrize(("kind", "how"), DAMAGE)
def test_a_damaged_value_names_its_key_and_spares_the_rest(
    saver: RedisSaver, client: redis.Redis, prefix: str, kind: str, how: str
) -> None:
    c1, c2, c3 = three_checkpoints(saver)
    tk = KeySpace(prefix).thread("t")
    key = {"cp": tk.cp("", c2), "blob": tk.blob("", "m", "2"), "wr": tk.wr("", c2)}[kind]
    damage(client, key, how)
    expected = WrongTypeError if how == "wrong type" else CorruptDataError
    for read in (lambda: saver.get_tuple(cfg("t", "", c2)), lambda: list(saver.list(cfg("t")))):
        with pytest.raises(expected) as info:
            read()
        assert info.value.key == key and key in str(info.value)
    # The rest of the history reads back.
    first, latest = saver.get_tuple(cfg("t", "", c1)), saver.get_tuple(cfg("t"))
    assert first is not None and first.pending_writes == [("task0", "m", "w0")]
    assert latest is not None and latest.checkpoint["id"] == c3
    assert set(latest.checkpoint["channel_values"]) == {"stable", "m"}
    assert [t.checkpoint["id"] for t in saver.list(cfg("t"), before=cfg("t", "", c2))] == [c1]
    assert saver.get_tuple(cfg("other")) is not None
    # Writing on, and deleting the damaged thread, still work.
    saver.put(cfg("t", "", c3), checkpoint({"m": "x"}, {"m": "9"}), {}, {"m": "9"})
    saver.delete_thread("t")
    assert saver.get_tuple(cfg("t")) is None
    assert_sound(client, prefix)


INDEX_KEYS = [
    "idx",
    "keys",
    "ns",
    "threads",
]


@pytest.mark.parametrize("kind", INDEX_KEYS)
def test_an_index_key_of_another_type_is_a_clear_error(
    saver: RedisSaver, client: redis.Redis, prefix: str, kind: str
) -> None:
    """Each operation either works or raises `WrongTypeError` naming the foreign key."""
    c1, _, c3 = three_checkpoints(saver)
    tk, ks = KeySpace(prefix).thread("t"), KeySpace(prefix)
    key = {"idx": tk.idx(""), "keys": tk.keys(""), "ns": tk.ns, "threads": ks.threads}[kind]
    damage(client, key, "wrong type")
    operations = {
        "get_tuple latest": lambda: saver.get_tuple(cfg("t")),
        "get_tuple by id": lambda: saver.get_tuple(cfg("t", "", c1)),
        "list thread": lambda: list(saver.list(cfg("t"))),
        "list all": lambda: list(saver.list(None)),
        "put": lambda: saver.put(
            cfg("t", "", c3), checkpoint({"m": 0}, {"m": "8"}), {}, {"m": "8"}
        ),
        "put_writes": lambda: saver.put_writes(cfg("t", "", c3), [("m", 0)], "late"),
        "other thread": lambda: saver.get_tuple(cfg("other")),
        "delete_thread": lambda: saver.delete_thread("t"),
    }
    for name, operation in operations.items():
        try:
            operation()
        except WrongTypeError as error:
            assert error.key == key and key in str(error), name
        except redis.exceptions.RedisError as error:
            pytest.fail(f"{name}: {type(error).__name__} {error} does not name {key!r}")
    assert client.type(key) == b"list", "an operation overwrote the foreign key"
    client.delete(key)


def snapshot(client: redis.Redis, prefix: str) -> dict[bytes, Any]:
    return {k: client.dump(k) for k in client.scan_iter(f"{prefix}:*")}


def test_a_run_set_of_another_type_is_a_clear_error_that_changes_nothing(
    saver: RedisSaver, client: redis.Redis, prefix: str
) -> None:
    saver_change(
        "a foreign run set gave a raw WRONGTYPE, and a put over another run's checkpoint "
        "wrote its blobs first"
    )
    ks = KeySpace(prefix)
    c = saver.put(cfg("t"), checkpoint({"m": 1}, {"m": "1"}), {"run_id": "r1"}, {"m": "1"})
    saver.put(cfg("t", "sub"), checkpoint({"m": 1}, {"m": "1"}), {"run_id": "r1"}, {"m": "1"})
    c2 = saver.put(c, checkpoint({"m": 2}, {"m": "2"}), {"run_id": "r2"}, {"m": "2"})
    second = c2["configurable"]["checkpoint_id"]
    run = ks.run("r1")
    damage(client, run, "wrong type")
    before = snapshot(client, prefix)
    same_id = checkpoint({"m": 3, "x": 5}, {"m": "1", "x": "9"})
    same_id["id"] = c["configurable"]["checkpoint_id"]
    operations = {
        "delete_for_runs": lambda: saver.delete_for_runs(["r2", "r1"]),
        "delete_thread": lambda: saver.delete_thread("t"),
        "prune keep_latest": lambda: saver.prune(["t"]),
        "copy_thread": lambda: saver.copy_thread("t", "u"),
        "put over r1's checkpoint": lambda: saver.put(
            cfg("t"), same_id, {"run_id": "r3"}, {"m": "1", "x": "9"}
        ),
        "put in r1": lambda: saver.put(cfg("v"), checkpoint({}, {}), {"run_id": "r1"}, {}),
    }
    for name, operation in operations.items():
        with pytest.raises(WrongTypeError) as info:
            operation()
        assert info.value.key == run and run in str(info.value), name
        assert snapshot(client, prefix) == before, f"{name} changed the keyspace"
    # What touches no checkpoint of r1 is not refused: r2's one goes, its run set too.
    saver.delete_for_runs(["r2"])
    assert saver.get_tuple(c) is not None and saver.get_tuple(cfg("t", "", second)) is None
    assert not client.exists(ks.run("r2")) and client.type(run) == b"list"
    saver.prune(["t"])  # keeps r1's checkpoints: the newest of each namespace


def test_a_run_set_of_another_type_stops_prune_of_unmarked_checkpoints(
    saver: RedisSaver, client: redis.Redis, prefix: str
) -> None:
    saver_change("without run markers, prune deleted a checkpoint before a raw WRONGTYPE")
    ks, tk = KeySpace(prefix), KeySpace(prefix).thread("t")
    c = saver.put(cfg("t"), checkpoint({"m": 1}, {"m": "1"}), {"run_id": "r1"}, {"m": "1"})
    saver.put(c, checkpoint({"m": 2}, {"m": "2"}), {}, {"m": "2"})
    old = c["configurable"]["checkpoint_id"]
    client.zrem(tk.keys(""), *[m for m in client.zrange(tk.keys(""), 0, -1) if m[:1] == b"r"])
    damage(client, ks.run("r1"), "wrong type")
    before = snapshot(client, prefix)
    for operation in (lambda: saver.prune(["t"]), lambda: saver.copy_thread("t", "u")):
        with pytest.raises(WrongTypeError):
            operation()
        assert snapshot(client, prefix) == before
    assert saver.get_tuple(cfg("t", "", old)) is not None


def test_refresh_on_read_names_an_index_key_of_another_type(
    redis_url: str, client: redis.Redis, prefix: str
) -> None:
    saver_change("get_tuple refreshing with a foreign key index gave a raw WRONGTYPE")
    with RedisSaver(redis_url, prefix=prefix, ttl=100, refresh_on_read=True) as saver:
        saver.put(cfg("t"), checkpoint({"m": 1}, {"m": "1"}), {}, {"m": "1"})
        tk = KeySpace(prefix).thread("t")
        for key in (tk.keys(""), tk.ns):
            good = client.dump(key)
            damage(client, key, "wrong type")
            before = snapshot(client, prefix)
            with pytest.raises(WrongTypeError) as info:
                saver.get_tuple(cfg("t"))
            assert info.value.key == key
            assert snapshot(client, prefix) == before
            client.delete(key)
            client.restore(key, 0, good)


def test_listing_every_thread_of_a_010_keyspace_asks_for_the_migration(
    saver: RedisSaver, client: redis.Redis, prefix: str
) -> None:
    client.hset(f"{prefix}:threads", f"{prefix}:idx:t:", '{"thread": "t", "ns": ""}')
    with pytest.raises(LegacyKeyspaceError, match="migrate"):
        saver.get_tuple(cfg("t"))
    with pytest.raises(LegacyKeyspaceError, match="migrate"):
        list(saver.list(None))


# -- random bytes through the savers ------------------------------------------------------------


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(kind=st.sampled_from(["cp", "blob", "wr"]), data=st.binary(max_size=300))
def test_random_bytes_in_redis_raise_only_corrupt_data_error(
    saver: RedisSaver, client: redis.Redis, prefix: str, kind: str, data: bytes
) -> None:
    if saver.get_tuple(cfg("t")) is None:
        three_checkpoints(saver)
    c2 = [t.checkpoint["id"] for t in saver.list(cfg("t"))][1]
    tk = KeySpace(prefix).thread("t")
    key = {"cp": tk.cp("", c2), "blob": tk.blob("", "m", "2"), "wr": tk.wr("", c2)}[kind]
    before = client.dump(key)
    if kind == "wr":
        client.hset(key, next(iter(client.hkeys(key))), data)
    else:
        client.set(key, data)
    try:
        for read in (lambda: saver.get_tuple(cfg("t", "", c2)), lambda: list(saver.list(None))):
            try:
                read()
            except CorruptDataError as error:
                assert error.key == key
    finally:
        client.restore(key, 0, before, replace=True)


# -- arguments and configs ----------------------------------------------------------------------

URL = "redis://127.0.0.1:6379/0"  # never connected to: these fail before any I/O


@pytest.mark.parametrize("cls", [RedisSaver, AsyncRedisSaver])
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"compress": "yes"}, TypeError, "compress"),
        ({"ttl": True}, TypeError, "ttl"),
        ({"ttl": math.nan}, ValueError, "ttl"),
        ({"ttl": math.inf}, ValueError, "ttl"),
        ({"prefix": 5}, TypeError, "prefix"),
        ({"prefix": "a*"}, ValueError, "prefix"),
        ({"prefix": "lg:"}, ValueError, "'lg'"),
        ({"url": "http://127.0.0.1"}, ValueError, "redis://"),
        pytest.param(
            {"protocol": 4},
            ValueError,
            "protocol",
            marks=saver_change(
                "protocol=4 is accepted and fails on first use as a ConnectionError"
            ),
        ),
        pytest.param(
            {"url": 6379},
            TypeError,
            "url",
            marks=saver_change("a non-str url fails with AttributeError inside redis-py"),
        ),
        pytest.param(
            {"url": None, "client": object()},
            TypeError,
            "client",
            marks=saver_change("client=object() is accepted and fails on first use"),
        ),
        pytest.param(
            {"serde": object()},
            TypeError,
            "serde",
            marks=saver_change("serde=object() is accepted and fails in put with AttributeError"),
        ),
    ],
)
def test_constructor_arguments_say_what_to_pass(
    cls: type, kwargs: dict[str, Any], error: type, match: str
) -> None:
    args = {"url": URL, **kwargs}
    with pytest.raises(error, match=match):
        cls(args.pop("url"), **args)


def test_a_client_of_the_other_side_names_the_class_to_use() -> None:
    with pytest.raises(TypeError, match="AsyncRedisSaver"):
        RedisSaver(client=aioredis.Redis())
    with pytest.raises(TypeError, match="use RedisSaver"):
        AsyncRedisSaver(client=redis.Redis())


class MyAsyncRedis(aioredis.Redis):
    pass


class MyRedis(redis.Redis):
    pass


def test_a_subclass_of_a_client_is_a_client_of_its_side() -> None:
    AsyncRedisSaver(client=MyAsyncRedis())
    RedisSaver(client=MyRedis())
    with pytest.raises(TypeError, match="use RedisSaver"):
        AsyncRedisSaver(client=MyRedis())
    with pytest.raises(TypeError, match="AsyncRedisSaver"):
        RedisSaver(client=MyAsyncRedis())


CONFIG_CASES = [
    ("get_tuple", (None,), {}, TypeError, "configurable"),
    ("get_tuple", ({"configurable": {"thread_id": 1.5}},), {}, TypeError, "str()"),
    ("get_tuple", ({"configurable": {"thread_id": ["a"]}},), {}, TypeError, "str()"),
    ("get_tuple", ({"configurable": {"thread_id": b"a"}},), {}, TypeError, "str()"),
    ("get_tuple", ({"configurable": {"thread_id": "a", "checkpoint_ns": ["x"]}},), {},
     TypeError, "checkpoint_ns"),
    ("list", (None,), {"limit": "3"}, TypeError, "limit"),
    ("put_writes", ({"configurable": {"thread_id": "a"}}, [("m", 1)], "task"), {},
     ValueError, "checkpoint_id"),
    ("put", ({"configurable": {"thread_id": "a"}}, checkpoint({"m": 1}, {"m": object()}), {},
             {"m": object()}), {}, TypeError, "channel version"),
    ("prune", (["a"],), {"strategy": "all"}, ValueError, "keep_latest"),
    ("delete_thread", (None,), {}, TypeError, "str"),
    ("copy_thread", (1.5, "b"), {}, TypeError, "str"),
    ("delete_for_runs", ([None],), {}, TypeError, "str"),
]  # fmt: skip
CONFIG_CHANGES = [
    pytest.param(
        "list", ({"configurable": {"thread_id": "a"}},), {"before": "c1"}, TypeError, "before",
        marks=saver_change("before='c1' fails with 'string indices must be integers'"),
    ),
    pytest.param(
        "list", ({"configurable": {"thread_id": "a"}},), {"filter": [("source", "x")]},
        TypeError, "filter",
        marks=saver_change("a non-dict filter fails with AttributeError once a checkpoint lists"),
    ),
    pytest.param(
        "list", (None,), {"limit": -1}, ValueError, "limit",
        marks=saver_change(
            "limit=-1 lists everything (-1 is the internal 'no limit'); InMemorySaver lists "
            "nothing; expected ValueError"
        ),
    ),
    pytest.param(
        "prune", ("abc",), {}, TypeError, "list",
        marks=saver_change("prune('abc') prunes threads 'a', 'b' and 'c'"),
    ),
    pytest.param(
        "delete_for_runs", ("run-1",), {}, TypeError, "list",
        marks=saver_change("delete_for_runs('run-1') deletes the runs 'r', 'u', 'n', '-', '1'"),
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "args", "kwargs", "error", "match"), CONFIG_CASES + CONFIG_CHANGES
)
def test_configs_and_call_arguments_say_what_to_pass(
    saver: RedisSaver,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type,
    match: str,
) -> None:
    # Something to list, filter and prune, so a lenient saver has a chance to misbehave.
    saver.put(
        cfg("a"), checkpoint({"m": 1}, {"m": "1"}), {"source": "x", "run_id": "r"}, {"m": "1"}
    )
    with pytest.raises(error, match=match.replace("(", r"\(").replace(")", r"\)")):
        result = getattr(saver, method)(*args, **kwargs)
        if method == "list":
            list(result)
    assert saver.get_tuple(cfg("a")) is not None, "a refused call changed the keyspace"
