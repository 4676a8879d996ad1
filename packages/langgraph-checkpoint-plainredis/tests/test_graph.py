"""End to end: real LangGraph graphs on both savers (interrupts, time travel, subgraphs)."""

from __future__ import annotations

import operator
import sys
import time
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from langgraph_checkpoint_plainredis import AsyncRedisSaver, PlainRedisError, RedisSaver
from langgraph_checkpoint_plainredis._core import SaverCore


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    notes: Annotated[list[str], operator.add]


def agent(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}


def approve(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "ok?", "n": len(state["messages"])})
    return {"notes": [f"approved: {answer}"]}


def sub_step(state: State) -> dict[str, Any]:
    return {"notes": [f"sub saw {len(state['messages'])}"]}


def build(checkpointer: Any) -> Any:
    sub = StateGraph(State).add_node("sub_step", sub_step).add_edge(START, "sub_step").compile()
    return (
        StateGraph(State)
        .add_node("agent", agent)
        .add_node("summarize", sub)
        .add_node("approve", approve)
        .add_edge(START, "agent")
        .add_edge("agent", "summarize")
        .add_edge("summarize", "approve")
        .add_edge("approve", END)
        .compile(checkpointer=checkpointer)
    )


def texts(values: dict[str, Any]) -> list[str]:
    return [m.content for m in values["messages"]]


def test_sync_graph_interrupt_resume_history_and_time_travel(redis_url: str, prefix: str) -> None:
    with RedisSaver(redis_url, prefix=prefix) as saver:
        graph = build(saver)
        config = {"configurable": {"thread_id": f"user:{uuid.uuid4()}"}}
        graph.invoke({"messages": [HumanMessage("hi")]}, config)
        state = graph.get_state(config)
        assert state.next == ("approve",)
        assert state.tasks[0].interrupts[0].value == {"question": "ok?", "n": 2}
        graph.invoke(Command(resume="yes"), config)
        state = graph.get_state(config)
        assert state.next == ()
        assert state.values["notes"] == ["sub saw 2", "approved: yes"]
        # The subgraph ran in its own namespace and left checkpoints there.
        namespaces = {
            t.config["configurable"]["checkpoint_ns"]
            for t in saver.list(
                {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
            )
        }
        assert "" in namespaces and any(ns.startswith("summarize:") for ns in namespaces)
        history = list(graph.get_state_history(config))
        assert [h.next for h in history][:2] == [(), ("approve",)]
        first_turn = next(h for h in history if h.next == ("agent",))
        graph.invoke(None, first_turn.config)  # replay from the past: a new branch
        graph.invoke(Command(resume="again"), config)
        assert graph.get_state(config).values["notes"][-1] == "approved: again"
        for old in history:
            assert graph.get_state(old.config).values == old.values


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="LangGraph supports interrupt() in async graphs from Python 3.11 (get_config needs "
    "contextvars in asyncio tasks); the matrix covers 3.10 with a static breakpoint",
)
async def test_async_graph_interrupt_resume_history_and_time_travel(
    redis_url: str, prefix: str
) -> None:
    async with AsyncRedisSaver(redis_url, prefix=prefix) as saver:
        graph = build(saver)
        config = {"configurable": {"thread_id": f"user:{uuid.uuid4()}"}}
        await graph.ainvoke({"messages": [HumanMessage("hi")]}, config)
        assert (await graph.aget_state(config)).next == ("approve",)
        await graph.ainvoke(Command(resume="yes"), config)
        await graph.ainvoke({"messages": [HumanMessage("more")]}, config)
        await graph.ainvoke(Command(resume="fine"), config)
        state = await graph.aget_state(config)
        assert texts(state.values) == ["hi", "echo: hi", "more", "echo: more"]
        history = [h async for h in graph.aget_state_history(config)]
        assert len(history) >= 8
        fork_from = next(
            h for h in history if texts(h.values) == ["hi", "echo: hi"] and h.next == ("summarize",)
        )
        await graph.aupdate_state(fork_from.config, {"notes": ["edited"]})
        for old in history:
            assert (await graph.aget_state(old.config)).values == old.values
        async for step in graph.astream(None, config, stream_mode="updates"):
            assert step
        await saver.adelete_thread(config["configurable"]["thread_id"])
        assert (await graph.aget_state(config)).values == {}


