"""A messages channel backed by LangGraph's `DeltaChannel` (beta), under ReducingSaver.

A DeltaChannel stores its value only at its snapshots (a `_DeltaSnapshot`, every
`snapshot_frequency` updates, and where LangGraph forces one); a read rebuilds it from the
newest snapshot and the writes made since (`get_delta_channel_history`). The wrapper cuts
the snapshots, so a read rebuilds the window plus the writes since, and cleans those writes
against it as it cleans pending writes.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from importlib.metadata import version
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph import message as graph_message
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver

# A langgraph before DeltaChannel (the lowest-dependency run) has nothing to test here.
DeltaChannel = pytest.importorskip("langgraph.channels.delta").DeltaChannel
if not hasattr(graph_message, "_messages_delta_reducer"):
    pytest.skip("this langgraph has no _messages_delta_reducer", allow_module_level=True)
_messages_delta_reducer = graph_message._messages_delta_reducer

WINDOW, KEEP = 6, 4


def wrapped(inner: BaseCheckpointSaver[Any], hook: Any = None) -> ReducingSaver:
    hooks = [hook] if hook is not None else []
    config = ReducerConfig(min_messages=KEEP, max_messages=WINDOW, on_prune=hooks)
    return ReducingSaver(inner, MessageReducer(config=config))


def schema(reducer: Any, frequency: int) -> Any:
    """A state of one messages channel, a DeltaChannel of `reducer` snapshotting every
    `frequency` updates (built at call time: the class syntax would read it as a string)."""
    channel = DeltaChannel(reducer, snapshot_frequency=frequency)
    return TypedDict("State", {"messages": Annotated[list[Any], channel]})  # type: ignore[operator]


def chat_graph(checkpointer: Any, frequency: int, reducer: Any = _messages_delta_reducer) -> Any:
    State = schema(reducer, frequency)

    def chat(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(f"re {state['messages'][-1].content}", id=uuid.uuid4().hex)]}

    return (
        StateGraph(State)
        .add_node("chat", chat)
        .add_edge(START, "chat")
        .compile(checkpointer=checkpointer)
    )


def turn(i: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(f"hi {i}", id=f"h{i}")]}


CONFIG = {"configurable": {"thread_id": "t"}}


def snapshots(saver: BaseCheckpointSaver[Any]) -> list[int]:
    """The length of every stored snapshot of the messages channel."""
    found = []
    for item in saver.list(CONFIG):
        value = item.checkpoint["channel_values"].get("messages")
        if isinstance(value, _DeltaSnapshot):
            found.append(len(value.value))
    return found


@pytest.mark.parametrize("frequency", [1, 3])
def test_a_thread_reads_back_its_window_and_the_writes_since_the_last_cut(
    inner: BaseCheckpointSaver[Any], hook: Any, frequency: int
) -> None:
    saver = wrapped(inner, hook)
    graph = chat_graph(saver, frequency)
    said: list[str] = []  # every message id of the conversation, in order
    for i in range(14):
        graph.invoke(turn(i), CONFIG)
        state = graph.get_state(CONFIG).values["messages"]
        said = [*said, f"h{i}", state[-1].id]
        ids = [m.id for m in state]
        # the preserved first message, then a run of the newest messages ending at this turn's
        assert ids[0] == "h0"
        assert ids[1:] == said[len(said) - len(ids) + 1 :]
        # a snapshot holds at most the window; fewer than `frequency` updates of one message
        # each (the input, the answer) come after it
        assert len(ids) <= WINDOW + frequency - 1
        if len(ids) < len(said):  # cut: between turns
            assert isinstance(state[1], HumanMessage)
    assert snapshots(inner) and max(snapshots(inner)) <= WINDOW
    # every message that left reached the hook once; the rest is still in the window
    assert set(hook.seen.values()) == {1}
    assert set(hook.seen) | set(ids) == set(said)
    assert not set(hook.seen) & set(ids)


def strict_reducer(state: list[Any], writes: list[Any]) -> list[Any]:
    """A DeltaChannel reducer of `add_messages` semantics, which refuses to remove an id
    the list does not hold (`_messages_delta_reducer` ignores such a remove)."""
    for write in writes:
        state = add_messages(state, write)
    return state


def test_a_remove_of_a_message_a_snapshot_cut_replays_onto_the_window(
    inner: BaseCheckpointSaver[Any],
) -> None:
    """A run cuts the snapshot it stores but goes on with the whole list in memory; a later
    step of that run removing old messages writes removes of ids the stored window has not.
    Replayed as they are, every later read of the thread raised."""

    State = schema(strict_reducer, 3)

    def chat(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(f"re {len(state['messages'])}", id=uuid.uuid4().hex)]}

    def trim(state: Any) -> dict[str, Any]:
        old = state["messages"][:-8]
        return {"messages": [RemoveMessage(id=m.id) for m in old]} if old else {}

    saver = wrapped(inner)
    graph = (
        StateGraph(State)
        .add_node("chat", chat)
        .add_node("trim", trim)
        .add_edge(START, "chat")
        .add_edge("chat", "trim")
        .add_edge("trim", END)
        .compile(checkpointer=saver)
    )
    for i in range(10):
        graph.invoke(
            {"messages": [HumanMessage(f"a{i}", id=f"a{i}"), HumanMessage(f"b{i}", id=f"b{i}")]},
            CONFIG,
        )
        messages = graph.get_state(CONFIG).values["messages"]  # raised before
        assert [m.id for m in messages][-3:-1] == [f"a{i}", f"b{i}"]
        assert len(messages) <= 8


def test_a_snapshot_is_cut_and_stays_a_snapshot() -> None:
    """A put unit: the stored value is a `_DeltaSnapshot` of the window, which a read rebuilds
    from; a plain list seed (a channel that was not a DeltaChannel before) stays a list."""
    inner = InMemorySaver()
    saver = wrapped(inner)
    messages = [HumanMessage(f"m{i}", id=f"m{i}") for i in range(10)]
    for value, kind in ((_DeltaSnapshot(messages), _DeltaSnapshot), (messages, list)):
        thread = {"configurable": {"thread_id": kind.__name__, "checkpoint_ns": ""}}
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": value}
        cp["channel_versions"] = {"messages": 1}
        meta: Any = {"counters_since_delta_snapshot": {"messages": [0, 0]}}
        saver.put(thread, cp, meta, {"messages": 1})
        stored = inner.get_tuple(thread)
        assert stored is not None
        kept = stored.checkpoint["channel_values"]["messages"]
        assert type(kept) is kind
        assert len(kept.value if kind is _DeltaSnapshot else kept) <= WINDOW
        assert cp["channel_values"]["messages"] is value  # the caller's checkpoint is untouched


# LangGraph 1.2.14 (the lowest-dependency run's) never returns from an agent loop of eight
# steps or more on a DeltaChannel, on a bare InMemorySaver too; 1.2.24 does.
_LOOPS_HANG = tuple(int(p) for p in version("langgraph").split(".")[:3]) < (1, 2, 24)


@pytest.mark.skipif(_LOOPS_HANG, reason="this LangGraph hangs long DeltaChannel agent loops")
@pytest.mark.parametrize("frequency", [1, 5])
def test_a_long_run_summarizes_once_per_cut_at_its_snapshots(
    frequency: int, scripted_loop: Any
) -> None:
    """Each snapshot of one long run cut the run's whole list: with a snapshot at every
    step, 91 summaries of up to 194 messages for 100 steps (found by review). A snapshot
    now cuts the window its run's last snapshot stored and what came since, as a plain
    list's put does."""
    sizes: list[int] = []

    def summarize(pruned: list[Any]) -> str:
        sizes.append(len(pruned))
        return f"{len(pruned)} earlier"

    config = ReducerConfig(
        min_messages=10, max_messages=20, summarize_fn=summarize, inject_summary=True
    )
    saver = ReducingSaver(InMemorySaver(), MessageReducer(config=config))
    graph = scripted_loop(schema(_messages_delta_reducer, frequency), 100, lambda m, n: [], saver)
    thread = {"configurable": {"thread_id": "long"}, "recursion_limit": 1000}
    graph.invoke({"messages": [HumanMessage("task", id="h")]}, thread)
    # a snapshot cuts at most its window (20) and what came since the last one (2 per step)
    assert len(sizes) <= 202 // (20 - 10 - 2) + 1 and max(sizes) <= 20 + 2 * frequency
    window = graph.get_state(thread).values["messages"]
    assert window[0].id == "h" and window[-1].id == "fin"


