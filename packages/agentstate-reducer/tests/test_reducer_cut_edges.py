"""Cut edges: writes naming a message the window already cut, and a human message inside a
tool exchange."""

import uuid
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from reducer_helpers import (
    Recorder,
    check_partition,
    check_valid,
    get,
    last_human,
    preserved_count,
)

from agentstate_reducer import MessageReducer, ReducerConfig

SYSTEM = {"role": "system", "content": "s", "id": "sys"}


def human(n: int) -> dict[str, Any]:
    return {"role": "human", "content": f"q{n}", "id": f"h{n}"}


def ai(name: str, *calls: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "ai", "content": name, "id": name}
    if calls:
        message["tool_calls"] = [{"id": c, "name": "f", "args": {}} for c in calls]
    return message


def tool(call: str) -> dict[str, Any]:
    return {"role": "tool", "content": "r", "tool_call_id": call, "id": f"t{call}"}


def ids(messages: list[Any]) -> list[str]:
    return [get(m, "id") for m in messages]


# -- a write naming a message the window already cut -----------------------------------


@pytest.mark.parametrize("kind", ["langchain", "dict"])
def test_removing_a_message_the_bridge_cut_earlier_in_the_step_is_a_no_op(kind: str) -> None:
    # LangGraph applies a step's writes one after the other: the first cuts h0 and a0, the
    # second comes from a parallel node that read them before the cut and removes them.
    bridge = MessageReducer(min_messages=3, max_messages=5).as_langgraph_reducer()
    state: list[Any] = [SYSTEM, human(0), ai("a0")]
    first = [human(1), ai("a1"), ai("a1b")]
    second: list[Any] = [{"type": "remove", "id": "h0"}, {"type": "remove", "id": "a0"}]
    if kind == "langchain":
        state = [SystemMessage("s"), HumanMessage("q0", id="h0"), AIMessage("a0", id="a0")]
        first = [HumanMessage("q1", id="h1"), AIMessage("a1", id="a1"), AIMessage("b", id="a1b")]
        second = [RemoveMessage(id="h0"), RemoveMessage(id="a0")]
    state = bridge(state, first)
    assert "h0" not in ids(state) and "a0" not in ids(state)
    assert ids(bridge(state, second)) == ids(state)


def test_removing_an_id_that_no_message_had_still_raises() -> None:
    bridge = MessageReducer(min_messages=3, max_messages=5).as_langgraph_reducer()
    state = bridge([SYSTEM, human(0), ai("a0")], [human(1), ai("a1"), ai("a1b")])
    with pytest.raises(ValueError, match="cannot remove message id 'nope'"):
        bridge(state, [{"type": "remove", "id": "nope"}])
    with pytest.raises(ValueError, match="doesn't exist"):
        bridge([HumanMessage("q", id="h")], [RemoveMessage(id="nope")])


def test_a_removal_after_re_adding_a_cut_id_removes_the_re_added_message() -> None:
    bridge = MessageReducer(min_messages=3, max_messages=5).as_langgraph_reducer()
    state = bridge([SYSTEM, human(0), ai("a0")], [human(1), ai("a1"), ai("a1b")])
    assert ids(bridge(state, [ai("a0"), {"type": "remove", "id": "a0"}])) == ids(state)


def test_a_parallel_node_removing_what_it_read_survives_a_cut_in_its_step() -> None:
    # No `from __future__ import annotations` in this module: LangGraph reads this at runtime.
    reducer = MessageReducer(min_messages=3, max_messages=6)

    class State(TypedDict):
        messages: Annotated[list[BaseMessage], reducer.as_langgraph_reducer()]

    def answer(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage("thinking"), AIMessage("answer")]}

    def forget(state: Any) -> dict[str, Any]:  # LangGraph's "delete old messages" pattern
        return {"messages": [RemoveMessage(id=m.id) for m in state["messages"][:-2]]}

    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_node("forget", forget)
    builder.add_edge(START, "answer")
    builder.add_edge(START, "forget")
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    for n in range(4):
        graph.invoke({"messages": [HumanMessage(f"q{n}")]}, config)
        messages = graph.get_state(config).values["messages"]
        assert len(messages) <= 6
        assert messages[-1].content == "answer"


@pytest.mark.parametrize("kind", ["human", "ai"])
def test_a_rewrite_of_a_cut_message_is_appended_and_not_delivered_again(kind: str) -> None:
    # add_messages appends an id the list does not hold; the hook already had this one.
    hook = Recorder()
    reducer = MessageReducer(config=ReducerConfig(min_messages=3, max_messages=5, on_prune=[hook]))
    bridge = reducer.as_langgraph_reducer("ns")
    state: list[Any] = [SYSTEM]
    for n in range(3):
        state = bridge(state, [human(n), ai(f"a{n}")])
    assert ids(state) == ["sys", "h2", "a2"] and hook.ids == ["h0", "a0", "h1", "a1"]
    rewrite = {**(human(0) if kind == "human" else ai("a0")), "content": "edited"}
    state = bridge(state, [rewrite])
    assert ids(state) == ["sys", "h2", "a2", rewrite["id"]]
    for n in range(3, 6):
        state = bridge(state, [human(n), ai(f"a{n}")])
    assert rewrite["id"] not in ids(state)
    assert len(hook.ids) == len(set(hook.ids))
    original = human(0) if kind == "human" else ai("a0")
    delivered = [m for batch, _ in hook.calls for m in batch if m["id"] == rewrite["id"]]
    assert delivered == [original]


