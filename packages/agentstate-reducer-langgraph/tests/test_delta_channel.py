"""A messages channel backed by LangGraph's `DeltaChannel` (beta), under ReducingSaver.

A DeltaChannel stores its value only at its snapshots (a `_DeltaSnapshot`, every
`snapshot_frequency` updates, and where LangGraph forces one); a read rebuilds it from the
newest snapshot and the writes made since (`get_delta_channel_history`). The wrapper cuts
the snapshots, so a read rebuilds the window plus the writes since, and cleans those writes
against it as it cleans pending writes.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph
from langgraph.graph import message as graph_message
from langgraph.graph.message import add_messages

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
