"""The metadata index (`index_metadata=`): a filtered list(None) reads only the threads the
index names for the filter's value, and lists exactly what the walk of every thread lists."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from agentstate_testkit.savers import counting_client
from langgraph_checkpoint_plainredis import (
    AsyncRedisSaver,
    PlainRedisError,
    RedisSaver,
    WrongTypeError,
    _core,
)
from langgraph_checkpoint_plainredis._keys import KeySpace, index_tag

# -- the value tag -------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.0, -0.0, 1.0, 2.5, True, False, "1", "", "a:b", "%41"]),
    st.text(max_size=6),
    st.decimals(allow_nan=False, places=2, min_value=-(10**6), max_value=10**6),
)


@given(scalars, scalars)
@settings(max_examples=500)
def test_equal_values_get_equal_tags_and_unequal_ones_unequal(a: Any, b: Any) -> None:
    ta, tb = index_tag(a), index_tag(b)
    if isinstance(a, float) and math.isnan(a):
        assert ta is None
        return
    if ta is None or tb is None:  # NaN, or a Decimal equal to no float (0.01): no index
        for value, tag in ((a, ta), (b, tb)):
            nan = isinstance(value, float) and math.isnan(value)
            assert tag is not None or nan or isinstance(value, Decimal), value
        assert a != b or ta == tb
        return
    assert (ta == tb) == (a == b), (a, b, ta, tb)


def test_a_decimal_finds_the_threads_of_the_number_it_equals(indexed: RedisSaver) -> None:
    """A Decimal in metadata equals the int or float of the same value, as the filter
    compares them: it had no tag, so its thread was missing from the index."""
    indexed.reindex()
    put(indexed, "d1", "c1", {"user_id": Decimal(1)})
    put(indexed, "d2", "c1", {"user_id": Decimal("2.5")})
    put(indexed, "d3", "c1", {"user_id": Decimal("0.1")})  # equal to no float: not indexed
    put(indexed, "d4", "c1", {"user_id": Decimal("1E+5000")})  # equal to no float: walked
    for value in (
        1,
        1.0,
        Decimal(1),
        2.5,
        Decimal("2.50"),
        0.1,
        Decimal("0.1"),
        Decimal("1E+5000"),
    ):
        assert listed(indexed, {"user_id": value}) == walked(indexed, {"user_id": value}), value
    assert [t for t, _, _ in listed(indexed, {"user_id": 1})] == ["d1"]


def test_unindexable_values_have_no_tag() -> None:
    class Text(str):
        pass

    assert index_tag(Text("x")) == index_tag("x")
    for value in ([1], {"a": 1}, (1,), float("nan"), "\ud800", object()):
        assert index_tag(value) is None


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("user_id", TypeError),
        (["user_id", ""], ValueError),
        ([1], TypeError),
        (5, TypeError),
    ],
)
def test_index_metadata_is_checked(redis_url: str, value: Any, error: type) -> None:
    with pytest.raises(error, match="index_metadata"):
        RedisSaver(redis_url, index_metadata=value)


def test_index_metadata_is_a_tuple_without_duplicates(redis_url: str) -> None:
    saver = RedisSaver(redis_url, index_metadata=["a", "b", "a"])
    assert saver.index_metadata == ("a", "b")
    saver.close()


# -- helpers -------------------------------------------------------------------------------


def cfg(thread: str, cid: str | None = None, ns: str = "") -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def put(saver: Any, thread: str, cid: str, meta: dict[str, Any], ns: str = "") -> None:
    cp = empty_checkpoint()
    cp["id"] = cid
    cp["channel_values"] = {"m": cid}
    cp["channel_versions"] = {"m": cid}
    saver.put(cfg(thread, ns=ns), cp, meta, {"m": cid})


def listed(saver: Any, filter: dict[str, Any], **kw: Any) -> list[tuple[str, str, str]]:
    return [
        (
            t.config["configurable"]["thread_id"],
            t.config["configurable"]["checkpoint_ns"],
            t.config["configurable"]["checkpoint_id"],
        )
        for t in saver.list(None, filter=filter, **kw)
    ]


def walked(saver: Any, filter: dict[str, Any]) -> list[tuple[str, str, str]]:
    """What the walk of every thread lists, the index left aside."""
    indexed = saver._indexed
    saver._indexed = frozenset()
    fields = saver.index_metadata
    saver.index_metadata = ()
    try:
        return listed(saver, filter)
    finally:
        saver.index_metadata, saver._indexed = fields, indexed


def groups(items: list[tuple[str, str, str]]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for thread, ns, cid in items:
        out.setdefault((thread, ns), []).append(cid)
    return out


@pytest.fixture
def indexed(redis_url: str, prefix: str) -> Iterator[RedisSaver]:
    with RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id", "source")) as saver:
        yield saver


def index_members(client: Any, prefix: str, field: str, value: Any) -> list[str]:
    key = KeySpace(prefix).index(field, index_tag(value) or "")
    return [m.decode() for m in client.zrevrange(key, 0, -1)]


# -- behaviour -----------------------------------------------------------------------------


def test_the_index_is_used_once_reindex_marked_it(
    indexed: RedisSaver, caplog: pytest.LogCaptureFixture
) -> None:
    """Marking an empty keyspace complete by itself missed the puts of a saver without
    `index_metadata` that had started before (its guard read no mark): reindex() marks it,
    instantly on an empty keyspace; until then a query walks, and says so once."""
    with caplog.at_level("WARNING", logger="langgraph_checkpoint_plainredis"):
        put(indexed, "t1", "c1", {"user_id": "u1"})
        put(indexed, "t2", "c1", {"user_id": "u2"})
        assert indexed._indexed == frozenset()
        for _ in range(2):
            assert listed(indexed, {"user_id": "u1"}) == [("t1", "", "c1")]
    assert [r.getMessage() for r in caplog.records].count(
        f"the metadata index of 'user_id' under prefix {indexed.prefix!r} is not marked "
        "complete: filtered list(None) calls walk every thread until reindex() runs once "
        "(cheap while the prefix is empty)"
    ) == 1
    indexed.reindex()
    assert indexed._indexed == {"user_id", "source"}
    assert listed(indexed, {"user_id": "u1"}) == [("t1", "", "c1")]


def test_threads_come_newest_first(indexed: RedisSaver, client: Any, prefix: str) -> None:
    indexed.reindex()
    for thread in ("a", "b", "c"):
        put(indexed, thread, "c1", {"user_id": "u"})
        time.sleep(0.003)
    put(indexed, "a", "c2", {"user_id": "u"})
    assert [t for t, _, _ in listed(indexed, {"user_id": "u"})] == ["a", "a", "c", "b"]
    assert index_members(client, prefix, "user_id", "u") == ["a", "c", "b"]


def test_equal_values_of_other_types_find_the_thread(indexed: RedisSaver) -> None:
    indexed.reindex()
    put(indexed, "t", "c1", {"user_id": 1})
    put(indexed, "t", "c2", {"user_id": True, "source": None})
    assert listed(indexed, {"user_id": 1.0}) == [("t", "", "c2"), ("t", "", "c1")]
    assert listed(indexed, {"user_id": True}) == walked(indexed, {"user_id": True})
    # None also matches metadata without the key: the walk answers that one
    assert listed(indexed, {"source": None}) == walked(indexed, {"source": None})
    assert len(listed(indexed, {"source": None})) == 2


def test_reindex_builds_the_index_of_existing_threads(
    redis_url: str, prefix: str, client: Any
) -> None:
    with RedisSaver(redis_url, prefix=prefix) as plain:
        ids = [str(uuid.uuid4()) for _ in range(3)]
        put(plain, "old", "1ef4f797-8335-6428-8001-8a1503f9b875", {"user_id": "u"})
        put(plain, "older", "1ef4f796-8335-6428-8001-8a1503f9b875", {"user_id": "u"}, ns="s")
        put(plain, "other", ids[0], {"user_id": "v"})
    with RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as saver:
        assert saver._indexed == frozenset()  # threads were there: not complete
        assert listed(saver, {"user_id": "u"}) == walked(saver, {"user_id": "u"})
        saver.reindex()
        assert saver._indexed == {"user_id"}
        assert index_members(client, prefix, "user_id", "u") == ["old", "older"]
        assert groups(listed(saver, {"user_id": "u"})) == groups(walked(saver, {"user_id": "u"}))
    # a saver indexing nothing more refuses to write; reading goes on
    with RedisSaver(redis_url, prefix=prefix) as plain:
        with pytest.raises(PlainRedisError, match=r"'user_id'.*index_metadata=\('user_id',\)"):
            put(plain, "new", ids[1], {"user_id": "u"})
        with pytest.raises(PlainRedisError, match="reindex"):
            plain.put_writes(cfg("old", ids[0]), [("a", 1)], "task")
        with pytest.raises(PlainRedisError, match="copy_thread"):
            plain.copy_thread("old", "copy")
        assert len(listed(plain, {"user_id": "u"})) == 2
        plain.reindex()  # indexes nothing: drops the index
        assert client.keys(f"{prefix}:by*") == []
        put(plain, "new", ids[1], {"user_id": "u"})


@pytest.mark.standalone
def test_a_writer_started_before_reindex_is_stopped_by_the_put_script(
    redis_url: str, prefix: str, client: Any
) -> None:
    """A saver reads the index marker at its first call: one without `index_metadata` that
    started before another ran reindex() went on writing threads the complete index missed.
    The put script reads the marker too and refuses, having stored nothing."""
    with (
        RedisSaver(redis_url, prefix=prefix) as early,
        RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as indexing,
    ):
        put(early, "before", "c1", {"user_id": "u"})  # its first call: no field marked
        indexing.reindex()
        with pytest.raises(PlainRedisError, match=r"'user_id'.*after this saver started"):
            put(early, "late", "c1", {"user_id": "u"})
        assert early.get_tuple(cfg("late")) is None  # nothing stored
        assert listed(indexing, {"user_id": "u"}) == [("before", "", "c1")]
        put(indexing, "late", "c1", {"user_id": "u"})  # a saver that indexes it may
        assert groups(listed(indexing, {"user_id": "u"})) == groups(
            walked(indexing, {"user_id": "u"})
        )


@pytest.mark.standalone
def test_a_writer_started_before_reindex_is_stopped_by_the_copy_script(
    redis_url: str, prefix: str, client: Any
) -> None:
    """As a put: `copy_thread` by a saver that read the marker before reindex() marked a
    field it does not index wrote a copy the complete index missed (filtered queries left it
    out). The import script reads the marker too and refuses, having written nothing."""
    with (
        RedisSaver(redis_url, prefix=prefix) as early,
        RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as indexing,
    ):
        put(early, "src", "c1", {"user_id": "u"})  # its first call: no field marked
        indexing.reindex()
        with pytest.raises(
            PlainRedisError, match=r"^copy_thread: .*'user_id'.*after this saver started"
        ):
            early.copy_thread("src", "dst")
        assert early.get_tuple(cfg("dst")) is None  # nothing written
        assert not client.exists(KeySpace(prefix).thread("dst").ns)
        indexing.copy_thread("src", "dst")  # a saver that indexes it may
        assert groups(listed(indexing, {"user_id": "u"})) == {
            ("src", ""): ["c1"],
            ("dst", ""): ["c1"],
        }


def test_copy_thread_joins_the_index(indexed: RedisSaver, client: Any, prefix: str) -> None:
    indexed.reindex()
    put(indexed, "src", "c1", {"user_id": "u", "source": "loop"})
    indexed.copy_thread("src", "dst")
    assert set(index_members(client, prefix, "source", "loop")) == {"src", "dst"}
    assert groups(listed(indexed, {"source": "loop"})) == {("src", ""): ["c1"], ("dst", ""): ["c1"]}


def test_a_query_while_copy_thread_runs_leaves_the_copy_in_the_index(
    indexed: RedisSaver, client: Any, prefix: str
) -> None:
    """`copy_thread` added its thread to the index a round trip before it wrote it: a
    filtered query in between found no checkpoint of it and dropped the member, and the copy
    was missing from filtered queries for good. Now the import adds it (a cluster still adds
    it first, and its queries spare a member that young)."""
    indexed.reindex()
    put(indexed, "src", "c1", {"user_id": "u"})
    run = indexed._run

    def racing(plan: Any) -> Any:
        if any(getattr(c, "script", None) == "import_thread" for c in plan):
            indexed._run = run  # type: ignore[method-assign]
            assert listed(indexed, {"user_id": "u"}) == [("src", "", "c1")]
        return run(plan)

    indexed._run = racing  # type: ignore[method-assign]
    indexed.copy_thread("src", "dst")
    indexed._run = run  # type: ignore[method-assign]
    assert set(index_members(client, prefix, "user_id", "u")) == {"src", "dst"}
    assert groups(listed(indexed, {"user_id": "u"})) == {("src", ""): ["c1"], ("dst", ""): ["c1"]}


def test_a_copy_onto_a_foreign_index_value_writes_nothing(
    indexed: RedisSaver, client: Any, prefix: str, redis_kind: str
) -> None:
    indexed.reindex()
    put(indexed, "src", "c1", {"user_id": "u", "source": "loop"})
    key = KeySpace(prefix).index("source", index_tag("loop") or "")
    client.delete(key)
    client.set(key, "foreign")
    with pytest.raises(WrongTypeError, match=key):
        indexed.copy_thread("src", "dst")
    assert indexed.get_tuple(cfg("dst")) is None
    assert client.get(key) == b"foreign"
    # a cluster joined the other index first (another slot): a member without a thread,
    # which queries and reindex() drop once it is a minute old
    joined = ["dst", "src"] if redis_kind.endswith("-cluster") else ["src"]
    assert sorted(index_members(client, prefix, "user_id", "u")) == joined


def test_members_of_deleted_threads_go_when_a_query_meets_them(
    indexed: RedisSaver, client: Any, prefix: str, redis_kind: str
) -> None:
    indexed.reindex()
    for thread in ("a", "b", "c"):
        put(indexed, thread, "c1", {"user_id": "u"})
    put(indexed, "b", "c2", {"user_id": "other"})
    indexed.prune(["b"])  # b still exists, no checkpoint with u: kept
    indexed.delete_thread("a")
    assert listed(indexed, {"user_id": "u"}) == [("c", "", "c1")]
    left = set(index_members(client, prefix, "user_id", "u"))
    if redis_kind.endswith("-cluster"):
        assert left == {"a", "b", "c"}  # younger than the grace period
    else:
        assert left == {"b", "c"}


@pytest.mark.standalone
def test_puts_drop_members_of_gone_threads_no_query_met(
    indexed: RedisSaver, client: Any, prefix: str
) -> None:
    """The member of a deleted or expired thread stayed in the index until a query on its
    value met it: a keyspace that writes and never asks grew its index for ever. Each put
    looks at two members of each index it adds to and drops those of threads gone."""
    for i in range(20):
        put(indexed, f"gone{i}", "c1", {"user_id": "u"})
    for i in range(20):
        indexed.delete_thread(f"gone{i}")
    assert len(index_members(client, prefix, "user_id", "u")) == 20
    for i in range(200):
        put(indexed, "live", f"c{i:03}", {"user_id": "u", "source": "loop"})
    assert index_members(client, prefix, "user_id", "u") == ["live"]
    assert index_members(client, prefix, "source", "loop") == ["live"]


def test_a_put_between_the_page_and_the_removal_keeps_its_member(
    indexed: RedisSaver, client: Any, prefix: str, redis_kind: str, monkeypatch: Any
) -> None:
    indexed.reindex()
    put(indexed, "a", "c1", {"user_id": "u"})
    indexed.delete_thread("a")
    if redis_kind.endswith("-cluster"):  # old enough to be dropped
        monkeypatch.setattr(_core, "_INDEX_GRACE_MS", 0)
        time.sleep(0.005)
    run = indexed._run

    def racing(plan: Any) -> Any:
        if any(getattr(c, "script", None) == "index_drop" for c in plan):
            run_plan = indexed._run
            indexed._run = run  # type: ignore[method-assign]
            put(indexed, "a", "c2", {"user_id": "u"})  # re-added while the query runs
            indexed._run = run_plan  # type: ignore[method-assign]
        return run(plan)

    indexed._run = racing  # type: ignore[method-assign]
    assert listed(indexed, {"user_id": "u"}) == []
    indexed._run = run  # type: ignore[method-assign]
    assert index_members(client, prefix, "user_id", "u") == ["a"]
    assert listed(indexed, {"user_id": "u"}) == [("a", "", "c2")]


def test_limit_and_before_cut_the_indexed_listing(indexed: RedisSaver) -> None:
    indexed.reindex()
    for i in range(5):
        put(indexed, f"t{i}", "c1", {"user_id": "u"})
        put(indexed, f"t{i}", "c2", {"user_id": "u"})
    whole = listed(indexed, {"user_id": "u"})
    assert len(whole) == 10
    assert listed(indexed, {"user_id": "u"}, limit=3) == whole[:3]
    assert groups(listed(indexed, {"user_id": "u"}, before=cfg("x", "c2"))) == groups(
        [w for w in whole if w[2] < "c2"]
    )


def test_a_walk_of_many_pages_lists_threads_moved_by_a_put(
    indexed: RedisSaver, monkeypatch: Any
) -> None:
    indexed.reindex()
    monkeypatch.setattr(_core, "_INDEX_PAGE", 2)
    for i in range(6):
        put(indexed, f"t{i}", "c1", {"user_id": "u"})
        time.sleep(0.002)
    seen = []
    for tup in indexed.list(None, filter={"user_id": "u"}):
        seen.append(tup.config["configurable"]["thread_id"])
        if len(seen) == 1:
            put(indexed, "t0", "c2", {"user_id": "u"})  # the oldest moves to the top
    assert sorted(set(seen)) == [f"t{i}" for i in range(6)]


def test_a_cluster_put_adds_to_the_index_first(
    redis_url: str, prefix: str, client: Any, redis_kind: str
) -> None:
    if not redis_kind.endswith("-cluster"):
        pytest.skip("cluster only")
    with RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as saver:
        saver.setup()
        steps = saver._put_steps(cfg("t"), {**empty_checkpoint(), "id": "c1"}, {"user_id": "u"}, {})
        first = next(steps)
        assert [c.script for c in first] == ["index_add"]  # type: ignore[union-attr]
        saver._run(first)
        assert index_members(client, prefix, "user_id", "u") == ["t"]


# -- cost ----------------------------------------------------------------------------------


@pytest.mark.standalone
def test_round_trips(redis_url: str, prefix: str) -> None:
    client, counter = counting_client(redis_url)
    plain = RedisSaver(client=client, prefix=prefix + "p")
    saver = RedisSaver(client=client, prefix=prefix, index_metadata=("user_id", "source"))
    saver.reindex()
    for s in (plain, saver):
        put(s, "warm", "c0", {"user_id": "w"})
        listed(s, {"user_id": "w"})
        s.copy_thread("warm", "warm2")
    with counter.measure():
        put(plain, "t", "c1", {"user_id": "u"})
    assert counter.round_trips == 1
    with counter.measure():
        put(saver, "t", "c1", {"user_id": "u", "source": "loop"})
    assert counter.round_trips == 1
    for n in (10, 1000):
        for i in range(n - len([k for k in client.keys(f"{prefix}:ns:*")]) + 2):
            put(saver, f"other-{n}-{i}", "c1", {"user_id": f"v{i}"})
        with counter.measure():
            assert listed(saver, {"user_id": "u"}) == [("t", "", "c1")]
        # a page of the index (and the marker), then the thread as a filtered list reads
        # one: its payloads, then the writes and blobs of its matches
        assert counter.round_trips == 3
        assert len(counter.commands) == 3
    client.close()


# -- parity --------------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(["a", "b:c", "", "d"]),
            st.sampled_from(["", "s"]),
            st.sampled_from(["u1", "u2", 1, 1.0, None, True]),
        ),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b:c", "", "d"])),
        st.tuples(st.just("prune"), st.sampled_from(["a", "b:c", "", "d"])),
        st.tuples(st.just("copy"), st.sampled_from(["a", "b:c"]), st.sampled_from(["", "d"])),
    ),
    max_size=12,
)


@given(ops=OPS)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_index_lists_what_the_walk_and_in_memory_saver_list(
    redis_url: str, ops: list[tuple[Any, ...]]
) -> None:
    prefix = f"test:{uuid.uuid4().hex[:12]}"
    ref = InMemorySaver()
    with RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as saver:
        saver.reindex()
        counter = 0
        for op in ops:
            if op[0] == "put":
                counter += 1
                cid = f"c{counter:03d}"
                for s in (saver, ref):
                    put(s, op[1], cid, {"user_id": op[3]}, ns=op[2])
            elif op[0] == "delete":
                saver.delete_thread(op[1])
                ref.delete_thread(op[1])
            elif op[0] == "prune":
                saver.prune([op[1]])
                _prune_reference(ref, op[1])
            elif op[0] == "copy" and op[1] != op[2]:
                saver.copy_thread(op[1], op[2])
                for tup in list(ref.list(cfg(op[1]) | {"configurable": {"thread_id": op[1]}})):
                    conf = tup.config["configurable"]
                    ref.put(
                        {
                            "configurable": {
                                "thread_id": op[2],
                                "checkpoint_ns": conf["checkpoint_ns"],
                            }
                        },
                        tup.checkpoint,
                        tup.metadata,
                        tup.checkpoint["channel_versions"],
                    )
        for value in ("u1", "u2", 1, True, None, "none"):
            got = listed(saver, {"user_id": value})
            assert groups(got) == groups(walked(saver, {"user_id": value}))
            want = listed(ref, {"user_id": value})
            assert {k: v for k, v in groups(got).items()} == groups(want)


def _prune_reference(ref: InMemorySaver, thread: str) -> None:
    """keep_latest over InMemorySaver's dicts: the newest checkpoint per namespace stays."""
    for ns, cps in list(ref.storage.get(thread, {}).items()):
        newest = max(cps)
        for cid in list(cps):
            if cid != newest:
                del cps[cid]
        _ = ns


