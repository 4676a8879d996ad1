"""Property tests: every cut keeps order, stays in bounds and leaves a valid conversation."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reducer_helpers import (
    AI_ROLES,
    HUMAN_ROLES,
    Recorder,
    call_ids,
    check_partition,
    check_valid,
    conversations,
    get,
    held_call,
    human_first_applies,
    is_injected,
    last_human,
    preserved_count,
    role,
    splits_no_call,
    to_langchain,
)

from agentstate_reducer import MessageReducer, ReducerConfig

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def tokens(message: Any) -> int:
    return 1 + len(str(get(message, "content")))


@st.composite
def configs(draw: st.DrawFn) -> ReducerConfig:
    common: dict[str, Any] = {
        "preserve_first": draw(st.booleans()),
        "require_human_first": draw(st.booleans()),
    }
    if draw(st.booleans()):
        summarize = draw(st.booleans())
        common.update(
            summarize_fn=(lambda pruned: f"{len(pruned)} earlier") if summarize else None,
            inject_summary=summarize,
        )
    if draw(st.booleans()):
        max_tokens = draw(st.integers(1, 400))
        target = draw(st.none() | st.integers(0, max_tokens))
        return ReducerConfig(
            max_tokens=max_tokens, target_tokens=target, token_counter=tokens, **common
        )
    max_messages = draw(st.integers(0, 30))
    return ReducerConfig(
        min_messages=draw(st.integers(0, max_messages)), max_messages=max_messages, **common
    )


def check_cut(source: list[Any], config: ReducerConfig) -> None:
    result = MessageReducer(config=config).plan(source)
    if not result.pruned:
        assert [id(m) for m in result.surviving] == [id(m) for m in source]
        return
    check_partition(source, result.surviving, result.pruned)
    preserved = preserved_count(source, config.preserve_first)
    newest = last_human(source)
    check_valid(
        source,
        result.surviving,
        preserved=preserved,
        human_first=human_first_applies(
            source, result.surviving, preserved, config.require_human_first
        ),
    )
    if newest >= 0:
        assert any(m is source[newest] for m in result.surviving), "newest human message pruned"
    call = newest_call(source)
    step = newest_step(source, max(preserved, newest + 1))
    if call is not None and call > newest:
        assert any(m is source[call] for m in result.surviving), "newest call pruned"
    if step is not None and (call is None or call < newest) and role(source[step]) != "tool":
        assert any(m is source[step] for m in result.surviving), "newest step pruned"
    kept = [m for m in result.surviving if any(m is s for s in source)]
    protected = protected_part(source, config, preserved, newest, call, step)
    answers = held_call(source, kept)
    if config.max_tokens is None:
        if answers is not None:  # within the limit but for the results no AI message read
            assert len(result.surviving) <= (config.max_messages or 0) + len(answers)
            return
        assert len(kept) <= max(config.min_messages, preserved + len(protected))
        assert len(result.surviving) <= max(config.max_messages or 0, preserved + len(protected))
    else:
        target = config.target_tokens if config.target_tokens is not None else config.max_tokens
        if answers is not None:
            target = config.max_tokens + sum(map(tokens, answers))
        floor = sum(map(tokens, source[:preserved] + protected))
        assert sum(map(tokens, kept)) <= max(target, floor)


def protected_part(
    source: list[Any],
    config: ReducerConfig,
    preserved: int,
    newest: int,
    call: int | None,
    step: int | None,
) -> list[Any]:
    """What no cut prunes, the preserved message aside: the newest human turn, unless kept
    whole it leaves the list over its limit; then, as in an agent loop (a list whose only
    human message, if any, is the preserved one), the newest step (the newest call with its
    results, or the newest message that is neither a system message nor a result) and what
    follows it, from the clean split before it; after the newest human message, if any."""
    if newest >= preserved:
        turn = source[:preserved] + source[newest:]
        over = (
            len(turn) > (config.max_messages or 0)
            if config.max_tokens is None
            else sum(map(tokens, turn)) > config.max_tokens
        )
        if not over:
            start = newest
            if not config.require_human_first:  # may begin earlier, at a clean split
                start = max(i for i in range(preserved, start + 1) if splits_no_call(source, i))
            return source[start:]
    inside = newest + 1 if newest >= preserved else preserved
    start = call if call is not None and call >= inside else step
    if start is None:
        return source[inside - 1 if newest >= preserved else inside :]
    start = max(i for i in range(inside, start + 1) if splits_no_call(source, i))
    return ([source[newest]] if newest >= preserved else []) + source[start:]


def newest_step(messages: list[Any], preserved: int) -> int | None:
    """The newest message after the preserved one that is neither a system message nor a
    tool result: an agent loop keeps it (or the call it answers). A result answering the
    newest call is kept with it; an orphan one is pruned by any cut, so protecting only
    what follows it let a second cut prune more."""
    return max(
        (i for i in range(preserved, len(messages)) if role(messages[i]) not in ("system", "tool")),
        default=None,
    )


def newest_call(messages: list[Any]) -> int | None:
    """The newest AI message when it calls tools: an agent loop resumes from it."""
    newest = max((i for i, m in enumerate(messages) if role(m) == "ai"), default=None)
    return newest if newest is not None and call_ids(messages[newest]) else None


@PROPERTY
@given(conversations(), configs())
def test_every_cut_is_ordered_bounded_and_provider_valid(
    source: list[dict[str, Any]], config: ReducerConfig
) -> None:
    check_cut(source, config)


@settings(max_examples=60, deadline=None)
@given(conversations(max_turns=6), configs())
def test_langchain_messages_obey_the_same_rules(
    source: list[dict[str, Any]], config: ReducerConfig
) -> None:
    messages = to_langchain(source)
    check_cut(messages, config)
    result = MessageReducer(config=config).plan(messages)
    assert all(not isinstance(m, dict) for m in result.surviving)


@PROPERTY
@given(
    conversations(max_turns=14),
    st.integers(1, 6),
    st.lists(st.booleans(), min_size=40, max_size=40),
    st.lists(st.booleans(), min_size=40, max_size=40),
    st.booleans(),
)
def test_overlapping_reduces_deliver_each_message_exactly_once(
    source: list[dict[str, Any]],
    chunk: int,
    failures: list[bool],
    overlaps: list[bool],
    summarize: bool,
) -> None:
    schedule = iter(failures)
    hook = Recorder(fail=lambda: next(schedule, False))
    config = ReducerConfig(
        min_messages=3,
        max_messages=6,
        on_prune=[hook],
        summarize_fn=(lambda pruned: "s") if summarize else None,
        inject_summary=summarize,
        retry_after=0,  # each delivery retries: the loop below drains
    )
    reducer = MessageReducer(config=config)
    state: list[Any] = []
    ever_pruned: list[Any] = []
    for step, start in enumerate(range(0, len(source), chunk)):
        new = source[start : start + chunk]
        if overlaps[step % len(overlaps)]:
            ever_pruned += reducer.reduce(state, new, "ns").pruned  # a retried write
        result = reducer.reduce(state, new, "ns")
        ever_pruned += result.pruned
        state = result.surviving
    while reducer.pending:
        reducer.deliver([], "ns")
    delivered = [m for batch, _ in hook.calls for m in batch]
    assert [id(m) for m in delivered] == list(dict.fromkeys(id(m) for m in delivered))
    assert {id(m) for m in delivered} == {id(m) for m in ever_pruned}
    assert all(ns == "ns" for _, ns in hook.calls)


RESULTS = ("tool", "function")


@st.composite
def misordered(draw: st.DrawFn, max_steps: int = 14) -> list[dict[str, Any]]:
    """Conversations and agent loops whose tool results come after their call, right before
    it (across tool or system messages only), late, never, or for no call; with legacy
    function results, roles the package does not know, and any opening message."""
    messages: list[dict[str, Any]] = []
    owed: list[str] = []

    def add(role_: str, **fields: Any) -> None:
        n = len(messages)
        message = {"role": role_, "content": f"{role_}#{n}", **fields}
        if draw(st.integers(0, 7)):
            message["id"] = f"m{n}"
        messages.append(message)

    def results(calls: list[str]) -> None:
        for c in calls:
            if draw(st.integers(0, 4)) == 0:
                add("system")  # a note between results binds nothing
            add("tool", tool_call_id=c)

    opening = draw(st.sampled_from(["system", "human", "ai", "tool", "function", "critic", "-"]))
    if opening == "tool":
        add("tool", tool_call_id="lost-opening")
    elif opening != "-":
        add(opening)
    for n in range(draw(st.integers(0, max_steps))):
        kind = draw(st.integers(0, 9))
        if kind <= 1:
            add(draw(st.sampled_from(HUMAN_ROLES)))
        elif kind <= 5:
            calls = [f"c{n}_{j}" for j in range(draw(st.integers(0, 2)))]
            where = draw(st.sampled_from(["after", "after", "before", "late", "never"]))
            if where == "before":
                results(calls)
            add(draw(st.sampled_from(AI_ROLES)), tool_calls=[{"id": c} for c in calls])
            if where == "after":
                results(calls)
            elif where == "late":
                owed += calls
        elif kind == 6:
            add("ai", function_call={"name": "f", "arguments": "{}"})
            add("function", name="f")
        elif kind == 7 and owed:
            add("tool", tool_call_id=owed.pop(draw(st.integers(0, len(owed) - 1))))
        elif kind == 7:
            add("tool", tool_call_id=f"lost{n}")
        elif kind == 8:
            add("critic")
        else:
            add("system")
    return messages


@PROPERTY
@given(misordered(), configs())
def test_no_window_opens_with_a_tool_or_function_result(
    source: list[dict[str, Any]], config: ReducerConfig
) -> None:
    """After the preserved first message (and an injected summary), the kept part never
    opens with a tool or function result: a chat API rejects one that does not follow the
    AI message that called it. The one exception is an input that itself opens there with
    results only the newest step can keep: a result listed just before the call an agent
    loop must keep, which the reducer neither moves nor separates from its call."""
    result = MessageReducer(config=config).plan(source)
    preserved = preserved_count(source, config.preserve_first)
    body = [m for m in result.surviving[preserved:] if not is_injected(m)]
    if not body or role(body[0]) not in RESULTS:
        return
    first = next(i for i, m in enumerate(source) if m is body[0])
    assert all(role(m) in RESULTS for m in source[preserved : first + 1]), [
        (role(m), get(m, "id")) for m in result.surviving
    ]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 300))
def test_system_messages_after_the_first_cannot_grow_the_list(turns: int) -> None:
    reducer = MessageReducer(min_messages=4, max_messages=8)
    state: list[Any] = [{"role": "system", "content": "rules", "id": "s"}]
    for n in range(turns):
        new = [
            {"role": "system", "content": f"note {n}", "id": f"n{n}"},
            {"role": "human", "content": "q", "id": f"h{n}"},
            {"role": "ai", "content": "a", "id": f"a{n}"},
        ]
        state = reducer.reduce(state, new).surviving
        assert len(state) <= 8
    assert role(state[0]) == "system" and state[0]["id"] == "s"
