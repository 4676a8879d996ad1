"""The cut rules on hand-built conversations, including the cases 0.5.0 got wrong."""

from __future__ import annotations

from typing import Any

import pytest
from reducer_helpers import conversation, role, turn

from agentstate_reducer import MessageReducer, ReducerConfig


def roles(messages: list[Any]) -> list[str]:
    return [role(m) for m in messages]


def ids(messages: list[Any]) -> list[str]:
    return [m["id"] for m in messages]


def test_under_the_window_nothing_changes() -> None:
    messages = conversation(2)
    result = MessageReducer(min_messages=5, max_messages=20).reduce(messages)
    assert result.surviving == messages
    assert result.pruned == [] and result.summary is None and result.delivery is None


def test_a_cut_starts_the_kept_part_at_a_human_message() -> None:
    # 0.5.0 kept [system, ai(tool_calls), tool, tool, ai] here: an AI message first.
    result = MessageReducer(min_messages=5, max_messages=8).reduce(conversation(3))
    assert roles(result.surviving) == ["system", "human", "ai", "tool", "tool", "ai"]
    assert ids(result.surviving)[1] == "h2"


def test_min_messages_counts_the_preserved_first_message() -> None:
    messages = conversation(6, calls=0)  # system + 6 turns of (human, ai)
    result = MessageReducer(min_messages=5, max_messages=10).reduce(messages)
    assert ids(result.surviving) == ["sys", "h4", "b4", "h5", "b5"]


def test_tool_results_leave_with_their_call_even_if_cascade_is_off() -> None:
    # 0.5.0 with cascade_tool_messages=False kept the results and dropped their call.
    with pytest.warns(DeprecationWarning, match="cascade_tool_messages"):
        config = ReducerConfig(min_messages=3, max_messages=8, cascade_tool_messages=False)
    result = MessageReducer(config=config).reduce(conversation(3))
    assert roles(result.surviving) == ["system", "human", "ai", "tool", "tool", "ai"]


def test_a_call_is_never_kept_without_its_results() -> None:
    messages = [
        {"role": "human", "content": "q", "id": "h"},
        {"role": "ai", "content": "", "id": "a", "tool_calls": [{"id": "c1"}, {"id": "c2"}]},
        {"role": "human", "content": "wait", "id": "h2"},  # interjection between call and result
        {"role": "tool", "content": "r1", "tool_call_id": "c1", "id": "t1"},
        {"role": "tool", "content": "r2", "tool_call_id": "c2", "id": "t2"},
        {"role": "ai", "content": "done", "id": "b"},
    ]
    result = MessageReducer(config=ReducerConfig(min_messages=4, max_messages=5)).reduce(messages)
    assert ids(result.surviving) == ["h", "h2", "b"]  # h is preserved; t1, t2 lost their call
    assert ids(result.pruned) == ["a", "t1", "t2"]


def test_orphaned_results_in_the_kept_part_are_pruned_on_a_cut() -> None:
    messages = [*turn(0), {"role": "tool", "content": "?", "tool_call_id": "gone", "id": "x"}]
    messages += turn(1)
    result = MessageReducer(config=ReducerConfig(min_messages=4, max_messages=4)).reduce(messages)
    assert ids(result.surviving) == ["h0", "h1", "b1"]
    assert ids(result.pruned) == ["b0", "x"]


def test_the_newest_human_turn_is_kept_even_over_the_token_budget() -> None:
    # 0.5.0 pruned the only human message here, leaving just the system prompt.
    messages = [
        {"role": "system", "content": "s", "id": "s"},
        {"role": "human", "content": "old", "id": "h0"},
        {"role": "ai", "content": "old answer", "id": "a0"},
        {"role": "human", "content": "x" * 4000, "id": "h1"},
    ]
    result = MessageReducer(config=ReducerConfig(max_tokens=100)).reduce(messages)
    assert ids(result.surviving) == ["s", "h1"]
    assert ids(result.pruned) == ["h0", "a0"]