class Log(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def paused_beside_a_slow_branch(checkpointer: Any, slow_s: float) -> tuple[Any, dict[str, int]]:
    """A subgraph that pauses on an interrupt while a sibling branch runs `slow_s` more."""
    runs = {"a": 0}

    def a(state: Log) -> dict[str, Any]:
        runs["a"] += 1
        return {"log": ["a"]}

    def b(state: Log) -> dict[str, Any]:
        return {"log": [f"b:{interrupt('approve?')}"]}

    def slow(state: Log) -> dict[str, Any]:
        time.sleep(slow_s)
        return {"log": ["slow"]}

    sub = StateGraph(Log).add_node("a", a).add_node("b", b)
    sub = sub.add_edge(START, "a").add_edge("a", "b").add_edge("b", END).compile()
    graph = StateGraph(Log).add_node("sub", sub).add_node("slow", slow)
    graph = graph.add_edge(START, "sub").add_edge(START, "slow")
    return graph.add_edge("sub", END).add_edge("slow", END).compile(checkpointer=checkpointer), runs


def test_a_subgraph_paused_beside_a_slow_branch_waits_as_long_as_its_parent(
    redis_url: str, prefix: str
) -> None:
    """With a TTL, the parent's writes after a subgraph paused (a sibling branch running on)
    refresh the paused subgraph too: a resume late in the TTL of the thread's last write
    finds it where it paused, and does not run it again from the start."""
    # The parent writes 2 s into the paused subgraph's 4 s TTL; the resume comes 4.2 s
    # after the pause (past that TTL), 2.2 s after the parent's last write: ~2 s to spare
    # at each step on a busy machine.
    with RedisSaver(redis_url, prefix=prefix, ttl=4) as saver:
        app, runs = paused_beside_a_slow_branch(saver, slow_s=2.0)
        config = {"configurable": {"thread_id": "paused"}}
        app.invoke({"log": []}, config)
        time.sleep(2.2)
        assert app.invoke(Command(resume="yes"), config) == {"log": ["slow", "a", "b:yes"]}
        assert runs["a"] == 1


def paused_two_levels_down() -> tuple[Any, dict[str, int]]:
    """A graph whose subgraph's subgraph prepares, then pauses on an interrupt."""
    runs = {"prep": 0}

    def prep(state: Log) -> dict[str, Any]:
        runs["prep"] += 1
        return {"log": ["prep"]}

    def ask(state: Log) -> dict[str, Any]:
        return {"log": [f"answer:{interrupt('question?')}"]}

    inner = StateGraph(Log).add_node("prep", prep).add_node("ask", ask)
    inner = inner.add_edge(START, "prep").add_edge("prep", "ask").add_edge("ask", END).compile()
    middle = StateGraph(Log).add_node("inner", inner).add_edge(START, "inner")
    middle = middle.add_edge("inner", END).compile()
    graph = StateGraph(Log).add_node("child", middle).add_edge(START, "child")
    return graph.add_edge("child", END), runs


def test_reads_keep_subgraphs_paused_on_an_interrupt_alive(redis_url: str, prefix: str) -> None:
    """With `refresh_on_read`, a thread paused inside a subgraph and only read for longer than
    the TTL kept its root but lost the subgraphs' checkpoints (a read refreshed the namespace
    it read): the resume ran the paused subgraph again from its start. A read now refreshes
    the subgraphs the interrupt writes name, at every level, found in Redis (this reader never
    saw the pause)."""
    graph, runs = paused_two_levels_down()
    config = {"configurable": {"thread_id": "waiting"}}
    memory = graph.compile(checkpointer=InMemorySaver())
    memory.invoke({"log": []}, config)
    expected = memory.invoke(Command(resume="yes"), config)
    assert expected == {"log": ["prep", "answer:yes"]} and runs["prep"] == 1
    runs["prep"] = 0
    with RedisSaver(redis_url, prefix=prefix, ttl=1.5, refresh_on_read=True) as writer:
        graph.compile(checkpointer=writer).invoke({"log": []}, config)
    # 3 s of reads 0.3 s apart with a 1.5 s TTL: each read has 1.2 s to spare.
    with RedisSaver(redis_url, prefix=prefix, ttl=1.5, refresh_on_read=True) as reader:
        app = graph.compile(checkpointer=reader)
        started = time.monotonic()
        while time.monotonic() - started < 3:
            assert app.get_state(config).next == ("child",)
            time.sleep(0.3)
        assert app.invoke(Command(resume="yes"), config) == expected
    assert runs["prep"] == 1


class Step(TypedDict, total=False):
    x: str
    log: Annotated[list[str], operator.add]


def slow_steps(count: int, seconds: float) -> Any:
    """A subgraph of `count` steps in a row, each taking `seconds`."""

    def slow(state: Log) -> dict[str, Any]:
        time.sleep(seconds)
        return {"log": ["step"]}

    sub = StateGraph(Log)
    names = [f"s{i}" for i in range(count)]
    for name in names:
        sub = sub.add_node(name, slow)
    for a, b in zip([START, *names], [*names, END], strict=True):
        sub = sub.add_edge(a, b)
    return sub.compile()


def test_a_subgraph_running_longer_than_the_ttl_keeps_its_parents_state(
    redis_url: str, prefix: str
) -> None:
    """A subgraph's writes keep alive its parent's newest checkpoint, whose step is running
    it: a subgraph that runs longer than the TTL, writing all along, finds the parent's state
    whole when it returns. Before, the parent's checkpoint expired under it and the run ended
    without the value set before the subgraph."""
    parent = StateGraph(Step).add_node("set", lambda s: {"x": "kept", "log": ["set"]})
    parent = parent.add_node("child", slow_steps(6, 0.5)).add_node("after", lambda s: {})
    parent = parent.add_edge(START, "set").add_edge("set", "child").add_edge("child", "after")
    parent = parent.add_edge("after", END)
    config = {"configurable": {"thread_id": "long-child"}}
    expected = parent.compile(checkpointer=InMemorySaver()).invoke({}, config)
    assert expected["x"] == "kept"
    # 3 s of steps 0.5 s apart with a 2.5 s TTL: each step has 2 s to spare.
    with RedisSaver(redis_url, prefix=prefix, ttl=2.5) as saver:
        app = parent.compile(checkpointer=saver)
        assert app.invoke({}, config) == expected
        assert app.get_state(config).values == expected


@pytest.mark.parametrize("style", ["async", "sync"])
async def test_a_node_running_longer_than_the_ttl_keeps_the_values_it_did_not_change(
    redis_url: str, prefix: str, style: str
) -> None:
    """A node that takes longer than the TTL and changes one value: every key of the thread
    expires while it runs, and the next checkpoint reads the other value, which it does not
    write. Its put sends that value again (before, the expired blob could not be refreshed and
    the value read back as missing)."""

    def slow(state: Step) -> dict[str, Any]:
        time.sleep(1.3)
        return {"log": ["slow"]}

    graph = StateGraph(Step).add_node("slow", slow).add_edge(START, "slow")
    graph = graph.add_edge("slow", END)
    config = {"configurable": {"thread_id": "slow-node"}}
    expected = {"x": "kept", "log": ["set", "slow"]}
    if style == "async":
        async with AsyncRedisSaver(redis_url, prefix=prefix, ttl=1) as asaver:
            app = graph.compile(checkpointer=asaver)
            assert await app.ainvoke({"x": "kept", "log": ["set"]}, config) == expected
            assert (await app.aget_state(config)).values == expected
    else:
        with RedisSaver(redis_url, prefix=prefix, ttl=1) as saver:
            app = graph.compile(checkpointer=saver)
            assert app.invoke({"x": "kept", "log": ["set"]}, config) == expected
            assert app.get_state(config).values == expected


def test_a_subgraph_paused_beside_a_long_sibling_subgraph_keeps_its_answer(
    redis_url: str, prefix: str
) -> None:
    """A subgraph paused on an interrupt while a sibling subgraph runs longer than the TTL
    waits as long as the sibling writes: a resume right after finds it paused, and takes the
    answer. Before, its checkpoint expired first, and the resume asked again."""

    def ask(state: Log) -> dict[str, Any]:
        return {"log": [f"answer={interrupt('question?')}"]}

    asking = StateGraph(Log).add_node("ask", ask).add_edge(START, "ask").add_edge("ask", END)
    parent = StateGraph(Step).add_node("set", lambda s: {"x": "kept", "log": ["set"]})
    parent = parent.add_node("a", asking.compile()).add_node("b", slow_steps(6, 0.5))
    parent = parent.add_edge(START, "set").add_edge("set", "a").add_edge("set", "b")
    parent = parent.add_edge("a", END).add_edge("b", END)
    config = {"configurable": {"thread_id": "long-sibling"}}
    results = []
    # 3 s of steps 0.5 s apart with a 2.5 s TTL: each step has 2 s to spare.
    with RedisSaver(redis_url, prefix=prefix, ttl=2.5) as saver:
        for checkpointer in (InMemorySaver(), saver):
            app = parent.compile(checkpointer=checkpointer)
            assert "__interrupt__" in app.invoke({}, config)
            results.append(app.invoke(Command(resume="yes"), config))
    assert "answer=yes" in results[0]["log"]
    assert results[1] == results[0]


try:
    from langgraph.channels.delta import DeltaChannel
except ImportError:  # a langgraph before DeltaChannel (the lowest-dependency run)
    DeltaChannel = None


def _extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Logged(TypedDict):
    log: Annotated[list[str], DeltaChannel(_extend)]  # read when a graph is built


class Snapshotted(TypedDict):
    log: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=3)]


