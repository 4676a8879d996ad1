"""Every combination: LangGraph's conformance suite, its capabilities, a chat graph end to end,
and storage that stays bounded when wrapped."""

from __future__ import annotations

import asyncio
import operator
import sys
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from combos import WINDOW, Combo, Place, as_async, capabilities, sync_capabilities
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from agentstate_testkit.savers import assert_conformance


async def test_conformance(combo: Combo, place: Place) -> None:
    await assert_conformance(
        combo.conformance_factory(place), combo.id, expected=set(combo.backend.capabilities)
    )


async def test_capabilities(combo: Combo, place: Place) -> None:
    async with combo.open(place) as saver:
        assert capabilities(saver if combo.is_async else as_async(saver)) == set(
            combo.backend.capabilities
        )
        if combo.wrapped:
            assert sync_capabilities(saver) == sync_capabilities(saver.inner)


# `ReducingSaver` used to define `aput`, `aput_writes`, `aget_tuple`, `alist` and
# `adelete_thread` always, so around a sync-only saver (`PostgresSaver`, `SqliteSaver`)
# LangGraph's probe saw async capabilities the inner saver lacks: it now probes the same.
async def test_wrapper_is_probed_exactly_like_its_inner_saver(
    wrapped_combo: Combo, place: Place
) -> None:
    async with wrapped_combo.open(place) as saver:
        assert capabilities(saver) == capabilities(saver.inner)


# -- a chat graph, end to end --------------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]
    notes: Annotated[list[str], operator.add]


def agent(state: Chat) -> dict[str, Any]:
    return {"messages": [AIMessage(f"echo: {state['messages'][-1].content}")]}


# `interrupt()` finds its run through a context variable that asyncio tasks carry only from
# Python 3.11 on; before that an async graph pauses at a static breakpoint instead.
def dynamic_interrupts(is_async: bool) -> bool:
    return not is_async or sys.version_info >= (3, 11)


def approve(state: Chat) -> dict[str, Any]:
    answer = interrupt({"question": "send?", "last": state["messages"][-1].content})
    return {"notes": [answer]}


def approve_at_breakpoint(state: Chat) -> dict[str, Any]:
    return {"notes": [f"ok{len(state['notes'])}"]}


def chat_graph(saver: Any, is_async: bool) -> Any:
    dynamic = dynamic_interrupts(is_async)
    return (
        StateGraph(Chat)
        .add_node("agent", agent)
        .add_node("approve", approve if dynamic else approve_at_breakpoint)
        .add_edge(START, "agent")
        .add_edge("agent", "approve")
        .add_edge("approve", END)
        .compile(checkpointer=saver, interrupt_before=[] if dynamic else ["approve"])
    )


class Driver:
    """One way to call a compiled graph: `ainvoke` on async savers, `invoke` in a thread else."""

    def __init__(self, graph: Any, saver: Any, is_async: bool) -> None:
        self.graph, self.saver, self.is_async = graph, saver, is_async

    async def invoke(self, value: Any, config: dict[str, Any]) -> Any:
        if self.is_async:
            return await self.graph.ainvoke(value, config)
        return await asyncio.to_thread(self.graph.invoke, value, config)

    async def resume(self, answer: str, config: dict[str, Any]) -> Any:
        """Resumes a paused thread so that `approve` records `answer` (at a breakpoint it
        records `ok<n>` itself, the answer the scenario gives anyway)."""
        if dynamic_interrupts(self.is_async):
            return await self.invoke(Command(resume=answer), config)
        return await self.invoke(None, config)

    async def state(self, config: dict[str, Any]) -> Any:
        if self.is_async:
            return await self.graph.aget_state(config)
        return await asyncio.to_thread(self.graph.get_state, config)

    async def history(self, config: dict[str, Any], **kwargs: Any) -> list[Any]:
        if self.is_async:
            return [s async for s in self.graph.aget_state_history(config, **kwargs)]
        return await asyncio.to_thread(lambda: list(self.graph.get_state_history(config, **kwargs)))

    async def delete_thread(self, thread: str) -> None:
        if self.is_async:
            await self.saver.adelete_thread(thread)
        else:
            await asyncio.to_thread(self.saver.delete_thread, thread)


def texts(state: Any) -> list[str]:
    return [m.content for m in state.values.get("messages", [])]


