"""Cut edges: writes naming a message the window already cut, and a human message inside a
tool exchange."""

import uuid
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import HealthCheck, example, given, settings
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
    call_ids,
    check_partition,
    check_valid,
    get,
    held_call,
    human_first_applies,
    last_human,
    preserved_count,
    role,
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
# A call waiting for its result with no human message before it: the cut keeps none of the
# agent steps before the newest human message (a first draft of keeping that call kept them).
@example(
    [
        *({"id": f"m{i}", "content": str(i), "role": "ai"} for i in range(3)),
        {"id": "m3", "content": "3", "role": "tool", "tool_call_id": "lost3"},
        {"id": "m4", "content": "4", "role": "ai", "tool_calls": [{"id": "k4", "name": "f"}]},
        {"id": "m5", "content": "5", "role": "human"},
    ],
    0,
    0,
    False,
    True,
    True,
)
# A preserved question, then the held call: it opens the kept part after the question.
@example(
    [
        {"id": "m0", "content": "0", "role": "human"},
        {"id": "m1", "content": "1", "role": "ai"},
        {"id": "m2", "content": "2", "role": "ai", "tool_calls": [{"id": "k2", "name": "f"}]},
        {"id": "m3", "content": "3", "role": "human"},
    ],
    0,
    3,
    True,
    True,
    False,
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
        source,
        result.surviving,
        preserved=preserved,
        human_first=human_first_applies(source, result.surviving, preserved, human_first),
    )
    if newest >= 0:
        assert any(m is source[newest] for m in result.surviving), "newest human message pruned"


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


# -- late, misordered and orphan tool results ---------------------------------------------


def agent_loop_with_late_result(steps: int, tail: list[Any]) -> list[Any]:
    """An agent loop whose first call `c0`, `c1` gets `c1`'s result only after `steps` more
    steps, then `tail`."""
    messages: list[Any] = [SYSTEM, ai("a0", "c0", "c1"), tool("c0")]
    for i in range(1, steps + 1):
        messages += [ai(f"a{i}", f"c{i + 1}"), tool(f"c{i + 1}")]
    return messages + tail


@pytest.mark.parametrize("require_human_first", [True, False])
@pytest.mark.parametrize(
    "messages, kept",
    [
        pytest.param(
            agent_loop_with_late_result(20, [ai("a99", "c99"), tool("c1"), tool("c99")]),
            ["sys", "a99", "tc99"],
            id="agent-loop-late-after-newest-call",
        ),
        pytest.param(
            agent_loop_with_late_result(20, [tool("c1"), ai("a99", "c99")]),
            ["sys", "a99"],
            id="agent-loop-late-before-newest-call",
        ),
        pytest.param(
            [SYSTEM, human(0), ai("a0", "c0", "c1"), tool("c0"), ai("b0")]
            + [m for i in range(1, 21) for m in (human(i), ai(f"b{i}"))]
            + [tool("c1")],
            ["sys", "h20", "b20"],
            id="human-turns-late-after-newest-human",
        ),
    ],
)
def test_a_late_tool_result_does_not_hold_the_cut_back(
    messages: list[Any], kept: list[str], require_human_first: bool
) -> None:
    """A result arriving after a newer message than its call allowed no cut between the
    two: one cut kept 45 of 46 messages (require_human_first=False) or all 46, with
    max_messages=6. It now leaves with its call, as a result whose call was cut."""
    config = ReducerConfig(min_messages=4, max_messages=6, require_human_first=require_human_first)
    result = MessageReducer(config=config).plan(messages)
    assert ids(result.surviving) == kept
    assert "tc1" in ids(result.pruned)
    check_partition(messages, result.surviving, result.pruned)
    check_valid(messages, result.surviving, preserved=1, human_first=False)


def test_a_late_result_stays_when_its_call_does() -> None:
    messages = [SYSTEM, human(0), ai("a0", "c0", "c1"), tool("c0"), human(1), tool("c1")]
    # (the call is held for the graph to resume into: its results may go over the limit)
    config = ReducerConfig(min_messages=3, max_messages=3, require_human_first=False)
    result = MessageReducer(config=config).plan(messages)
    assert ids(result.surviving) == ["sys", "a0", "tc0", "h1", "tc1"]


def test_an_orphan_newest_result_leaves_a_cut_that_holds() -> None:
    """The newest message that is not a system message was an orphan result: the cut kept
    only the system messages after it, and cutting its output again pruned two of them."""
    messages = [
        {"role": "assistant", "content": "a", "id": "a"},
        {"role": "tool", "content": "r", "tool_call_id": "gone", "id": "t"},
        *({"role": "system", "content": s, "id": s} for s in ("s1", "s2", "s3")),
    ]
    reducer = MessageReducer(min_messages=1, max_messages=2)
    first = reducer.plan(messages)
    assert ids(first.surviving) == ["a", "s1", "s2", "s3"] and ids(first.pruned) == ["t"]
    again = reducer.plan(first.surviving)
    assert again.pruned == [] and ids(again.surviving) == ids(first.surviving)