@pytest.mark.standalone
def test_expired_threads_leave_the_index_when_met(redis_url: str, prefix: str, client: Any) -> None:
    with RedisSaver(redis_url, prefix=prefix, ttl=0.2, index_metadata=("user_id",)) as saver:
        saver.reindex()
        put(saver, "gone", "c1", {"user_id": "u"})
        time.sleep(0.4)
        assert listed(saver, {"user_id": "u"}) == walked(saver, {"user_id": "u"}) == []
        assert index_members(client, prefix, "user_id", "u") == []


def test_reindex_empties_the_indexes_of_values_no_thread_holds_any_more(
    redis_url: str, prefix: str, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a TTL, the index of a value whose threads all expired (a user gone) is met by no
    put (each looks at members of the indexes it adds to) and by no query: it stayed for
    ever, one zset per value ever written. `reindex()` sweeps every index of its fields of
    members whose thread is gone (on a cluster, older than a grace period: here 0.3 s)."""
    monkeypatch.setattr(_core, "_INDEX_GRACE_MS", 300)
    with RedisSaver(redis_url, prefix=prefix, ttl=0.3, index_metadata=("user_id",)) as saver:
        saver.reindex()
        for i in range(30):
            put(saver, f"gone{i}", "c1", {"user_id": f"u{i}"})
        with RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as keeper:
            put(keeper, "kept", "c1", {"user_id": "u0"})  # no TTL: u0's index keeps it
        time.sleep(0.7)
        index_keys = [k for k in client.scan_iter(f"{prefix}:by:*") if client.type(k) == b"zset"]
        assert len(index_keys) == 30
        saver.reindex()
        assert [k for k in client.scan_iter(f"{prefix}:by:*") if client.type(k) == b"zset"] == [
            KeySpace(prefix).index("user_id", index_tag("u0") or "").encode()
        ]
        assert index_members(client, prefix, "user_id", "u0") == ["kept"]
        assert listed(saver, {"user_id": "u0"}) == [("kept", "", "c1")]


def test_reindex_spares_a_member_added_a_moment_ago_on_a_cluster(
    indexed: RedisSaver, client: Any, prefix: str, redis_kind: str
) -> None:
    """On a cluster a put or `copy_thread` adds its thread to the index a round trip before
    it writes the thread: a reindex in between must not take that member out (the thread
    would be missing from filtered queries for good), so members younger than a minute are
    spared. A standalone server adds it with the thread: there such a member is gone."""
    indexed.reindex()
    put(indexed, "a", "c1", {"user_id": "x"})
    key = KeySpace(prefix).index("user_id", index_tag("x") or "")
    seconds, micros = client.time()
    client.zadd(key, {"copy": seconds * 1000 + micros // 1000})  # a cluster's first step
    indexed.reindex()
    spared = {"a", "copy"} if redis_kind.endswith("-cluster") else {"a"}
    assert set(index_members(client, prefix, "user_id", "x")) == spared


def test_reindex_leaves_a_nested_keyspace_that_looks_like_an_index_alone(
    redis_url: str, prefix: str, client: Any
) -> None:
    foreign = f"{prefix}:by:user_id:sx"  # the shape of an index key, but a set
    client.sadd(foreign, "m")
    with RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as saver:
        saver.reindex()
    assert client.smembers(foreign) == {b"m"}


# -- async ---------------------------------------------------------------------------------


async def test_async_saver_indexes_and_reindexes(redis_url: str, prefix: str) -> None:
    async with AsyncRedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as saver:
        await saver.areindex()
        cp = {**empty_checkpoint(), "id": "c1"}
        await saver.aput(cfg("t"), cp, {"user_id": "u"}, {})
        await saver.aput(cfg("t2"), cp, {"user_id": "v"}, {})
        got = [
            t.config["configurable"]["thread_id"]
            async for t in saver.alist(None, filter={"user_id": "u"})
        ]
        assert got == ["t"]
        with pytest.raises(Exception, match="RedisSaver"):
            saver.reindex()