def test_the_newest_human_turn_is_kept_whole_while_it_fits_the_limit() -> None:
    messages = [{"role": "system", "content": "s", "id": "s"}, *turn(0), *turn(1, calls=5)]
    result = MessageReducer(min_messages=2, max_messages=9).reduce(messages)
    assert ids(result.surviving)[:2] == ["s", "h1"]
    assert len(result.surviving) == 1 + 8


def test_a_newest_turn_over_the_limit_keeps_its_human_message_and_newest_steps() -> None:
    """One request answered by a long run of tool calls (`create_react_agent`): kept whole,
    the turn was never cut, and every checkpoint grew without bound. Its human message stays,
    and the newest steps that fit, cut as an agent loop's: never inside a call's results."""
    messages = [{"role": "system", "content": "s", "id": "s"}, *turn(0), *turn(1, calls=5)]
    result = MessageReducer(min_messages=2, max_messages=4).reduce(messages)
    assert ids(result.surviving) == ["s", "h1", "b1"]
    assert ids(result.pruned) == ["h0", "b0", "a1", "tc1_0", "tc1_1", "tc1_2", "tc1_3", "tc1_4"]
    task: list[dict[str, Any]] = [{"role": "system", "content": "s", "id": "s"}]
    task += [{"role": "user", "content": "task", "id": "task"}]
    for n in range(30):
        task += [
            {"role": "assistant", "content": "", "id": f"a{n}", "tool_calls": [{"id": f"c{n}"}]},
            {"role": "tool", "content": "r", "id": f"t{n}", "tool_call_id": f"c{n}"},
        ]
    window = MessageReducer(min_messages=6, max_messages=10).reduce(task).surviving
    assert ids(window) == ["s", "task", "a28", "t28", "a29", "t29"]
    config = ReducerConfig(max_tokens=50, target_tokens=30, token_counter=lambda m: 5)
    assert ids(MessageReducer(config=config).reduce(task).surviving) == ids(window)


def test_token_mode_keeps_newest_whole_turns_within_target() -> None:
    def count(message: Any) -> int:
        return 10

    messages = conversation(5, calls=0)  # 11 messages, 110 tokens
    config = ReducerConfig(max_tokens=100, target_tokens=50, token_counter=count)
    result = MessageReducer(config=config).reduce(messages)
    assert ids(result.surviving) == ["sys", "h3", "b3", "h4", "b4"]  # 50 tokens


def test_system_messages_after_the_first_are_pruned_like_others() -> None:
    # 0.5.0 never pruned them: 50 turns with a note each left 54 messages in a window of 6.
    reducer = MessageReducer(min_messages=4, max_messages=6)
    state: list[Any] = [{"role": "system", "content": "s", "id": "s"}]
    for n in range(50):
        new = [
            {"role": "system", "content": f"note {n}", "id": f"n{n}"},
            {"role": "human", "content": "q", "id": f"h{n}"},
            {"role": "ai", "content": "a", "id": f"a{n}"},
        ]
        state = reducer.reduce(state, new).surviving
    assert len(state) <= 6
    assert ids(state)[0] == "s"


@pytest.mark.parametrize("first", ["ai", "tool"])
def test_preserve_first_keeps_only_a_message_that_can_open_a_conversation(first: str) -> None:
    opening = {"role": first, "content": "hi", "id": "o", "tool_call_id": "none"}
    result = MessageReducer(min_messages=3, max_messages=4).reduce(
        [opening, *conversation(3, calls=0, system=False)]
    )
    assert ids(result.surviving) == ["h2", "b2"]