def test_a_rewrite_of_a_cut_tool_result_is_pruned_as_an_orphan_by_the_next_cut() -> None:
    hook = Recorder()
    reducer = MessageReducer(config=ReducerConfig(min_messages=3, max_messages=5, on_prune=[hook]))
    bridge = reducer.as_langgraph_reducer("ns")
    state = bridge([SYSTEM], [human(0), ai("a0", "c0"), tool("c0"), ai("b0")])
    state = bridge(state, [human(1), ai("a1")])
    assert ids(state) == ["sys", "h1", "a1"]
    state = bridge(state, [human(2), ai("a2"), {**tool("c0"), "content": "edited"}])
    assert ids(state) == ["sys", "h2", "a2"]
    assert hook.ids.count("tc0") == 1


# -- a human message inside a tool exchange --------------------------------------------


@pytest.mark.parametrize(
    ("messages", "kept"),
    [
        # the cut lands on the interjected human: the call goes, so its results go with it
        ([SYSTEM, human(0), ai("a1", "c1", "c2"), human(1), tool("c1"), tool("c2"), ai("a2")],
         ["sys", "h1", "a2"]),
        ([SYSTEM, human(0), ai("a1", "c1", "c2"), tool("c1"), human(1), tool("c2"), ai("a2")],
         ["sys", "h1", "a2"]),
        ([SYSTEM, human(0), ai("a0"), human(1), ai("a1", "c1"), human(2), tool("c1")],
         ["sys", "h2"]),
        # incomplete results: the answered call leaves with its one result
        ([SYSTEM, human(0), ai("a1", "c1", "c2"), tool("c1"), human(1), ai("a2")],
         ["sys", "h1", "a2"]),
    ],
)  # fmt: skip
def test_a_cut_at_a_human_inside_a_tool_exchange_takes_the_whole_exchange(
    messages: list[dict[str, Any]], kept: list[str]
) -> None:
    result = MessageReducer(min_messages=3, max_messages=3).plan(messages)
    assert ids(result.surviving) == kept
    check_valid(messages, result.surviving, preserved=1, human_first=True)


@st.composite
def tangles(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Messages in any order: humans inside tool exchanges, missing, late, duplicated and
    unknown results, calls reusing an id, system notes."""
    messages: list[dict[str, Any]] = []
    calls: list[str] = []
    for n in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["human", "ai", "call", "tool", "tool", "system"]))
        message: dict[str, Any] = {
            "id": f"m{n}",
            "content": f"{n}" + "x" * draw(st.integers(0, 20)),
        }
        if kind == "call":
            width = draw(st.integers(1, 3))
            new = [
                f"k{n}_{j}" if draw(st.integers(0, 5)) or not calls else calls[-1]
                for j in range(width)
            ]
            message.update(role="ai", tool_calls=[{"id": c, "name": "f", "args": {}} for c in new])
            calls += new
        elif kind == "tool":
            known = calls and draw(st.integers(0, 6))
            message.update(
                role="tool", tool_call_id=draw(st.sampled_from(calls)) if known else f"lost{n}"
            )
        else:
            message["role"] = kind
        messages.append(message)
    return messages


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tangles(), st.integers(0, 12), st.integers(0, 6), st.booleans(), st.booleans(), st.booleans()
)
def test_tangled_tool_exchanges_never_leave_an_invalid_window(
    source: list[dict[str, Any]],
    keep: int,
    slack: int,
    preserve_first: bool,
    human_first: bool,
    tokens: bool,
) -> None:
    common: dict[str, Any] = {"preserve_first": preserve_first, "require_human_first": human_first}
    if tokens:
        config = ReducerConfig(
            max_tokens=10 + 8 * (keep + slack),
            target_tokens=10 + 8 * keep,
            token_counter=lambda m: 1 + len(m["content"]),
            **common,
        )
    else:
        config = ReducerConfig(min_messages=keep, max_messages=keep + slack, **common)
    result = MessageReducer(config=config).plan(source)
    if not result.pruned:
        return
    check_partition(source, result.surviving, result.pruned)
    newest = last_human(source)
    preserved = preserved_count(source, preserve_first)
    check_valid(
        source, result.surviving, preserved=preserved, human_first=human_first and newest >= 0
    )
    if newest >= 0:
        assert any(m is source[newest] for m in result.surviving), "newest human turn pruned"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tangles(), st.integers(1, 4), st.lists(st.integers(0, 100), max_size=12), st.booleans())
def test_writes_naming_cut_messages_keep_delivery_exactly_once(
    source: list[dict[str, Any]], chunk: int, targets: list[int], remove: bool
) -> None:
    hook = Recorder()
    reducer = MessageReducer(config=ReducerConfig(min_messages=3, max_messages=5, on_prune=[hook]))
    bridge = reducer.as_langgraph_reducer("ns")
    state: list[Any] = []
    written: list[dict[str, Any]] = []
    cut: set[str] = set()  # ids a reduce cut (not removed by a write)
    picks = iter(targets)
    for start in range(0, len(source), chunk):
        new: list[dict[str, Any]] = [dict(m) for m in source[start : start + chunk]]
        pick = next(picks, None)
        if pick is not None and written:
            old = written[pick % len(written)]
            held = old["id"] in ids(state)
            if remove and (held or old["id"] in cut):
                new.insert(0, {"type": "remove", "id": old["id"]})
            elif not remove:
                new.insert(0, {**old, "content": old["content"] + " edited"})
        written += [m for m in new if m.get("type") != "remove"]
        removed = {m["id"] for m in new if m.get("type") == "remove"}
        before = set(ids(state)) | {m["id"] for m in new}
        state = bridge(state, new)
        cut |= before - set(ids(state)) - removed
    assert len(hook.ids) == len(set(hook.ids)), "a message reached the hook twice"
    assert set(hook.ids) == cut, "a cut message never reached the hook"