async def test_the_async_paths_cut_and_clean_too(hook: Any) -> None:
    saver = wrapped(InMemorySaver(), hook)
    graph = chat_graph(saver, 3, strict_reducer)
    for i in range(12):
        await graph.ainvoke(turn(i), CONFIG)
    state = (await graph.aget_state(CONFIG)).values["messages"]
    assert len(state) <= WINDOW + 2 and state[-2].id == "h11"
    assert hook.seen and set(hook.seen.values()) == {1}
    # the wrapper's history is the inner saver's, cleaned (here: nothing to drop)
    tip = await saver.aget_tuple(CONFIG)
    assert tip is not None
    got = await saver.aget_delta_channel_history(config=tip.config, channels=["messages"])
    want = await saver.inner.aget_delta_channel_history(config=tip.config, channels=["messages"])
    assert got == want


# -- pending writes of a step that stopped part way, on a DeltaChannel --------------------------


def stopping_graph(
    checkpointer: Any, frequency: int, stop: str, armed: dict[str, bool], load: bool = False
) -> Any:
    """chat, then `trim` (removing all but the first and the last three messages of the list
    in memory) beside `halt`, which interrupts or raises while `armed`: trim's writes stay
    pending on the checkpoint the step started from. With `load`, a step before chat adds
    twelve messages, so that the run cuts a snapshot before it stops."""
    State = schema(strict_reducer, frequency)

    def many(state: Any) -> dict[str, Any]:
        return {"messages": [HumanMessage(f"m{i}", id=f"m{i}") for i in range(12)]}

    def chat(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage("re", id=f"ai-{state['messages'][-1].id}")]}

    def trim(state: Any) -> dict[str, Any]:
        old = state["messages"][1:-3] if armed["on"] else []
        return {"messages": [RemoveMessage(id=m.id) for m in old]}

    def halt(state: Any) -> dict[str, Any]:
        if armed["on"] and stop == "interrupt":
            interrupt("ok?")
        elif armed["on"]:
            raise RuntimeError("boom")
        return {}

    builder = StateGraph(State).add_node("chat", chat)
    if load:
        builder.add_node("load", many).add_edge(START, "load").add_edge("load", "chat")
    else:
        builder.add_edge(START, "chat")
    return (
        builder.add_node("trim", trim)
        .add_node("halt", halt)
        .add_edge("chat", "trim")
        .add_edge("chat", "halt")
        .add_edge("trim", END)
        .add_edge("halt", END)
        .compile(checkpointer=checkpointer)
    )