async def test_chat_graph_interrupt_resume_history_and_time_travel(
    combo: Combo, place: Place
) -> None:
    delivered: list[Any] = []
    async with combo.open(place, delivered=delivered) as saver:
        chat = Driver(chat_graph(saver, combo.is_async), saver, combo.is_async)
        thread = f"chat-{uuid.uuid4().hex[:8]}"
        config: dict[str, Any] = {"configurable": {"thread_id": thread}}
        sent: list[str] = []
        for turn in range(4):
            await chat.invoke({"messages": [HumanMessage(f"q{turn}")]}, config)
            sent += [f"q{turn}", f"echo: q{turn}"]
            paused = await chat.state(config)
            assert paused.next == ("approve",)
            if dynamic_interrupts(combo.is_async):
                assert paused.tasks[0].interrupts[0].value == {
                    "question": "send?",
                    "last": f"echo: q{turn}",
                }
            await chat.resume(f"ok{turn}", config)
            assert (await chat.state(config)).next == ()

        done = await chat.state(config)
        assert done.values["notes"] == ["ok0", "ok1", "ok2", "ok3"]
        kept = texts(done)
        if combo.wrapped:
            # A bounded window that ends with the newest turn; every message cut from it
            # reached long-term memory exactly once.
            assert len(kept) <= WINDOW and kept[-2:] == ["q3", "echo: q3"]
            gone = [m.content for m in delivered]
            assert sorted(gone + kept) == sorted(sent), (gone, kept)
        else:
            assert kept == sent and delivered == []

        history = await chat.history(config)
        assert history[0].values == done.values
        assert len(history) >= 4 * 3
        assert [s.config for s in await chat.history(config, limit=2)] == [
            s.config for s in history[:2]
        ]
        for snapshot in history:
            assert (await chat.state(snapshot.config)).values == snapshot.values

        # Time travel: a new input from the end of the first turn forks the thread.
        first = next(s for s in history if s.values.get("notes") == ["ok0"] and s.next == ())
        await chat.invoke({"messages": [HumanMessage("branch")]}, first.config)
        await chat.resume("ok1", config)
        forked = await chat.state(config)
        assert texts(forked) == ["q0", "echo: q0", "branch", "echo: branch"]
        assert forked.values["notes"] == ["ok0", "ok1"]
        lineage, parent = [], forked.parent_config
        while parent is not None:
            lineage.append(parent["configurable"]["checkpoint_id"])
            parent = (await chat.state(parent)).parent_config
        assert first.config["configurable"]["checkpoint_id"] in lineage
        # The old branch is still there, unchanged.
        assert (await chat.state(history[0].config)).values == done.values
        assert len(await chat.history(config)) > len(history)

        await chat.delete_thread(thread)
        assert (await chat.state(config)).values == {}


# -- storage stays bounded -----------------------------------------------------------------


class Talk(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: Talk) -> dict[str, Any]:
    return {"messages": [AIMessage(f"echo: {state['messages'][-1].content}")]}


def talker(saver: Any, is_async: bool) -> Driver:
    graph = StateGraph(Talk).add_node("reply", reply).add_edge(START, "reply")
    return Driver(graph.compile(checkpointer=saver), saver, is_async)


async def say(talk: Driver, thread: str, turn: int) -> None:
    config = {"configurable": {"thread_id": thread}}
    await talk.invoke({"messages": [HumanMessage(f"question {turn:04d}")]}, config)


async def test_storage_bound(combo: Combo, place: Place) -> None:
    """Wrapped: the newest messages value stops growing once the window is full (turn 3 of
    two messages each), and what a thread stores grows linearly. Unwrapped, as a control of
    the measurements: both grow faster."""
    backend, thread = combo.backend, f"bound-{uuid.uuid4().hex[:8]}"
    newest: dict[int, int] = {}
    total: dict[int, int] = {}
    async with combo.open(place) as saver:
        inner, talk = saver.inner if combo.wrapped else saver, talker(saver, combo.is_async)
        for turn in range(1, 61):
            await say(talk, thread, turn)
            if turn <= 10:
                newest[turn] = await backend.newest_messages_bytes(inner, thread)
            if turn % 20 == 0:
                total[turn] = await backend.thread_bytes(inner, thread)
    early, late = total[40] - total[20], total[60] - total[40]
    if combo.wrapped:
        assert newest[10] <= newest[3], newest
        assert late <= 1.15 * early, total
    else:
        assert newest[10] > 1.5 * newest[3], newest
        assert late > 1.2 * early, total


@pytest.mark.slow
async def test_two_hundred_turns_grow_linearly_wrapped_quadratically_unwrapped_flat_pruned(
    curve_combo: Combo, place: Place
) -> None:
    backend = curve_combo.backend
    curves: dict[str, dict[int, int]] = {}
    for mode in ("unwrapped", "wrapped", "pruned"):
        curve = curves[mode] = {}
        thread = f"{mode}-{uuid.uuid4().hex[:8]}"
        async with curve_combo.open(place, wrapped=mode != "unwrapped") as saver:
            inner = saver.inner if mode != "unwrapped" else saver
            talk = talker(saver, curve_combo.is_async)
            for turn in range(1, 201):
                await say(talk, thread, turn)
                if mode == "pruned":
                    await saver.aprune([thread], strategy="keep_latest")
                if turn % 50 == 0:
                    curve[turn] = await backend.thread_bytes(inner, thread)
    unwrapped, wrapped, pruned = curves["unwrapped"], curves["wrapped"], curves["pruned"]
    assert unwrapped[200] - unwrapped[150] > 1.5 * (unwrapped[100] - unwrapped[50]), curves
    assert wrapped[200] - wrapped[150] <= 1.15 * (wrapped[100] - wrapped[50]), curves
    assert wrapped[200] < unwrapped[200] / 3, curves
    assert pruned[200] <= pruned[50] * 1.05, curves