def test_reads_keep_the_delta_chain_of_a_paused_subgraph_alive(redis_url: str, prefix: str) -> None:
    """A subgraph paused on an interrupt whose DeltaChannel is rebuilt from its older
    checkpoints: a read refreshing only the subgraph's newest checkpoint let that chain
    expire, and the resume went on from an empty log (review finding). The read refreshes
    the chain too."""
    if DeltaChannel is None:
        pytest.skip("this langgraph has no DeltaChannel")
    runs = {"step": 0}

    def step(state: Any) -> dict[str, Any]:
        runs["step"] += 1
        return {"log": [f"p{len(state['log'])}"]}

    def ask(state: Any) -> dict[str, Any]:
        return {"log": [f"answer:{interrupt('question?')}"]}

    inner = StateGraph(Logged)
    names = ["p0", "p1", "p2", "p3", "ask"]
    for name in names:
        inner.add_node(name, ask if name == "ask" else step)
    for a, b in zip([START, *names], [*names, END], strict=True):
        inner.add_edge(a, b)
    graph = StateGraph(Logged).add_node("child", inner.compile()).add_edge(START, "child")
    graph = graph.add_edge("child", END)
    config = {"configurable": {"thread_id": "waiting"}}
    memory = graph.compile(checkpointer=InMemorySaver())
    memory.invoke({"log": []}, config)
    expected = memory.invoke(Command(resume="yes"), config)
    assert expected == {"log": ["p0", "p1", "p2", "p3", "answer:yes"]}
    with RedisSaver(redis_url, prefix=prefix, ttl=1.5, refresh_on_read=True) as writer:
        graph.compile(checkpointer=writer).invoke({"log": []}, config)
    runs["step"] = 0
    # 3 s of reads 0.3 s apart with a 1.5 s TTL: each read has 1.2 s to spare.
    with RedisSaver(redis_url, prefix=prefix, ttl=1.5, refresh_on_read=True) as reader:
        app = graph.compile(checkpointer=reader)
        started = time.monotonic()
        while time.monotonic() - started < 3:
            assert app.get_state(config).next == ("child",)
            time.sleep(0.3)
        assert app.invoke(Command(resume="yes"), config) == expected
    assert runs["step"] == 0


