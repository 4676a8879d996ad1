"""`get_delta_channel_history`: LangGraph rebuilds a DeltaChannel from the writes of the
ancestors back to the nearest one holding its value. The savers walk that chain in one
script, where the base class reads each ancestor with a `get_tuple` (every blob of it)."""

from __future__ import annotations

import collections
import operator
import time
import uuid
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from agentstate_testkit.savers import counting_async_client, counting_client
from langgraph_checkpoint_plainredis import AsyncRedisSaver, CorruptDataError, RedisSaver, _core
from langgraph_checkpoint_plainredis._keys import KeySpace
from langgraph_checkpoint_plainredis._scripts import SCRIPTS

try:
    from langgraph.channels.delta import DeltaChannel
except ImportError:  # a langgraph before DeltaChannel (the lowest-dependency run)
    DeltaChannel = None

pytestmark = pytest.mark.skipif(DeltaChannel is None, reason="this langgraph has no DeltaChannel")

CHANNELS = ["log", "rare", "plain", "nothing"]


def _extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


if DeltaChannel is not None:

    class Logged(TypedDict, total=False):
        log: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]
        rare: Annotated[list[str], DeltaChannel(_extend)]  # snapshots every 100 updates
        plain: Annotated[list[str], operator.add]


def _graph(checkpointer: Any) -> Any:
    def step(state: Logged) -> dict[str, Any]:
        out: dict[str, Any] = {"log": [f"n{len(state.get('log', []))}"]}
        if len(state.get("log", [])) % 4 == 0:
            out["rare"] = [f"r{len(state.get('log', []))}"]
        return out

    def echo(state: Logged) -> dict[str, Any]:
        return {"plain": [str(len(state.get("plain", [])))], "log": ["e"]}

    builder = StateGraph(Logged)
    builder.add_node("step", step)
    builder.add_node("echo", echo)
    builder.add_edge(START, "step")
    builder.add_edge(START, "echo")  # two tasks a step: writes of several tasks per ancestor
    return builder.compile(checkpointer=checkpointer)


def cfg(thread: str, cid: str | None = None, ns: str = "") -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def _grow(checkpointer: Any, thread: str) -> None:
    """Turns on one thread, then a fork from an early checkpoint continued for two turns."""
    graph = _graph(checkpointer)
    for i in range(9):
        graph.invoke({"log": [f"in{i}"]}, cfg(thread))
    early = [t.config for t in checkpointer.list(cfg(thread))][-5]
    graph.update_state(early, {"log": ["fork"]})  # the newest checkpoint: turns go on from it
    for i in range(2):
        graph.invoke({"log": [f"f{i}"]}, cfg(thread))


async def _agrow(checkpointer: Any, thread: str) -> None:
    graph = _graph(checkpointer)
    for i in range(9):
        await graph.ainvoke({"log": [f"in{i}"]}, cfg(thread))
    early = [t.config async for t in checkpointer.alist(cfg(thread))][-5]
    await graph.aupdate_state(early, {"log": ["fork"]})
    for i in range(2):
        await graph.ainvoke({"log": [f"f{i}"]}, cfg(thread))


def test_history_is_the_default_walk_of_every_checkpoint(sync_saver: RedisSaver) -> None:
    """For every checkpoint of a thread with a fork, per channel (DeltaChannels that snapshot
    often and rarely, a plain channel, an unknown one): exactly what the base class's walk
    over the saver's own `get_tuple` gives, task ids and order of writes included."""
    _grow(sync_saver, "t")
    configs = [t.config for t in sync_saver.list(cfg("t"))]
    assert len(configs) > 20
    for config in [*configs, cfg("t"), cfg("t", "no-such-checkpoint"), cfg("none")]:
        got = sync_saver.get_delta_channel_history(config=config, channels=CHANNELS)
        want = BaseCheckpointSaver.get_delta_channel_history(
            sync_saver, config=config, channels=CHANNELS
        )
        assert got == want, config
    assert sync_saver.get_delta_channel_history(config=cfg("t"), channels=[]) == {}
    # A state rebuilt from it is InMemorySaver's, for the newest checkpoint and the fork.
    memory = InMemorySaver()
    _grow(memory, "t")
    assert _graph(sync_saver).get_state(cfg("t")).values == (
        _graph(memory).get_state(cfg("t")).values
    )
    history = [s.values for s in _graph(sync_saver).get_state_history(cfg("t"))]
    assert history == [s.values for s in _graph(memory).get_state_history(cfg("t"))]