@pytest.mark.parametrize("tokens", [False, True])
def test_a_turn_after_one_that_ended_on_a_call_is_cut_inside_too(tokens: bool) -> None:
    """The newest turn held no AI message, and the turn before ended on a tool call (a
    `return_direct` tool): the limit of the cut inside fell on that call, before the turn,
    which was kept whole over the limit (found by review)."""
    call = [{"id": "c1", "name": "lookup", "args": {}}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s", "id": "s"},
        {"role": "human", "content": "q1", "id": "h1"},
        {"role": "ai", "content": "", "tool_calls": call, "id": "a1"},
        {"role": "tool", "content": "r", "tool_call_id": "c1", "id": "t1"},
        {"role": "human", "content": "q2", "id": "h2"},
        *({"role": "critic", "content": f"review {i}", "id": f"k{i}"} for i in range(30)),
    ]
    if tokens:
        config = ReducerConfig(max_tokens=60, token_counter=lambda m: 5)
    else:
        config = ReducerConfig(min_messages=5, max_messages=10)
    result = MessageReducer(config=config).plan(messages)
    kept = ids(result.surviving)
    assert kept[:2] == ["s", "h2"] and kept[-1] == "k29"
    assert len(kept) <= (12 if tokens else 10)


def test_a_summary_of_a_cut_inside_the_turn_goes_before_its_human_message() -> None:
    task: list[dict[str, Any]] = [{"role": "system", "content": "s", "id": "s"}]
    task += [*turn(0), {"role": "user", "content": "task", "id": "task"}]
    for n in range(30):
        task += [
            {"role": "assistant", "content": "", "id": f"a{n}", "tool_calls": [{"id": f"c{n}"}]},
            {"role": "tool", "content": "r", "id": f"t{n}", "tool_call_id": f"c{n}"},
        ]
    config = ReducerConfig(
        min_messages=6, max_messages=10, summarize_fn=lambda pruned: "done", inject_summary=True
    )
    result = MessageReducer(config=config).reduce(task)
    assert [m["content"] for m in result.surviving[1:3]] == [
        "Summary of the 60 earlier messages: done",
        "OK",
    ]
    assert ids(result.surviving[3:]) == ["task", "a29", "t29"]
    assert ids(result.pruned)[:3] == ["h0", "b0", "a0"] and len(result.pruned) == 2 + 58


def test_a_preserved_human_first_message_opens_a_turn_cut_as_an_agent_loop() -> None:
    """The request alone, no system prompt: the whole list was its turn, never cut."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task", "id": "task"}]
    for n in range(10):
        messages += [
            {"role": "assistant", "content": "", "id": f"a{n}", "tool_calls": [{"id": f"c{n}"}]},
            {"role": "tool", "content": "r", "id": f"t{n}", "tool_call_id": f"c{n}"},
        ]
    result = MessageReducer(min_messages=2, max_messages=4).reduce(messages)
    assert ids(result.surviving) == ["task", "a9", "t9"]
    result = MessageReducer(min_messages=3, max_messages=6).reduce(messages)
    assert ids(result.surviving) == ["task", "a9", "t9"]
    result = MessageReducer(min_messages=5, max_messages=6).reduce(messages)
    assert ids(result.surviving) == ["task", "a8", "t8", "a9", "t9"]


def test_without_any_human_message_the_cut_falls_between_steps() -> None:
    messages = [{"role": "system", "content": "s", "id": "s"}]
    messages += [{"role": "ai", "content": str(n), "id": f"a{n}"} for n in range(5)]
    result = MessageReducer(min_messages=2, max_messages=3).reduce(messages)
    assert ids(result.surviving) == ["s", "a4"]


def agent_loop(steps: int, *, answered: bool) -> list[dict[str, Any]]:
    """A system prompt and tool-calling steps, no human message; the last call's result
    has arrived only when `answered`."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s", "id": "s"}]
    for n in range(steps):
        call = {"role": "ai", "content": "", "id": f"a{n}", "tool_calls": [{"id": f"c{n}"}]}
        messages.append(call)
        if answered or n < steps - 1:
            messages.append({"role": "tool", "content": "", "id": f"t{n}", "tool_call_id": f"c{n}"})
    return messages