def resume(graph: Any, stop: str) -> dict[str, Any]:
    """Goes on after the stop: answers the interrupt, or retries the step that raised."""
    result: dict[str, Any] = graph.invoke(
        Command(resume="yes") if stop == "interrupt" else None, CONFIG
    )
    return result


@pytest.mark.parametrize("stop", ["interrupt", "raise"])
def test_pending_writes_of_a_stopped_step_replay_onto_the_cut_window(
    inner: BaseCheckpointSaver[Any], stop: str
) -> None:
    """trim's removes name messages the cut took from the snapshot the step starts from:
    get_state, the resume and the retry raised "Attempting to delete a message with an ID
    that doesn't exist", for ever."""
    armed = {"on": False}
    graph = stopping_graph(wrapped(inner), 1, stop, armed)
    for i in range(7):
        graph.invoke(turn(i), CONFIG)
    armed["on"] = True
    if stop == "raise":
        with pytest.raises(RuntimeError, match="boom"):
            graph.invoke(turn(7), CONFIG)
    else:
        assert "__interrupt__" in graph.invoke(turn(7), CONFIG)
    ids = [m.id for m in graph.get_state(CONFIG).values["messages"]]  # raised
    assert ids[0] == "h0" and ids[-2:] == ["h7", "ai-h7"] and len(ids) <= 4
    armed["on"] = False
    assert [m.id for m in resume(graph, stop)["messages"]] == ids


@pytest.mark.parametrize("stop", ["interrupt", "raise"])
def test_pending_writes_on_a_checkpoint_between_snapshots_replay_onto_its_rebuilt_window(
    inner: BaseCheckpointSaver[Any], stop: str
) -> None:
    """The step stops on a checkpoint that holds no value (between snapshots), rebuilt from a
    snapshot this run cut and the writes since: its pending removes are cleaned against
    that rebuilt window (they raised, as above)."""
    armed = {"on": True}
    saver = wrapped(inner)
    graph = stopping_graph(saver, 2, stop, armed, load=True)
    if stop == "raise":
        with pytest.raises(RuntimeError, match="boom"):
            graph.invoke(turn(0), CONFIG)
    else:
        graph.invoke(turn(0), CONFIG)
    tip = inner.get_tuple(CONFIG)
    assert tip is not None and tip.pending_writes
    assert "messages" not in tip.checkpoint["channel_values"]  # no value: rebuilt
    ids = [m.id for m in graph.get_state(CONFIG).values["messages"]]  # raised
    assert ids[0] == "h0" and ids[-1] == "ai-m11" and len(ids) <= 4
    armed["on"] = False
    assert [m.id for m in resume(graph, stop)["messages"]] == ids


