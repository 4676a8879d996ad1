"""Real LangChain messages and LangGraph graphs through `as_langgraph_reducer`."""

import asyncio
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from reducer_helpers import Recorder, StallingLedger, check_valid, eventually

from agentstate_reducer import MessageReducer, ReducerConfig


def build(reducer: MessageReducer, namespace: Any = None) -> Any:
    # No `from __future__ import annotations` here: LangGraph reads this annotation at runtime.
    class State(TypedDict):
        messages: Annotated[list[BaseMessage], reducer.as_langgraph_reducer(namespace)]

    def agent(state: Any) -> dict[str, Any]:
        call = f"call-{uuid.uuid4().hex[:8]}"
        return {
            "messages": [
                AIMessage("", tool_calls=[{"id": call, "name": "lookup", "args": {}}]),
                ToolMessage("result", tool_call_id=call),
                AIMessage("answer"),
            ]
        }

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=InMemorySaver())


def test_a_graph_keeps_a_bounded_valid_history_and_delivers_each_message_once() -> None:
    hook = Recorder()
    reducer = MessageReducer(config=ReducerConfig(min_messages=5, max_messages=9, on_prune=[hook]))
    graph = build(reducer, namespace=("memories", "u1"))
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    for n in range(12):
        opening = [SystemMessage("be brief")] if n == 0 else []
        graph.invoke({"messages": [*opening, HumanMessage(f"question {n}")]}, config)
        messages = graph.get_state(config).values["messages"]
        assert len(messages) <= 9
        check_valid(messages, messages, preserved=1, human_first=True)
        assert isinstance(messages[0], SystemMessage)
        assert isinstance(messages[1], HumanMessage)
    assert [m.content for m in messages if isinstance(m, HumanMessage)][-1] == "question 11"
    assert len(hook.ids) == len(set(hook.ids)) > 0
    assert all(isinstance(m, BaseMessage) for batch, _ in hook.calls for m in batch)
    assert {ns for _, ns in hook.calls} == {("memories", "u1")}


def test_an_agent_loop_without_human_messages_resumes_into_its_pending_call() -> None:
    # Cutting the call a graph paused before its tools node crashed the resume.
    reducer = MessageReducer(min_messages=3, max_messages=5)

    class State(TypedDict):
        messages: Annotated[list[BaseMessage], reducer.as_langgraph_reducer()]

    def agent(state: Any) -> dict[str, Any]:
        call = f"call-{uuid.uuid4().hex[:8]}"
        return {"messages": [AIMessage("", tool_calls=[{"id": call, "name": "t", "args": {}}])]}

    def tools(state: Any) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage) and last.tool_calls, last
        return {"messages": [ToolMessage("r", tool_call_id=c["id"]) for c in last.tool_calls]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver(), interrupt_before=["tools"])
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    graph.invoke({"messages": [SystemMessage("you act alone", id="sys")]}, config)
    for _ in range(6):
        graph.invoke(None, config)
        state = graph.get_state(config)
        messages = state.values["messages"]
        assert state.next == ("tools",)
        assert len(messages) <= 5 and messages[0].id == "sys"
        assert isinstance(messages[-1], AIMessage) and messages[-1].tool_calls
        check_valid(messages, messages, preserved=1, human_first=False)