async def test_prune_keep_latest_keeps_what_a_delta_channel_is_rebuilt_from(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DeltaChannel's newest value is rebuilt from older checkpoints and writes, back to
    its last snapshot: keep_latest deleting them read the state back empty, silently.
    PostgresSaver refuses such threads; ours keeps that chain and prunes the rest, so the
    state reads back whole and the graph goes on as one never pruned."""
    if DeltaChannel is None:
        pytest.skip("this langgraph has no DeltaChannel")

    def step(state: Any) -> dict[str, Any]:
        return {"log": [f"n{len(state['log'])}"]}

    def logged(checkpointer: Any, schema: Any = Snapshotted) -> Any:
        builder = StateGraph(schema)
        builder.add_node("step", step)
        builder.add_edge(START, "step")
        return builder.compile(checkpointer=checkpointer)

    def plain_graph(checkpointer: Any) -> Any:
        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        return builder.compile(checkpointer=checkpointer)

    def cfg(thread: str) -> Any:
        return {"configurable": {"thread_id": thread}}

    memory = InMemorySaver()
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for i in range(7):
            for checkpointer in (saver, memory):
                logged(checkpointer).invoke({"log": [f"in{i}"]}, cfg("delta"))
                logged(checkpointer, Logged).invoke({"log": [f"in{i}"]}, cfg("never"))
            plain_graph(saver).invoke({"messages": [HumanMessage(f"q{i}")]}, cfg("plain"))
        threads = ("delta", "never", "plain")
        states = {t: logged(saver).get_state(cfg(t)).values for t in ("delta", "never")}
        before = {t: len(list(saver.list(cfg(t)))) for t in threads}
        saver.prune(list(threads), strategy="keep_latest")
        after = {t: len(list(saver.list(cfg(t)))) for t in threads}
        # 'never' snapshots every 100 updates: all of it is kept; 'delta' back to a snapshot.
        assert after["plain"] == 1 and after["never"] == before["never"]
        assert 1 < after["delta"] < before["delta"], (before, after)
        assert {t: logged(saver).get_state(cfg(t)).values for t in states} == states
        for i in range(2):
            for checkpointer in (saver, memory):
                logged(checkpointer).invoke({"log": [f"more{i}"]}, cfg("delta"))
        assert logged(saver).get_state(cfg("delta")).values == (
            logged(memory).get_state(cfg("delta")).values
        )
        async with AsyncRedisSaver(redis_url, prefix=prefix) as asaver:
            await asaver.aprune(["delta"], strategy="keep_latest")
        assert logged(saver).get_state(cfg("delta")).values == (
            logged(memory).get_state(cfg("delta")).values
        )

        # Its newest checkpoint written after the client read the metadata (a race, played
        # here by a client that reads none): the prune scripts refuse it, the check-only
        # ones of a call on several threads before any changes. ('never' counts updates in
        # every checkpoint; a checkpoint where every DeltaChannel snapshots holds no marks.)
        counts = {t: len(list(saver.list(cfg(t)))) for t in threads}
        monkeypatch.setattr(SaverCore, "_head_plans", lambda self, tk, heads: [])
        with pytest.raises(PlainRedisError, match="'never' during the call.*Nothing was pruned"):
            saver.prune(["plain", "never"], strategy="keep_latest")
        with pytest.raises(PlainRedisError, match="'never' during.*These were not pruned"):
            saver.prune(["never"], strategy="keep_latest")
        monkeypatch.undo()
        assert {t: len(list(saver.list(cfg(t)))) for t in threads} == counts

        # LangGraph.js marks its DeltaChannel graphs without naming the channels: refused.
        config: Any = {"configurable": {"thread_id": "js", "checkpoint_ns": ""}}
        for n in range(3):
            meta: Any = {"step": n, "delta_writes_versioned": True}
            config = saver.put(config, empty_checkpoint(), meta, {})
        with pytest.raises(NotImplementedError, match="name no channels.*'js'.*strategy='delete'"):
            saver.prune(["plain", "js"], strategy="keep_latest")
        assert len(list(saver.list(cfg("js")))) == 3
        saver.prune(["js"], strategy="delete")
        assert saver.get_tuple(cfg("js")) is None


async def test_prune_keep_latest_reads_delta_marks_in_metadata_keys_only(
    redis_url: str, prefix: str
) -> None:
    """A DeltaChannel is known by the keys LangGraph adds to the metadata. The text of
    those keys in a metadata value (a user's note) refuses nothing: the script searched the
    payload's bytes and refused the thread the client had found free of them."""
    note = "counters_since_delta_snapshot and delta_writes_versioned are LangGraph's"
    cfgs = {t: {"configurable": {"thread_id": t, "checkpoint_ns": ""}} for t in ("s", "a", "b")}
    with RedisSaver(redis_url, prefix=prefix) as saver:
        for config in cfgs.values():
            for step in range(3):
                meta: Any = {"step": step, "source": "loop", "note": note}
                config = saver.put(config, empty_checkpoint(), meta, {})
        saver.prune(["s"], strategy="keep_latest")
        assert len(list(saver.list(cfgs["s"]))) == 1
        async with AsyncRedisSaver(redis_url, prefix=prefix) as asaver:
            await asaver.aprune(["a", "b"], strategy="keep_latest")  # the check-only scripts too
        assert [len(list(saver.list(cfgs[t]))) for t in ("a", "b")] == [1, 1]
        assert saver.get_tuple(cfgs["a"]).metadata["note"] == note  # type: ignore[union-attr]