@pytest.mark.parametrize("human_first", [True, False])
@pytest.mark.parametrize("min_messages", [0, 3])
@pytest.mark.parametrize(("answered", "kept"), [(False, ["s", "a2"]), (True, ["s", "a2", "t2"])])
def test_without_any_human_message_the_newest_call_survives_a_cut(
    human_first: bool, min_messages: int, answered: bool, kept: list[str]
) -> None:
    # A graph paused before its tools node resumes from the last call; the cut pruned it.
    config = ReducerConfig(
        min_messages=min_messages, max_messages=5, require_human_first=human_first
    )
    result = MessageReducer(config=config).reduce(agent_loop(3, answered=answered))
    assert ids(result.surviving) == kept


def paused_then_told(*, answered: int = 0, late: bool = False) -> list[dict[str, Any]]:
    """Three turns; the third's AI message calls two tools, `answered` of them answered
    (after the human message when `late`), and a human message follows it (`update_state` on
    a graph paused before or after its tools)."""
    messages = conversation(2, calls=0)
    calls = [{"id": "c0", "name": "f", "args": {}}, {"id": "c1", "name": "f", "args": {}}]
    results = [
        {"role": "tool", "content": "r", "tool_call_id": f"c{j}", "id": f"t{j}"}
        for j in range(answered)
    ]
    note = {"role": "human", "content": "also this", "id": "note"}
    messages += [
        {"role": "human", "content": "q2", "id": "h2"},
        {"role": "ai", "content": "", "id": "a2", "tool_calls": calls},
        *([note, *results] if late else [*results, note]),
    ]
    return messages


@pytest.mark.parametrize("human_first", [True, False])
@pytest.mark.parametrize(("answered", "late"), [(0, False), (1, False), (2, False), (2, True)])
def test_a_call_no_ai_message_read_the_results_of_survives_a_human_message_after_it(
    human_first: bool, answered: int, late: bool
) -> None:
    # The cut started at the new human message and pruned the call the graph resumes into
    # (or pruned it with the results a tools node had just added, so the agent called the
    # tools again).
    config = ReducerConfig(min_messages=2, max_messages=5, require_human_first=human_first)
    messages = paused_then_told(answered=answered, late=late)
    result = MessageReducer(config=config).reduce(messages)
    kept = ids(messages[5:])  # from h2
    assert ids(result.surviving) == ["sys", *(kept if human_first else kept[1:])]
    # over max_messages only by the results
    assert len(result.surviving) <= 5 + answered


def test_a_call_an_ai_message_followed_or_over_the_limit_without_its_results_is_cut() -> None:
    config = ReducerConfig(min_messages=2, max_messages=5)
    # An AI message after it read the results, or the call was abandoned (or used as
    # structured output): nothing resumes into it.
    abandoned = paused_then_told()
    abandoned += [{"role": "ai", "content": "ok", "id": "b3"}]
    assert ids(MessageReducer(config=config).reduce(abandoned).surviving) == ["sys", "note", "b3"]
    config = ReducerConfig(min_messages=2, max_messages=3)
    result = MessageReducer(config=config).reduce(paused_then_told(answered=2, late=True))
    assert ids(result.surviving) == ["sys", "note"]  # the late results left with their call


@pytest.mark.parametrize("results", [2, 6])
def test_results_that_take_the_newest_turn_over_the_limit_stay_with_the_held_call(
    results: int,
) -> None:
    # Four or more results after the human message took that turn over max_messages, and
    # the cut inside it pruned the call with them: a tools node's four charges ran twice.
    calls = [{"id": f"c{j}", "name": "f", "args": {}} for j in range(results)]
    messages = [
        {"role": "human", "content": "q0", "id": "h0"},
        {"role": "ai", "content": "a0", "id": "a0"},
        {"role": "human", "content": "pay", "id": "h1"},
        {"role": "ai", "content": "", "id": "call", "tool_calls": calls},
        {"role": "human", "content": "use the visa", "id": "note"},
        *({"role": "tool", "content": "r", "tool_call_id": c["id"], "id": c["id"]} for c in calls),
    ]
    result = MessageReducer(min_messages=2, max_messages=4).reduce(messages)
    assert ids(result.surviving) == ["h0", "h1", "call", "note", *(c["id"] for c in calls)]