@pytest.mark.parametrize("require_human_first", [True, False])
def test_a_result_listed_before_its_call_stays_with_it(require_human_first: bool) -> None:
    """A result before its call answered no call (only earlier calls counted): it was
    pruned while its call was kept."""
    messages = [SYSTEM, human(0), ai("a0"), human(1), tool("c1"), ai("a1", "c1"), ai("a2")]
    config = ReducerConfig(min_messages=6, max_messages=6, require_human_first=require_human_first)
    result = MessageReducer(config=config).plan(messages)
    head = ["sys", "h1"] if require_human_first else ["sys", "a0", "h1"]
    assert ids(result.surviving) == [*head, "tc1", "a1", "a2"]
    # and a cut falling between them prunes neither without the other
    messages = [SYSTEM, human(0), tool("c1"), human(1), ai("a1", "c1"), ai("a2")]
    result = MessageReducer(config=config).plan(messages)
    kept = ids(result.surviving)
    assert ("tc1" in kept) == ("a1" in kept) and "a1" in kept


@st.composite
def late_loops(draw: st.DrawFn) -> list[Any]:
    """Agent loops or human turns where some tool results arrive late, some before their
    call, and some answer no call."""
    messages: list[Any] = [SYSTEM] if draw(st.booleans()) else []
    humans = draw(st.booleans())
    owed: list[str] = []
    for n in range(draw(st.integers(1, 25))):
        kind = draw(st.integers(0, 9))
        if humans and kind == 0:
            messages.append(human(n))
        elif kind <= 5:
            calls = [f"c{n}_{j}" for j in range(draw(st.integers(0, 2)))]
            early = [c for c in calls if draw(st.integers(0, 5)) == 0]
            messages += [tool(c) for c in early]
            messages.append(ai(f"a{n}", *calls))
            for c in calls:
                if c in early:
                    continue
                if draw(st.integers(0, 3)) == 0:
                    owed.append(c)
                else:
                    messages.append(tool(c))
        elif kind <= 7 and owed:
            messages.append(tool(owed.pop(draw(st.integers(0, len(owed) - 1)))))
        elif kind == 8:
            messages.append(tool(f"lost{n}"))
        else:
            messages.append({"role": "system", "content": "note", "id": f"s{n}"})
    return messages


def _step(n: int, *, call: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "ai", "content": f"a{n}", "id": f"a{n}"}
    if call:
        message["tool_calls"] = [{"id": f"c{n}_0", "name": "f", "args": {}}]
    return message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(late_loops(), st.integers(0, 8), st.integers(0, 6), st.booleans(), st.booleans())
# The newest step's result listed before it, after an older step's result: the part kept
# opens at that older step's call (found by a random run of this test: it bounded the part at
# the older result, which it then kept without its call).
@example(
    [
        *map(_step, range(10)),
        _step(10, call=True),
        {"role": "system", "content": "note", "id": "s11"},
        {"role": "tool", "content": "r", "tool_call_id": "c10_0", "id": "tc10_0"},
        {"role": "tool", "content": "r", "tool_call_id": "c13_0", "id": "tc13_0"},
        _step(13, call=True),
    ],
    0,
    0,
    False,
    False,
)
def test_late_and_misordered_results_keep_cuts_bounded_and_whole(
    messages: list[Any], min_messages: int, extra: int, human_first: bool, preserve: bool
) -> None:
    config = ReducerConfig(
        min_messages=min_messages,
        max_messages=min_messages + extra,
        require_human_first=human_first,
        preserve_first=preserve,
    )
    reducer = MessageReducer(config=config)
    result = reducer.plan(messages)
    kept = result.surviving
    check_partition(messages, kept, result.pruned)
    alive = {id(m) for m in kept}
    callers = {c: i for i, m in enumerate(messages) for c in call_ids(m)}
    for i, m in enumerate(messages):  # a result and its call are kept or pruned together
        caller = callers.get(m.get("tool_call_id"), -1)
        if m["role"] != "tool":
            continue
        if caller < 0:
            assert id(m) not in alive or not result.pruned, "an orphan result kept"
        elif id(m) in alive:
            assert id(messages[caller]) in alive, "a result kept without its call"
        elif i < caller or all(role(x) not in ("ai", "human") for x in messages[caller + 1 : i]):
            assert id(messages[caller]) not in alive, "a call kept without its result"
    # bounded: more than min_messages only for the newest turn or step (with the results
    # of its calls listed before them, and what precedes those, as no kept part opens with
    # a result, and the call of each result kept so)
    preserved = preserved_count(messages, preserve)
    newest = last_human(messages)
    if newest < preserved:
        newest = max(
            (i for i in range(preserved, len(messages)) if role(messages[i]) == "ai"),
            default=len(messages),
        )
    start = newest
    while True:
        if early := [
            i for i in range(start) if callers.get(messages[i].get("tool_call_id"), -1) >= start
        ]:
            start = min(early)
        elif called := [
            caller
            for m in messages[start:]
            if role(m) == "tool" and 0 <= (caller := callers.get(m.get("tool_call_id"), -1)) < start
        ]:
            start = min(called)
        elif preserved < start < len(messages) and role(messages[start]) == "tool":
            start -= 1  # no kept part opens with a result: it keeps what precedes one
        else:
            break
    if result.pruned:
        assert newest == len(messages) or any(m is messages[newest] for m in kept)
        bound = max(min_messages, preserved + len(messages) - start)
        answers = held_call(messages, kept)
        if answers is not None:  # within the limit but for the results no AI message read
            bound = max(bound, config.max_messages + len(answers))  # type: ignore[operator]
        assert len(kept) <= bound, ids(kept)
    assert reducer.plan(kept).pruned == [] or len(kept) > config.max_messages  # type: ignore[operator]