def test_a_pending_rewrite_of_a_cut_tool_result_is_not_appended() -> None:
    """A node rewrites an old tool result, whose call the cut took, beside a sibling that
    interrupts: the pending rewrite came back at the end of the window without its call,
    and the next snapshot stored it so."""
    State = schema(_messages_delta_reducer, 1)

    def load(state: Any) -> dict[str, Any]:
        calls: list[Any] = []
        for i in range(6):
            call = {"name": "t", "args": {}, "id": f"c{i}"}
            calls += [AIMessage("", id=f"a{i}", tool_calls=[call])]
            calls += [ToolMessage(f"r{i}", tool_call_id=f"c{i}", id=f"t{i}")]
        return {"messages": [*calls, HumanMessage("later", id="later"), AIMessage("ok", id="ok")]}

    def fix(state: Any) -> dict[str, Any]:
        old = next(m for m in state["messages"] if m.type == "tool")
        return {"messages": [ToolMessage("fixed", tool_call_id=old.tool_call_id, id=old.id)]}

    def ask(state: Any) -> dict[str, Any]:
        interrupt("?")
        return {}

    graph = (
        StateGraph(State)
        .add_node("load", load)
        .add_node("fix", fix)
        .add_node("ask", ask)
        .add_edge(START, "load")
        .add_edge("load", "fix")
        .add_edge("load", "ask")
        .add_edge("fix", END)
        .add_edge("ask", END)
        .compile(checkpointer=wrapped(InMemorySaver()))
    )
    graph.invoke({"messages": [HumanMessage("go", id="go")]}, CONFIG)
    assert [m.id for m in graph.get_state(CONFIG).values["messages"]] == ["go", "later", "ok"]
    graph.invoke(Command(resume="y"), CONFIG)
    assert [m.id for m in graph.get_state(CONFIG).values["messages"]] == ["go", "later", "ok"]


async def test_the_async_reads_rebuild_the_window_of_pending_writes_too() -> None:
    armed = {"on": True}
    graph = stopping_graph(wrapped(InMemorySaver()), 2, "interrupt", armed, load=True)
    await graph.ainvoke(turn(0), CONFIG)
    ids = [m.id for m in (await graph.aget_state(CONFIG)).values["messages"]]
    armed["on"] = False
    done = await graph.ainvoke(Command(resume="yes"), CONFIG)
    assert [m.id for m in done["messages"]] == ids and ids[-1] == "ai-m11"


# -- a history read while the inner saver's list is still open ----------------------------------


def within(seconds: float, read: Callable[[], Any]) -> Any:
    """`read()` in a worker thread, failing the test when it has not returned in `seconds`
    (a deadlock would otherwise hang the run)."""
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(read()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert done, f"no result in {seconds} s: the read is stuck"
    return done[0]


def test_the_history_is_read_after_the_inner_list_ended(inner: BaseCheckpointSaver[Any]) -> None:
    """SqliteSaver and PostgresSaver hold their connection's lock until `list` ends; the
    wrapper read the history of a checkpoint between snapshots inside it: get_state_history
    and `list` hung for ever."""
    saver = wrapped(inner)
    # stops on a checkpoint between snapshots with removes pending: its reads rebuild its window
    graph = stopping_graph(saver, 2, "interrupt", {"on": True}, load=True)
    graph.invoke(turn(0), CONFIG)
    tip = saver.get_tuple(CONFIG)
    assert tip is not None and tip.pending_writes != inner.get_tuple(CONFIG).pending_writes
    states = within(20, lambda: [*graph.get_state_history(CONFIG)])
    assert len(states) == len([*inner.list(CONFIG)]) > 2
    items = within(20, lambda: [*saver.list(CONFIG)])
    assert items[0].pending_writes == tip.pending_writes  # cleaned as get_tuple cleans
    first = within(20, lambda: next(iter(saver.list(CONFIG))))  # one at a time, still
    assert first.config == tip.config


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_the_async_history_is_read_after_the_inner_list_ended(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """The same under AsyncSqliteSaver and AsyncPostgresSaver: aget_state_history hung."""
    if kind == "sqlite":
        opened: Any = AsyncSqliteSaver.from_conn_string(":memory:")
    else:
        postgres = pytest.importorskip("langgraph.checkpoint.postgres.aio")
        opened = postgres.AsyncPostgresSaver.from_conn_string(
            request.getfixturevalue("postgres_url")
        )
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    async with opened as inner:
        if kind == "postgres":
            await inner.setup()
        saver = wrapped(inner)
        graph = stopping_graph(saver, 2, "interrupt", {"on": True}, load=True)
        await graph.ainvoke(turn(0), config)
        tip = await saver.aget_tuple(config)

        async def history() -> list[Any]:
            return [state async for state in graph.aget_state_history(config)]

        states = await asyncio.wait_for(history(), 20)
        assert len(states) == len([item async for item in inner.alist(config)]) > 2

        async def items() -> list[Any]:
            return [item async for item in saver.alist(config)]

        listed = await asyncio.wait_for(items(), 20)
        assert tip is not None and listed[0].pending_writes == tip.pending_writes
        if kind == "postgres":
            await inner.adelete_thread(config["configurable"]["thread_id"])