async def test_async_history_is_the_default_walk(async_saver: AsyncRedisSaver) -> None:
    await _agrow(async_saver, "t")
    configs = [t.config async for t in async_saver.alist(cfg("t"))]
    for config in [*configs, cfg("t"), cfg("none")]:
        got = await async_saver.aget_delta_channel_history(config=config, channels=CHANNELS)
        want = await BaseCheckpointSaver.aget_delta_channel_history(
            async_saver, config=config, channels=CHANNELS
        )
        assert got == want, config


def test_a_long_chain_takes_a_round_trip_per_budget(
    redis_url: str, prefix: str, redis_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One round trip reads up to `_HISTORY_HOPS` ancestors; a longer chain goes on from
    where the last one stopped, with the same result."""
    if redis_kind.endswith("-cluster"):
        pytest.skip("round trips are counted on a standalone server")
    client, counter = counting_client(redis_url)
    try:
        saver = RedisSaver(client=client, prefix=prefix)
        _grow(saver, "t")
        want = BaseCheckpointSaver.get_delta_channel_history(
            saver, config=cfg("t"), channels=CHANNELS
        )
        before = counter.round_trips
        assert saver.get_delta_channel_history(config=cfg("t"), channels=CHANNELS) == want
        assert counter.round_trips - before == 1
        read = _ancestors_read(saver, cfg("t"), CHANNELS)
        assert read > 8
        monkeypatch.setattr(_core, "_HISTORY_HOPS", 2)
        before = counter.round_trips
        assert saver.get_delta_channel_history(config=cfg("t"), channels=CHANNELS) == want
        assert counter.round_trips - before == (read + 1) // 2  # two ancestors a round trip
    finally:
        client.close()


def _ancestors_read(saver: RedisSaver, config: Any, channels: list[str]) -> int:
    """How many ancestors the walk reads: back to where every channel has a value, or the
    first checkpoint."""
    remaining, read = set(channels), 0
    tup = saver.get_tuple(config)
    while tup is not None and tup.parent_config and remaining:
        tup = saver.get_tuple(tup.parent_config)
        read += 1
        remaining -= set(tup.checkpoint["channel_values"]) if tup else remaining
    return read


async def test_a_turn_costs_the_same_round_trips_however_long_the_thread(
    redis_url: str, prefix: str, redis_kind: str
) -> None:
    """The base class's walk made a turn cost a round trip per ancestor back to a snapshot:
    126 for a turn after 40 (a DeltaChannel snapshots every 100 updates by default)."""
    if redis_kind.endswith("-cluster"):
        pytest.skip("round trips are counted on a standalone server")
    aclient, counter = counting_async_client(redis_url)
    try:
        graph = _graph(AsyncRedisSaver(client=aclient, prefix=prefix))
        costs = []
        for i in range(40):
            with counter.measure():
                await graph.ainvoke({"log": [f"in{i}"]}, cfg("t"))
            # Script calls: a turn may also open a connection (its handshake is counted).
            costs.append(sum(c[0] in ("EVALSHA", "EVAL") for c in counter.commands))
        assert set(costs[1:]) == {8}, costs  # 3 puts, 3 put_writes, a get, a history
    finally:
        await aclient.aclose()


def test_a_damaged_ancestor_is_named_and_a_missing_one_ends_the_chain(
    sync_saver: RedisSaver, client: Any
) -> None:
    parent = None
    for step in range(3):
        cp = empty_checkpoint()
        cp["channel_values"] = {}
        cp["channel_versions"] = {"log": f"{step + 1:032}.0"}
        config = sync_saver.put(
            cfg("t", parent), cp, {"step": step}, {"log": cp["channel_versions"]["log"]}
        )
        sync_saver.put_writes(config, [("log", [f"w{step}"])], f"task{step}")
        parent = config["configurable"]["checkpoint_id"]
    ids = [t.config["configurable"]["checkpoint_id"] for t in sync_saver.list(cfg("t"))]
    middle = sync_saver.keyspace.thread("t").cp("", ids[1])
    good = client.get(middle)
    client.set(middle, b"\x01damaged")
    with pytest.raises(CorruptDataError, match=ids[1]):
        sync_saver.get_delta_channel_history(config=cfg("t"), channels=["log"])
    client.delete(middle)  # as prune or an expiry leaves it: the walk stops before it
    got = sync_saver.get_delta_channel_history(config=cfg("t"), channels=["log"])
    assert got == BaseCheckpointSaver.get_delta_channel_history(
        sync_saver, config=cfg("t"), channels=["log"]
    )
    assert got == {"log": {"writes": []}}
    client.set(middle, good)
    got = sync_saver.get_delta_channel_history(config=cfg("t"), channels=["log"])
    assert [w[2] for w in got["log"]["writes"]] == [["w0"], ["w1"]]


async def test_the_other_side_names_the_class_to_use(
    sync_saver: RedisSaver, async_saver: AsyncRedisSaver
) -> None:
    with pytest.raises(NotImplementedError, match="AsyncRedisSaver"):
        await sync_saver.aget_delta_channel_history(config=cfg("t"), channels=["log"])
    with pytest.raises(NotImplementedError, match="Use RedisSaver"):
        async_saver.get_delta_channel_history(config=cfg("t"), channels=["log"])


@pytest.mark.parametrize(
    "by",
    [
        "a put",
        "a read with refresh_on_read",
        "put_writes",
        "a read by id with refresh_on_read",
        "the history of an older checkpoint",
    ],
)
def test_with_a_ttl_what_a_delta_channel_is_rebuilt_from_lives_as_long(
    redis_url: str, prefix: str, client: Any, by: str
) -> None:
    """Under a TTL older checkpoints expire one by one, and a DeltaChannel's newest value is
    rebuilt from those back to its last snapshot: an active thread read back without them.
    A put refreshes that chain with its checkpoint (in its round trip), and a read with
    refresh_on_read refreshes it too (the base class's walk did, with a `get_tuple` per
    ancestor; the first override did not). Keys are aged by hand, not by waiting."""
    ttl = 600
    with RedisSaver(redis_url, prefix=prefix, ttl=ttl, refresh_on_read=True) as saver:
        graph = _graph(saver)
        for i in range(6):  # runs named, so that the checkpoints are in run sets
            graph.invoke({"log": [f"in{i}"]}, {**cfg("t"), "metadata": {"run_id": f"r{i}"}})
        history = list(saver.list(cfg("t")))
        oldest, newest = history[-1], history[0]
        state = graph.get_state(cfg("t")).values
        tk = saver.keyspace.thread("t")
        cid = oldest.config["configurable"]["checkpoint_id"]
        watched = [tk.cp("", cid), tk.wr("", cid), tk.cp("", newest.checkpoint["id"])]
        watched.append(saver.keyspace.run(oldest.metadata["run_id"]))
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.pexpire(key, 2000)  # as if written `ttl` - 2 s ago
        older = history[3].config  # neither the newest nor the oldest
        with (
            RedisSaver(redis_url, prefix=prefix, ttl=ttl) as writer,
            RedisSaver(redis_url, prefix=prefix, ttl=ttl, refresh_on_read=True) as reader,
        ):
            if by == "a put":
                _graph(writer).invoke({"log": ["more"]}, cfg("t"))
            elif by == "a read with refresh_on_read":
                assert _graph(reader).get_state(cfg("t")).values == state
            elif by == "put_writes":  # a resumed run reads the checkpoint first
                assert writer.get_tuple(newest.config) is not None
                writer.put_writes(newest.config, [("log", ["w"])], "task")
            elif by == "a read by id with refresh_on_read":  # time travel: the newest too
                assert reader.get_tuple(older) is not None
            else:  # get_state_history reads each checkpoint's DeltaChannels by id
                reader.get_delta_channel_history(config=older, channels=["log", "rare"])
        left = {key: client.pttl(key) for key in watched}
        assert all(ms > (ttl - 60) * 1000 for ms in left.values()), left


def test_a_checkpoint_given_a_longer_life_keeps_its_delta_chain_as_long(
    redis_url: str, prefix: str
) -> None:
    """A checkpoint written by a saver with a 1 s TTL lives as long as the longest-lived key
    of its timeline: here a fork another saver keeps 60 s. The older checkpoints its
    DeltaChannel is rebuilt from live as long (they were refreshed with the plain TTL, and
    past 1 s the state read back with the channel rebuilt from nothing)."""
    with (
        RedisSaver(redis_url, prefix=prefix, ttl=1) as short,
        RedisSaver(redis_url, prefix=prefix, ttl=60) as long,
    ):
        graph = _graph(short)
        for i in range(2):
            graph.invoke({"log": [f"in{i}"]}, cfg("t"))
        history = list(short.list(cfg("t")))
        _graph(long).update_state(history[-2].config, {"plain": ["fork"]})  # kept 60 s
        graph.invoke({"log": ["more"]}, history[0].config)  # its own branch goes on
        state = graph.get_state(cfg("t")).values
        assert "more" in state["log"] and "fork" not in state["plain"]
        time.sleep(1.3)
        assert graph.get_state(cfg("t")).values == state


if DeltaChannel is not None:

    class Unwritten(TypedDict, total=False):
        log: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]
        extra: Annotated[list[str], DeltaChannel(_extend)]  # declared, never written


def test_a_delta_channel_never_written_has_nothing_to_rebuild(
    redis_url: str, prefix: str, client: Any
) -> None:
    """LangGraph counts supersteps for every DeltaChannel, one never written too, but has no
    version of it and rebuilds nothing: following it made every put (with a TTL) refresh,
    and prune keep, the whole thread back to its first checkpoint."""

    def step(state: Unwritten) -> dict[str, Any]:
        return {"log": [f"n{len(state.get('log', []))}"]}

    builder = StateGraph(Unwritten)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    with RedisSaver(redis_url, prefix=prefix, ttl=600) as saver:
        graph = builder.compile(checkpointer=saver)
        for i in range(8):
            graph.invoke({"log": [f"in{i}"]}, cfg("t"))
        history = list(saver.list(cfg("t")))
        assert "extra" in history[0].metadata["counters_since_delta_snapshot"]
        oldest = saver.keyspace.thread("t").cp("", history[-1].checkpoint["id"])
        client.pexpire(oldest, 2000)
        graph.invoke({"log": ["more"]}, cfg("t"))
        assert client.pttl(oldest) <= 2000  # 'log' snapshots every 3 updates: not its chain
        state = graph.get_state(cfg("t")).values
        before = len(list(saver.list(cfg("t"))))
        saver.prune(["t"], strategy="keep_latest")
        assert 1 <= len(list(saver.list(cfg("t")))) < before // 2
        assert graph.get_state(cfg("t")).values == state


if DeltaChannel is not None:

    class Snapshots(TypedDict, total=False):
        log: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]


def test_a_read_by_id_of_a_snapshot_refreshes_the_newest_chain(
    redis_url: str, prefix: str, client: Any
) -> None:
    """A checkpoint where every DeltaChannel snapshotted counts none in its metadata: a read
    of it by id with refresh_on_read refreshed the newest (the GET script does) but no chain,
    and the newest read back with the channel empty once its chain expired. The newest's own
    metadata names its channels now; a put_writes refreshes both chains in one script."""

    def step(state: Snapshots) -> dict[str, Any]:
        return {"log": [f"n{len(state.get('log', []))}"]}

    builder = StateGraph(Snapshots)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    ttl = 600
    with RedisSaver(redis_url, prefix=prefix, ttl=ttl) as saver:
        graph = builder.compile(checkpointer=saver)
        for i in range(7):
            graph.invoke({"log": [f"in{i}"]}, cfg("t"))
        history = list(saver.list(cfg("t")))
        assert history[0].metadata.get("counters_since_delta_snapshot")
        snapshot = next(t for t in history[1:] if "counters_since_delta_snapshot" not in t.metadata)
        state = graph.get_state(cfg("t")).values
    tk = KeySpace(prefix).thread("t")
    chain = [tk.cp("", t.checkpoint["id"]) for t in history[:3]]  # the newest's, back to 'log'
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.pexpire(key, 2000)
    with RedisSaver(redis_url, prefix=prefix, ttl=ttl, refresh_on_read=True) as reader:
        assert reader.get_tuple(snapshot.config) is not None
    assert all(client.pttl(key) > (ttl - 60) * 1000 for key in chain), chain
    with RedisSaver(redis_url, prefix=prefix, ttl=ttl) as saver:
        assert builder.compile(checkpointer=saver).get_state(cfg("t")).values == state


@pytest.mark.standalone
def test_put_writes_refreshes_the_chains_in_one_script(redis_url: str, prefix: str) -> None:
    client, counter = counting_client(redis_url)
    try:
        saver = RedisSaver(client=client, prefix=prefix, ttl=600)
        graph = _graph(saver)
        for i in range(4):
            graph.invoke({"log": [f"in{i}"]}, cfg("t"))
        newest = saver.get_tuple(cfg("t"))
        assert newest is not None
        with counter.measure():
            saver.put_writes(newest.config, [("log", ["w"])], "task")
        scripts = [c[1] for c in counter.commands if c[0] in ("EVALSHA", "EVAL")]
        assert counter.round_trips == 1 and len(scripts) == 2, counter.commands
    finally:
        client.close()


class Plain(TypedDict, total=False):
    plain: Annotated[list[str], operator.add]


@pytest.mark.parametrize("delta", [False, True], ids=["plain graph", "DeltaChannel graph"])
def test_a_read_by_id_sends_the_newest_back_only_with_delta_channels(
    redis_url: str, prefix: str, delta: bool
) -> None:
    """A read by id with refresh_on_read refreshes the timeline's newest too, and the GET
    script sent the newest's payload back so that the client could find its DeltaChannels,
    also for a graph without any (bytes sent and decoded for nothing). Now only a payload
    carrying their marks comes back."""
    builder = StateGraph(Plain)
    builder.add_node("step", lambda state: {"plain": [str(len(state.get("plain", [])))]})
    builder.add_edge(START, "step")
    with RedisSaver(redis_url, prefix=prefix, ttl=600, refresh_on_read=True) as saver:
        graph = _graph(saver) if delta else builder.compile(checkpointer=saver)
        for i in range(3):
            graph.invoke({"plain": [f"in{i}"]}, cfg("t"))
        older = list(saver.list(cfg("t")))[-1]
        (entry,) = saver._run(next(saver._get_steps(older.config)))
        assert (len(entry) > 5 and bool(entry[5])) is delta, entry[5:]
        assert saver.get_tuple(older.config) == saver.get_tuple(older.config)


async def _partly_cached_run(
    url: str, prefix: str, cls: Any, missing: str | None, admin: redis.Redis
) -> Any:
    """A DeltaChannel graph on two threads with a TTL (puts send their chain refresh in their
    round trip), then copy, prune, delete_for_runs and delete_thread; before each call the
    server's script cache holds every script but `missing`. Returns the threads' histories
    and the keys left, by kind."""

    def lose() -> None:
        if missing is not None:
            admin.script_flush()
            for name, script in SCRIPTS.items():
                if name != missing:
                    admin.script_load(script.source)

    async def call(method: str, *args: Any, **kwargs: Any) -> Any:
        lose()
        if cls is RedisSaver:
            return getattr(saver, method)(*args, **kwargs)
        return await getattr(saver, f"a{method}")(*args, **kwargs)

    saver = cls(url, prefix=prefix, ttl=300)
    graph = _graph(saver)
    runs = []
    for turn in range(3):
        for thread in ("t1", "t2"):
            runs.append(str(uuid.uuid4()))
            config = {"configurable": {"thread_id": thread}, "run_id": runs[-1]}
            lose()
            if cls is RedisSaver:
                graph.invoke({"log": [f"x{turn}"]}, config)
            else:
                await graph.ainvoke({"log": [f"x{turn}"]}, config)
    await call("copy_thread", "t1", "t1c")
    await call("prune", ["t2"], strategy="keep_latest")
    await call("delete_for_runs", runs[:3])
    histories = {}
    for thread in ("t1", "t1c", "t2"):
        lose()
        states = (
            list(graph.get_state_history(cfg(thread)))
            if cls is RedisSaver
            else [s async for s in graph.aget_state_history(cfg(thread))]
        )
        histories[thread] = [(repr(sorted(s.values.items())), s.metadata["step"]) for s in states]
    await call("delete_thread", "t2")
    kinds = collections.Counter(
        key.decode()[len(prefix) + 1 :].split(":", 1)[0]
        for key in admin.scan_iter(match=f"{prefix}:*", count=1000)
    )
    if cls is AsyncRedisSaver:
        await saver.aclose()
    return histories, kinds


@pytest.mark.standalone
@pytest.mark.parametrize("cls", [RedisSaver, AsyncRedisSaver])
async def test_a_plan_sent_again_after_noscript_ends_as_if_every_script_was_cached(
    redis_url: str, prefix: str, cls: Any
) -> None:
    """A plan of several scripts meets NOSCRIPT for one the server has not cached while the
    others run; it is sent again whole with EVAL, so those run twice, after the one that was
    not cached: each script repeated in order changes nothing more."""
    admin = redis.Redis.from_url(redis_url, protocol=2)
    expected = await _partly_cached_run(redis_url, f"{prefix}-all", cls, None, admin)
    assert expected[0]["t1"] and expected[0]["t1c"] == expected[0]["t1"]
    for missing in SCRIPTS:
        got = await _partly_cached_run(redis_url, f"{prefix}-{missing}", cls, missing, admin)
        assert got == expected, missing
    admin.close()