@pytest.mark.parametrize("size", [50, 200])
def test_a_large_result_stays_with_the_held_call_in_token_mode(size: int) -> None:
    def tokens(message: Any) -> int:
        return len(message["content"]) or 1

    config = ReducerConfig(max_tokens=100, target_tokens=60, token_counter=tokens)
    messages = [
        {"role": "human", "content": "q" * 10, "id": "h0"},
        {"role": "ai", "content": "a" * 10, "id": "a0"},
        {"role": "human", "content": "q" * 10, "id": "h1"},
        {"role": "ai", "content": "a" * 10, "id": "call", "tool_calls": [{"id": "c", "name": "f"}]},
        {"role": "human", "content": "q" * 10, "id": "note"},
        {"role": "tool", "content": "r" * size, "tool_call_id": "c", "id": "tc"},
    ]
    result = MessageReducer(config=config).reduce(messages)
    assert ids(result.surviving)[-4:] == ["h1", "call", "note", "tc"]


def test_held_results_over_the_limit_cut_nothing_and_a_cut_keeps_room_for_its_summary() -> None:
    # Over max_messages only by the held results, the list was cut anyway: the summary block
    # alone was pruned and summarized again, and with no room left for the new block the
    # window lost its summary.
    calls = [{"id": f"c{j}", "name": "f", "args": {}} for j in range(3)]
    results = [
        {"role": "tool", "content": "r", "tool_call_id": c["id"], "id": c["id"]} for c in calls
    ]
    config = ReducerConfig(
        min_messages=4,
        max_messages=8,
        summarize_fn=lambda pruned: f"{len(pruned)} earlier",
        inject_summary=True,
    )
    reducer = MessageReducer(config=config)
    history = [*conversation(3, calls=0), {"role": "human", "content": "pay", "id": "pay"}]
    history += [{"role": "ai", "content": "", "id": "call", "tool_calls": calls}]
    window = reducer.reduce(history, [{"role": "human", "content": "note", "id": "note"}])
    assert window.summary is not None
    again = reducer.reduce(window.surviving, results)
    assert again.pruned == [] and again.surviving == [*window.surviving, *results]
    # a cut made meanwhile injects its summary within max_messages plus the results
    cut = reducer.reduce([*history, {"role": "human", "content": "note", "id": "note"}, *results])
    assert [role(m) for m in cut.surviving[1:3]] == ["human", "ai"]  # the summary block
    assert ids(cut.surviving)[3:] == ["pay", "call", "note", "c0", "c1", "c2"]


def test_a_preserved_question_lets_the_held_call_open_the_kept_part() -> None:
    # With require_human_first the only human message before the call was the preserved
    # one, so no cut before the call was allowed and the call was pruned.
    call = [{"id": "c1", "name": "f", "args": {}}]
    messages = [
        {"role": "human", "content": "q", "id": "h0"},
        {"role": "ai", "content": "", "id": "a1", "tool_calls": call},
        {"role": "tool", "content": "r", "tool_call_id": "c1", "id": "t1"},
        {"role": "ai", "content": "", "id": "a2", "tool_calls": [{"id": "c2", "name": "f"}]},
        {"role": "human", "content": "also", "id": "note"},
    ]
    config = ReducerConfig(min_messages=2, max_messages=4)
    assert ids(MessageReducer(config=config).reduce(messages).surviving) == ["h0", "a2", "note"]