@pytest.mark.parametrize("pause", ["before", "after"])
def test_a_human_message_given_to_a_graph_paused_at_its_tools_keeps_the_call(pause: str) -> None:
    # update_state appending a human message cut the window at it, pruning the call the
    # graph resumed into (its tools node found no call), or, once the tools node had added
    # the results, the call with them: the agent never read them and called the tool again.
    reducer = MessageReducer(min_messages=2, max_messages=4)
    runs: list[str] = []

    class State(TypedDict):
        messages: Annotated[list[BaseMessage], reducer.as_langgraph_reducer()]

    def waiting(state: Any) -> AIMessage | None:
        """The newest AI message when it calls tools not all answered in the window."""
        messages = state["messages"]
        newest = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        if newest is None or not newest.tool_calls:
            return None
        return newest if {c["id"] for c in newest.tool_calls} - answered else None

    def agent(state: Any) -> dict[str, Any]:
        newest = next((m for m in reversed(state["messages"]) if isinstance(m, AIMessage)), None)
        if newest is not None and newest.tool_calls and waiting(state) is None:
            return {"messages": [AIMessage("done")]}  # it read the results
        calls = [{"id": f"call-{uuid.uuid4().hex[:8]}", "name": "t", "args": {}} for _ in "ab"]
        return {"messages": [AIMessage("", tool_calls=calls)]}

    def tools(state: Any) -> dict[str, Any]:
        call = waiting(state)
        assert call is not None, [type(m).__name__ for m in state["messages"]]
        runs.extend(c["id"] for c in call.tool_calls)
        return {"messages": [ToolMessage("r", tool_call_id=c["id"]) for c in call.tool_calls]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", lambda s: "tools" if waiting(s) else END)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=InMemorySaver(), **{f"interrupt_{pause}": ["tools"]})
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    for n in range(4):
        opening = [SystemMessage("sys", id="sys")] if n == 0 else []
        graph.invoke({"messages": [*opening, HumanMessage(f"question {n}")]}, config)
        graph.update_state(config, {"messages": [HumanMessage(f"and also {n}")]})
        graph.invoke(None, config)
        messages = graph.get_state(config).values["messages"]
        assert messages[-1].content == "done", [type(m).__name__ for m in messages]
        assert len(runs) == len(set(runs)) == 2 * (n + 1)  # each call ran once
        assert len(messages) <= 4 + 2  # over max_messages by the results until "done"
        check_valid(messages, messages, preserved=1, human_first=True)


async def test_an_async_graph_schedules_coroutine_hooks() -> None:
    got: list[str] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        got.extend(m.id for m in pruned)

    reducer = MessageReducer(
        config=ReducerConfig(min_messages=4, max_messages=6, on_prune=[remember])
    )
    graph = build(reducer)
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    for n in range(4):
        await graph.ainvoke({"messages": [HumanMessage(f"q{n}")]}, config)
    await eventually(lambda: len(got) > 0)
    assert len(got) == len(set(got))


def test_ids_merge_and_remove_message_work_like_add_messages() -> None:
    merge = MessageReducer(min_messages=10, max_messages=20).as_langgraph_reducer()
    left = [HumanMessage("a", id="1"), AIMessage("b", id="2")]
    assert [m.content for m in merge(left, HumanMessage("a2", id="1"))] == ["a2", "b"]
    assert [m.id for m in merge(left, [RemoveMessage(id="1")])] == ["2"]
    merged = merge(left, [("user", "c")])
    assert isinstance(merged[-1], HumanMessage) and merged[-1].id


def test_dicts_stay_dicts_through_the_bridge() -> None:
    merge = MessageReducer(min_messages=10, max_messages=20).as_langgraph_reducer()
    left = [{"role": "user", "content": "a", "id": "1"}, {"role": "assistant", "content": "b"}]
    merged = merge(left, {"role": "user", "content": "a2", "id": "1"})
    assert [m["content"] for m in merged] == ["a2", "b"]
    assert all(isinstance(m, dict) and m["id"] for m in merged)
    assert "id" not in left[1]  # inputs are copied, not changed
    assert merge(merged, [{"type": "remove", "id": "1"}]) == merged[1:]
    assert merge(
        merged,
        [{"type": "remove", "id": "__remove_all__"}, {"role": "user", "content": "n", "id": "n"}],
    ) == [{"role": "user", "content": "n", "id": "n"}]
    with pytest.raises(ValueError, match="cannot remove message id 'nope'"):
        merge(merged, [{"type": "remove", "id": "nope"}])


def test_the_bridge_reduces_after_merging() -> None:
    merge = MessageReducer(min_messages=2, max_messages=3).as_langgraph_reducer()
    state: list[Any] = []
    for n in range(5):
        state = merge(state, [HumanMessage(f"q{n}"), AIMessage(f"a{n}")])
    assert [m.content for m in state] == ["q0", "q4", "a4"]  # a human first message is kept


def run_turns(graph: Any, config: Any, turns: range, *, flush: MessageReducer | None) -> set[str]:
    """Each turn in its own `asyncio.run`, returning right after `ainvoke` (or after
    `flush.aflush()`); returns the id of every message the state held after a turn."""
    held: set[str] = set()

    async def turn(n: int) -> None:
        await graph.ainvoke({"messages": [HumanMessage(f"q{n}")]}, config)
        if flush is not None:
            await flush.aflush()

    for n in turns:
        asyncio.run(turn(n))
        held.update(m.id for m in graph.get_state(config).values["messages"])
    return held


def test_pruned_messages_outlive_an_event_loop_that_ends_before_their_delivery() -> None:
    """Under `ainvoke` the channel reducer only schedules the delivery on the loop; when
    `asyncio.run` returned first and cancelled it, the pruned messages were lost silently."""
    hook, ledger = Recorder(), StallingLedger()  # a network ledger that answers too late
    reducer = MessageReducer(
        config=ReducerConfig(min_messages=4, max_messages=6, on_prune=[hook]), ledger=ledger
    )
    graph = build(reducer, namespace="ns")
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    held = run_turns(graph, config, range(3), flush=None)
    pruned = held - {m.id for m in graph.get_state(config).values["messages"]}
    assert len(pruned) == 7 and ledger.stuck == 2 and hook.calls == []
    assert reducer.pending == 7  # they wait for the next delivery
    ledger.stalled = False
    report = asyncio.run(reducer.adeliver([], "ns"))  # a later request, on a new loop
    assert sorted(report.hooks[0].delivered) == sorted(pruned)
    assert len(hook.ids) == len(set(hook.ids)) and set(hook.ids) == pruned
    assert reducer.pending == 0


def test_aflush_lets_scheduled_deliveries_finish_before_the_loop_ends() -> None:
    got: list[str] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        await asyncio.sleep(0.01)  # a slow memory store
        got.extend(m.id for m in pruned)

    ledger = StallingLedger()
    ledger.stalled = False
    reducer = MessageReducer(
        config=ReducerConfig(min_messages=4, max_messages=6, on_prune=[remember]), ledger=ledger
    )
    graph = build(reducer)
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    held = run_turns(graph, config, range(3), flush=reducer)
    pruned = held - {m.id for m in graph.get_state(config).values["messages"]}
    assert len(pruned) == 7 and sorted(got) == sorted(pruned)
    assert reducer.pending == 0