def test_a_result_before_its_call_with_turns_between_holds_no_cut_back() -> None:
    """A result listed before its call with human turns between them bound to that call,
    so no cut fell anywhere between the two: one cut kept 44 of 44 (max_messages=6). It
    now binds only across tool and system messages; else it is an orphan, pruned."""
    messages: list[Any] = [
        {"role": "system", "content": "s", "id": "sys"},
        {"role": "human", "content": "q0", "id": "h0"},
        {"role": "tool", "content": "early", "id": "t-x", "tool_call_id": "x"},
    ]
    for i in range(1, 21):
        messages += [
            {"role": "human", "content": f"q{i}", "id": f"h{i}"},
            {"role": "ai", "content": f"a{i}", "id": f"a{i}"},
        ]
    call = {"id": "x", "name": "f", "args": {}}
    messages.append({"role": "ai", "content": "", "id": "call-x", "tool_calls": [call]})
    result = MessageReducer(config=ReducerConfig(min_messages=3, max_messages=6)).plan(messages)
    assert [m["id"] for m in result.surviving] == ["sys", "h20", "a20", "call-x"]
    # across tool and system messages only, it still keeps to its call
    near = [
        {"role": "system", "content": "s", "id": "sys"},
        *({"role": "human", "content": f"q{i}", "id": f"h{i}"} for i in range(4)),
        {"role": "tool", "content": "early", "id": "t-x", "tool_call_id": "x"},
        {"role": "system", "content": "note", "id": "note"},
        {"role": "ai", "content": "", "id": "call-x", "tool_calls": [call]},
    ]
    config = ReducerConfig(min_messages=2, max_messages=4, require_human_first=False)
    kept = [m["id"] for m in MessageReducer(config=config).plan(near).surviving]
    assert "call-x" in kept and "t-x" in kept


@pytest.mark.parametrize("system", [True, False], ids=["system", "no-system"])
def test_a_result_listed_just_before_its_call_never_opens_the_window(system: bool) -> None:
    """An agent loop whose newest call has its result listed before it: the cut fell right
    before the result, so the kept part opened with a tool message, which providers reject.
    It now keeps the step before them too."""
    head = [SYSTEM] if system else []
    messages = [*head, ai("a0"), ai("a1"), tool("c2"), ai("a2", "c2")]
    config = ReducerConfig(min_messages=len(head) + 2, max_messages=len(head) + 3)
    result = MessageReducer(config=config).plan(messages)
    assert ids(result.surviving) == [*ids(head), "a1", "tc2", "a2"]
    # and where a cut may fall before a later message, it falls there instead
    messages.append(ai("a3"))
    result = MessageReducer(config=config).plan(messages)
    assert ids(result.surviving) == [*ids(head), "a3"]


def test_a_function_result_never_opens_the_window() -> None:
    """A legacy `function` result was a cut point like any message: a window opened with it."""
    call = {"role": "ai", "content": "", "id": "a1", "function_call": {"name": "f"}}
    function = {"role": "function", "name": "f", "content": "r", "id": "f1"}
    messages = [SYSTEM, ai("a0"), call, function, ai("a2")]
    config = ReducerConfig(min_messages=3, max_messages=4)
    result = MessageReducer(config=config).plan(messages)
    assert ids(result.surviving) == ["sys", "a2"]