def test_require_human_first_off_cuts_anywhere_that_splits_no_call() -> None:
    messages = [{"role": "system", "content": "s", "id": "s"}, *turn(0, calls=2), *turn(1)]
    config = ReducerConfig(min_messages=4, max_messages=5, require_human_first=False)
    result = MessageReducer(config=config).reduce(messages)
    assert ids(result.surviving) == ["s", "b0", "h1", "b1"]
    config = ReducerConfig(min_messages=3, max_messages=5, require_human_first=False)
    messages = [{"role": "system", "content": "s", "id": "s"}, *turn(0), *turn(1, calls=2)]
    result = MessageReducer(config=config).reduce(messages)
    assert ids(result.surviving) == ["s", "h1", "b1"]  # the turn alone is over max_messages
    config = ReducerConfig(min_messages=3, max_messages=6, require_human_first=False)
    result = MessageReducer(config=config).reduce(messages)
    assert ids(result.surviving) == ["s", "h1", "a1", "tc1_0", "tc1_1", "b1"]


def test_an_agent_loop_keeps_its_newest_step_however_long() -> None:
    """With no human message, a newest AI answer over the budget was cut with the rest:
    the window kept only the system message, or nothing."""
    call = [{"id": "c1", "name": "t", "args": {}}]
    loop = [
        {"role": "system", "content": "sys", "id": "s"},
        {"role": "ai", "content": "step", "id": "a1", "tool_calls": call},
        {"role": "tool", "content": "r", "tool_call_id": "c1", "id": "t1"},
        {"role": "ai", "content": "x" * 8000, "id": "a2"},
    ]
    by_tokens = MessageReducer(config=ReducerConfig(max_tokens=1000))
    assert ids(by_tokens.reduce(loop).surviving) == ["s", "a2"]
    by_count = MessageReducer(config=ReducerConfig(min_messages=1, max_messages=3))
    assert ids(by_count.reduce(loop).surviving) == ["s", "a2"]
    alone = MessageReducer(config=ReducerConfig(max_tokens=1000, preserve_first=False))
    assert ids(alone.reduce(loop[3:]).surviving) == ["a2"]


def test_aliases_and_type_keys_are_understood() -> None:
    messages = [
        {"type": "system", "content": "s", "id": "s"},
        {"role": "user", "content": "q0", "id": "h0"},
        {"role": "assistant", "content": "a0", "id": "a0"},
        {"type": "human", "content": "q1", "id": "h1"},
        {"role": "agent", "content": "a1", "id": "a1"},
    ]
    result = MessageReducer(min_messages=3, max_messages=4).reduce(messages)
    assert ids(result.surviving) == ["s", "h1", "a1"]


def test_duck_typed_messages_keep_their_type() -> None:
    class Msg:
        def __init__(self, role: str, content: str, id: str) -> None:
            self.role, self.content, self.id = role, content, id

    messages = [Msg("system", "s", "s")] + [
        Msg("user" if n % 2 == 0 else "assistant", str(n), str(n)) for n in range(6)
    ]
    result = MessageReducer(min_messages=3, max_messages=4).reduce(messages)
    assert [m.id for m in result.surviving] == ["s", "4", "5"]
    assert all(isinstance(m, Msg) for m in result.surviving + result.pruned)


def test_new_may_be_a_single_message() -> None:
    reducer = MessageReducer(min_messages=2, max_messages=3)
    result = reducer.reduce(conversation(1, calls=0), {"role": "human", "content": "q", "id": "n"})
    assert ids(result.surviving) == ["sys", "n"]


def test_reduce_is_linear_in_the_list_length() -> None:
    """Counted, not timed: how often a cut reads a message grows linearly with the list."""
    reads = [0]

    class Counted(dict):  # type: ignore[type-arg]
        def __getitem__(self, key: Any) -> Any:
            reads[0] += 1
            return super().__getitem__(key)

        def get(self, key: Any, default: Any = None) -> Any:
            reads[0] += 1
            return super().get(key, default)

    reducer = MessageReducer(min_messages=10, max_messages=20)

    def cost(turns: int) -> int:
        messages = [Counted(m) for m in conversation(turns, calls=3)]
        reads[0] = 0
        reducer.plan(messages)
        return reads[0]

    small, large = cost(300), cost(3000)
    print(f"message reads: {small} for 300 turns, {large} for 3000")
    assert small > 0
    assert large <= 11 * small  # ten times the messages: about ten times the reads, not 100
