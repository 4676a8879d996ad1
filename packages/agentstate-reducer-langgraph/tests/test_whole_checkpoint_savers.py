"""Savers that store the whole checkpoint on every put (SqliteSaver) keep the window too.

LangGraph keeps the uncut message list in memory for the rest of a run, so a later step that
writes another channel hands the wrapper a checkpoint whose messages are that list, at the
version the wrapper already cut. A saver storing values per channel version ignores them; a
saver storing whole checkpoints stored them uncut, and the next run loaded them back.
"""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver, _saver

WINDOW, KEEP, TURNS = 4, 2, 6


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    turns: Annotated[int, operator.add]


def chat(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(f"reply to {state['messages'][-1].content}")]}


def count(state: State) -> dict[str, Any]:
    return {"turns": 1}  # the last step of every run writes no message


def graph(checkpointer: Any) -> Any:
    return (
        StateGraph(State)
        .add_node("chat", chat)
        .add_node("count", count)
        .add_edge(START, "chat")
        .add_edge("chat", "count")
        .add_edge("count", END)
        .compile(checkpointer=checkpointer)
    )


def reducer(pruned: list[str]) -> MessageReducer:
    def remember(messages: list[Any], namespace: Any) -> None:
        pruned.extend(m.content for m in messages)

    return MessageReducer(
        config=ReducerConfig(min_messages=KEEP, max_messages=WINDOW, on_prune=[remember])
    )


def stored_lengths(inner: BaseCheckpointSaver[Any], config: Any) -> list[int]:
    """The message count of every checkpoint the inner saver holds for the thread."""
    return [len(t.checkpoint["channel_values"].get("messages", [])) for t in inner.list(config)]


@contextmanager
def sqlite() -> Iterator[BaseCheckpointSaver[Any]]:
    with SqliteSaver.from_conn_string(":memory:") as saver:
        yield saver


@contextmanager
def memory() -> Iterator[BaseCheckpointSaver[Any]]:
    yield InMemorySaver()


def sent_and_seen(pruned: list[str], kept: list[Any]) -> None:
    """Every message reached either the window or the hook, and the hook once."""
    sent = {f"q{i}" for i in range(TURNS)} | {f"reply to q{i}" for i in range(TURNS)}
    assert len(pruned) == len(set(pruned))
    assert set(pruned) | {m.content for m in kept} == sent


@pytest.mark.parametrize("inner_saver", [sqlite, memory])
def test_every_stored_checkpoint_holds_the_window(inner_saver: Any) -> None:
    pruned: list[str] = []
    with inner_saver() as inner:
        app = graph(ReducingSaver(inner, reducer(pruned)))
        config = {"configurable": {"thread_id": "t"}}
        for turn in range(TURNS):
            app.invoke({"messages": [HumanMessage(f"q{turn}")], "turns": 0}, config)
            assert max(stored_lengths(inner, config)) <= WINDOW
        kept = app.get_state(config).values["messages"]
        assert len(kept) <= WINDOW
        sent_and_seen(pruned, kept)


async def test_every_stored_checkpoint_holds_the_window_under_ainvoke() -> None:
    @asynccontextmanager
    async def opened() -> AsyncIterator[AsyncSqliteSaver]:
        async with AsyncSqliteSaver.from_conn_string(":memory:") as saver:
            yield saver

    pruned: list[str] = []
    async with opened() as inner:
        app = graph(ReducingSaver(inner, reducer(pruned)))
        config = {"configurable": {"thread_id": "t"}}
        for turn in range(TURNS):
            await app.ainvoke({"messages": [HumanMessage(f"q{turn}")], "turns": 0}, config)
            lengths = [
                len(t.checkpoint["channel_values"].get("messages", []))
                async for t in inner.alist(config)
            ]
            assert max(lengths) <= WINDOW
        kept = (await app.aget_state(config)).values["messages"]
        sent_and_seen(pruned, kept)


def test_the_remembered_windows_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `WINDOWS` threads the oldest is forgotten: a list it is handed again is stored
    as given (a list loaded from storage is a window already)."""
    monkeypatch.setattr(_saver, "WINDOWS", 2)
    pruned: list[str] = []
    with sqlite() as inner:
        saver = ReducingSaver(inner, reducer(pruned))
        app = graph(saver)
        for thread in ("a", "b", "c"):
            app.invoke({"messages": [HumanMessage("q0")], "turns": 0}, _config(thread))
        assert len(saver._windows._last) <= 2


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}
