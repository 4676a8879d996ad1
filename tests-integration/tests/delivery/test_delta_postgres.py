"""ReducingSaver over PostgresSaver with a `DeltaChannel` messages channel.

PostgresSaver rebuilds a DeltaChannel with its own paged history query, not LangGraph's
default walk: the wrapper's cut snapshots and cleaned history must hold over it too (the
package's tests cover InMemorySaver, SqliteSaver and plainredis).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver

WINDOW = 6


def strict(state: list[Any], writes: list[Any]) -> list[Any]:
    """`add_messages`, one write at a time: it refuses a remove of an id the list lacks."""
    for write in writes:
        state = add_messages(state, write)
    return state


class State(TypedDict):
    messages: Annotated[list[Any], DeltaChannel(strict, snapshot_frequency=3)]


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        yield saver


def test_a_delta_channel_thread_is_cut_at_its_snapshots_and_reads_back(pg: PostgresSaver) -> None:
    pruned: list[str] = []
    config = ReducerConfig(
        min_messages=4,
        max_messages=WINDOW,
        on_prune=[lambda ms, ns: pruned.extend(m.id for m in ms)],
    )
    saver = ReducingSaver(pg, MessageReducer(config=config))

    def chat(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(f"re {len(state['messages'])}", id=uuid.uuid4().hex)]}

    def trim(state: Any) -> dict[str, Any]:  # removes, from the whole list in memory
        old = state["messages"][:-8]
        return {"messages": [RemoveMessage(id=m.id) for m in old]} if old else {}

    graph = (
        StateGraph(State)
        .add_node("chat", chat)
        .add_node("trim", trim)
        .add_edge(START, "chat")
        .add_edge("chat", "trim")
        .add_edge("trim", END)
        .compile(checkpointer=saver)
    )
    thread = {"configurable": {"thread_id": "t"}}
    for i in range(10):
        said = [HumanMessage(f"a{i}", id=f"a{i}"), HumanMessage(f"b{i}", id=f"b{i}")]
        graph.invoke({"messages": said}, thread)
        ids = [m.id for m in graph.get_state(thread).values["messages"]]  # raised, uncleaned
        assert ids[-3:-1] == [f"a{i}", f"b{i}"] and len(ids) <= WINDOW + 2
    stored = [
        len(value.value)
        for item in pg.list(thread)
        if isinstance(value := item.checkpoint["channel_values"].get("messages"), _DeltaSnapshot)
    ]
    assert stored and max(stored) <= WINDOW
    assert pruned and len(pruned) == len(set(pruned))
