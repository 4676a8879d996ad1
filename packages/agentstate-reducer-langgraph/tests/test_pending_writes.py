"""Pending writes made against the list in memory, replayed onto the stored window.

A step whose tasks partly finish (a sibling interrupts or fails) leaves the finished
tasks' writes pending on the checkpoint the step started from; LangGraph replays them onto
that checkpoint's stored list on `get_state`, on resume and on a retry. Under ReducingSaver
that list is the window, while the writes were made against the whole list in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages
from langgraph.types import Command, interrupt

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def wrapped(inner: BaseCheckpointSaver[Any], hook: Any = None) -> ReducingSaver:
    hooks = [hook] if hook is not None else []
    config = ReducerConfig(min_messages=4, max_messages=6, on_prune=hooks)
    return ReducingSaver(inner, MessageReducer(config=config))


def forked(sibling: Callable[[State], Any], other: Callable[[State], Any]) -> StateGraph[Any]:
    """`chat`, then `sibling` and `other` in one step."""

    def chat(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("answer")]}

    graph = StateGraph(State)
    graph.add_node("chat", chat)
    graph.add_node("sibling", sibling)
    graph.add_node("other", other)
    graph.add_edge(START, "chat")
    graph.add_edge("chat", "sibling")
    graph.add_edge("chat", "other")
    graph.add_edge("sibling", END)
    graph.add_edge("other", END)
    return graph


def trim(state: State) -> dict[str, Any]:
    """The usual "delete old messages" node: removes all but the last four it sees."""
    return {"messages": [RemoveMessage(id=m.id) for m in state["messages"][:-4]]}


def approve(state: State) -> dict[str, Any]:
    interrupt("ok?")
    return {}


def valid(messages: list[Any]) -> bool:
    """No tool result without the AI message that called it, before it."""
    calls: set[str] = set()
    for message in messages:
        if message.type == "ai":
            calls.update(call["id"] for call in message.tool_calls)
        elif message.type == "tool" and message.tool_call_id not in calls:
            return False
    return True


CFG: Any = {"configurable": {"thread_id": "t"}}


def test_a_remove_of_a_cut_message_in_a_step_that_interrupts_replays(
    inner: BaseCheckpointSaver[Any], hook: Any
) -> None:
    """The remove named a message the stored window no longer held: `add_messages` raised
    on every read of the thread after the interrupt (get_state, resume): it was dead."""
    saver = wrapped(inner, hook)
    graph = forked(trim, approve).compile(checkpointer=saver)
    history = [HumanMessage(f"h{i}") if i % 2 == 0 else AIMessage(f"a{i}") for i in range(4)]
    graph.update_state(CFG, {"messages": history}, as_node="chat")
    graph.invoke({"messages": [HumanMessage("q"), AIMessage("x"), HumanMessage("more")]}, CFG)
    state = graph.get_state(CFG)
    assert state.next == ("other",)
    assert len(state.values["messages"]) <= 6
    graph.invoke(Command(resume=True), CFG)
    after = graph.get_state(CFG).values["messages"]
    assert [m.content for m in after][-1] == "answer" and len(after) <= 6
    assert all(count == 1 for count in hook.seen.values())


def test_a_retry_after_a_failed_sibling_replays_a_remove_of_a_cut_message(
    inner: BaseCheckpointSaver[Any],
) -> None:
    failing = [True]

    def flaky(state: State) -> dict[str, Any]:
        if failing.pop() if failing else False:
            raise RuntimeError("transient")
        return {}

    graph = forked(trim, flaky).compile(checkpointer=wrapped(inner))
    with pytest.raises(RuntimeError, match="transient"):
        graph.invoke({"messages": [HumanMessage(f"m{i}") for i in range(7)]}, CFG)
    graph.invoke(None, CFG)
    # the window holds the four trim kept: the run's first put cut the input to four, and
    # the answer joined them
    assert [m.content for m in graph.get_state(CFG).values["messages"]] == [
        "m4",
        "m5",
        "m6",
        "answer",
    ]


def test_a_rewrite_of_a_cut_tool_result_is_not_appended_to_the_window(
    inner: BaseCheckpointSaver[Any],
) -> None:
    """A node that compacts old tool results under their ids, beside one that interrupts:
    replayed onto the window, the rewrite of a result whose call was cut came back at its
    end, a tool result without its call (4 messages: no cut would ever repair it)."""

    def compact(state: State) -> dict[str, Any]:
        return {
            "messages": [
                ToolMessage("[compacted]", tool_call_id=m.tool_call_id, id=m.id)
                for m in state["messages"]
                if m.type == "tool"
            ]
        }

    graph = forked(compact, approve)
    call = {"name": "t", "args": {}, "id": "c1"}
    history = [
        HumanMessage("h0"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("big output", tool_call_id="c1"),
        AIMessage("a1"),
        HumanMessage("h1"),
        AIMessage("a2"),
        HumanMessage("h2"),
    ]
    graph.compile(checkpointer=wrapped(inner)).invoke({"messages": history}, CFG)
    # resumed by another process: its wrapper never saw the cut
    resumed = graph.compile(checkpointer=wrapped(inner))
    resumed.invoke(Command(resume=True), CFG)
    after = resumed.get_state(CFG).values["messages"]
    assert valid(after), [m.type for m in after]
    # h0: the preserved first; the answer joined the window the input was cut to
    assert [m.content for m in after] == ["h0", "h1", "a2", "h2", "answer"]


def test_a_read_drops_removes_and_results_the_window_cannot_replay(
    inner: BaseCheckpointSaver[Any],
) -> None:
    """A remove of a message that is gone is dropped on read; one of a message present, of
    one another write adds, and the remove-all are kept. A tool result whose call neither
    the window nor the writes hold is dropped; one whose call either holds is kept."""
    saver = wrapped(inner)
    graph = forked(trim, approve).compile(checkpointer=saver)
    call = {"name": "t", "args": {}, "id": "c0"}
    first = [HumanMessage("h0"), AIMessage("a0", id="a0", tool_calls=[call])]
    graph.invoke({"messages": [*first, ToolMessage("r0", tool_call_id="c0", id="r0")]}, CFG)
    config = graph.get_state(CFG).config
    later = {"name": "t", "args": {}, "id": "c9"}
    writes = [
        ("messages", [RemoveMessage(id="gone"), RemoveMessage(id="a0")]),
        ("messages", RemoveMessage(id="gone-too")),
        ("messages", [AIMessage("added", id="new"), RemoveMessage(id="new")]),
        ("messages", [ToolMessage("orphan", tool_call_id="c-cut", id="t1")]),
        ("messages", [ToolMessage("r0 again", tool_call_id="c0", id="r0")]),
        (
            "messages",
            [
                AIMessage("", id="a9", tool_calls=[later]),
                ToolMessage("r9", tool_call_id="c9", id="t9"),
            ],
        ),
    ]
    inner.put_writes(config, writes, "task-1")
    inner.put_writes(config, [("messages", RemoveMessage(id=REMOVE_ALL_MESSAGES))], "task-2")
    stored = saver.get_tuple(config)
    assert stored is not None
    # besides these, trim's own write (it removed nothing: the list was short)
    assert sorted(ids(stored, "task")) == sorted(
        [[], ["a0"], ["new", "new"], [], ["r0"], ["a9", "t9"], [REMOVE_ALL_MESSAGES]]
    )
    assert [ids(item, "task") for item in saver.list(config, limit=1)] == [ids(stored, "task")]
    assert ["gone", "a0"] in ids(inner.get_tuple(config), "task")  # stored as written


def ids(item: Any, tasks: str) -> list[list[str]]:
    """The message ids of each pending write of `item` to messages by tasks named `tasks`*."""
    assert item is not None
    return [
        [m.id for m in (v if isinstance(v, list) else [v])]
        for task, channel, v in item.pending_writes or []
        if channel == "messages" and task.startswith(tasks)
    ]


async def test_the_async_paths_replay_too() -> None:
    graph = forked(trim, approve).compile(checkpointer=wrapped(InMemorySaver()))
    history = [HumanMessage(f"h{i}") if i % 2 == 0 else AIMessage(f"a{i}") for i in range(4)]
    await graph.aupdate_state(CFG, {"messages": history}, as_node="chat")
    await graph.ainvoke({"messages": [HumanMessage("q"), AIMessage("x"), HumanMessage("m")]}, CFG)
    assert (await graph.aget_state(CFG)).next == ("other",)
    await graph.ainvoke(Command(resume=True), CFG)
    assert len((await graph.aget_state(CFG)).values["messages"]) <= 6


class Flagged(TypedDict):
    messages: Annotated[list[Any], add_messages]
    flag: int


def test_a_rewrite_of_a_message_the_window_holds_replays_on_a_fork(
    inner: BaseCheckpointSaver[Any],
) -> None:
    """Time travel after a later run cut the thread: a fork of an older checkpoint whose
    window still holds `h1` rewrites it beside a task that interrupts; the rewrite stays."""

    def chat(state: Flagged) -> dict[str, Any]:
        return {"messages": [AIMessage("answer")]}

    def edit(state: Flagged) -> dict[str, Any]:
        return {"messages": [HumanMessage("EDITED", id="h1")]}

    graph = StateGraph(Flagged)
    graph.add_node("chat", chat)
    graph.add_node("gate", lambda state: {})
    graph.add_node("edit", edit)
    graph.add_node("approve", approve)
    graph.add_edge(START, "chat")
    graph.add_edge("chat", END)
    graph.add_edge("gate", "edit")
    graph.add_edge("gate", "approve")
    graph.add_edge("edit", END)
    graph.add_edge("approve", END)
    app = graph.compile(checkpointer=wrapped(inner))
    first = [HumanMessage("h0", id="h0"), HumanMessage("h1", id="h1")]
    app.invoke({"messages": first, "flag": 0}, CFG)
    old = app.get_state(CFG).config
    app.invoke({"messages": [HumanMessage(f"x{i}", id=f"x{i}") for i in range(8)]}, CFG)
    fork = app.update_state(old, {"flag": 1}, as_node="gate")
    app.invoke(None, fork)
    app.invoke(Command(resume=True), CFG)
    assert [m.content for m in app.get_state(CFG).values["messages"]] == ["h0", "EDITED", "answer"]


# -- without a cut, the replay is LangGraph's own ------------------------------------------


def _insert_before_last(state: State) -> dict[str, Any]:
    messages = list(state["messages"])
    messages.insert(-1, AIMessage("inserted", id="ins"))
    return {"messages": messages}


def _clear_then_system_first(state: State) -> dict[str, Any]:
    system = SystemMessage("summary", id="sys-new")
    return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), system, *state["messages"]]}


def _new_first(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage("new first", id="nf"), *state["messages"]]}


def _edit_and_insert(state: State) -> dict[str, Any]:
    messages = list(state["messages"])
    messages[1] = AIMessage("EDITED", id=messages[1].id)
    messages.insert(1, AIMessage("context", id="ctx"))
    return {"messages": messages}


def _whole_list_and_tail(state: State) -> dict[str, Any]:
    return {"messages": [*state["messages"], AIMessage("tail", id="tail")]}


@pytest.mark.parametrize(
    "node",
    [
        _insert_before_last,
        _clear_then_system_first,
        _new_first,
        _edit_and_insert,
        _whole_list_and_tail,
    ],
)
def test_without_a_cut_pending_writes_replay_as_langgraph_replays_them(
    node: Callable[[State], dict[str, Any]],
) -> None:
    """A node writing a whole list (new messages among those it was given) beside one that
    interrupts. With a window no cut reaches, the wrapped saver reads back what InMemorySaver
    alone does, before and after the resume. (A rule dropping the messages of such a write
    that the window lacks, as echoes of a cut, lost these; a review found it.)"""

    def run(saver: BaseCheckpointSaver[Any]) -> list[list[tuple[Any, Any]]]:
        graph = StateGraph(State)
        graph.add_node("chat", lambda state: {"messages": [AIMessage("answer", id="a1")]})
        graph.add_node("node", node)
        graph.add_node("approve", approve)
        graph.add_edge(START, "chat")
        graph.add_edge("chat", "node")
        graph.add_edge("chat", "approve")
        graph.add_edge("node", END)
        graph.add_edge("approve", END)
        app = graph.compile(checkpointer=saver)
        app.invoke({"messages": [HumanMessage("q0", id="h0"), HumanMessage("q1", id="h1")]}, CFG)
        seen = [[(m.id, m.content) for m in app.get_state(CFG).values["messages"]]]
        app.invoke(Command(resume=True), CFG)
        return [*seen, [(m.id, m.content) for m in app.get_state(CFG).values["messages"]]]

    wide = MessageReducer(config=ReducerConfig(min_messages=100, max_messages=1000))
    assert run(ReducingSaver(InMemorySaver(), wide)) == run(InMemorySaver())
