"""Summaries: returned, optionally injected as the input's message type with ids, rolled."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from reducer_helpers import conversation, get, is_injected, to_langchain

from agentstate_reducer import (
    MessageReducer,
    ReducerConfig,
    default_summary_messages_factory,
    message_identity,
)
from agentstate_reducer._tokens import heuristic_token_count

# The key the reducer sets in each injected message's response_metadata (the README names it).
SUMMARY_MARKER = "agentstate_reducer_summary"


SYSTEM_DICT = {"role": "system", "content": "agent", "id": "sys"}


def summarize(pruned: list[Any]) -> str:
    return f"{len(pruned)} earlier messages"


def injecting(**extra: Any) -> MessageReducer:
    settings: dict[str, Any] = {
        "summarize_fn": summarize,
        "min_messages": 3,
        "max_messages": 5,
        **extra,
    }
    return MessageReducer(config=ReducerConfig(inject_summary=True, **settings))


def test_summary_is_returned_without_injection() -> None:
    config = ReducerConfig(min_messages=3, max_messages=5, summarize_fn=summarize)
    result = MessageReducer(config=config).reduce(conversation(3, calls=0))
    assert result.summary == "4 earlier messages"
    assert [m["id"] for m in result.surviving] == ["sys", "h2", "b2"]


def test_injected_dicts_sit_after_the_system_prompt_and_carry_ids() -> None:
    result = injecting().reduce(conversation(3, calls=0))
    block = result.surviving[1:3]
    assert [m["role"] for m in result.surviving] == ["system", "human", "ai", "human", "ai"]
    assert block[0]["content"] == "Summary of the 4 earlier messages: 4 earlier messages"
    assert all(m["id"].startswith("summary-") for m in block)
    assert all(m["response_metadata"] == {SUMMARY_MARKER: True} for m in block)
    expected = default_summary_messages_factory("4 earlier messages", 4)
    shown = [{k: v for k, v in m.items() if k not in ("id", "response_metadata")} for m in block]
    assert shown == expected


def test_injected_messages_are_langchain_messages_for_langchain_input() -> None:
    # 0.5.0 injected plain dicts without ids into a list of LangChain messages.
    messages = [SystemMessage("s", id="s")] + [
        HumanMessage(str(n), id=f"h{n}") if n % 2 == 0 else AIMessage(str(n), id=f"a{n}")
        for n in range(6)
    ]
    result = injecting().reduce(messages)
    human, ai = result.surviving[1:3]
    assert isinstance(human, HumanMessage) and isinstance(ai, AIMessage)
    assert human.id and human.id.startswith("summary-") and ai.id != human.id


def test_the_next_cut_rolls_the_injected_block_into_the_new_summary() -> None:
    seen: list[list[Any]] = []

    def remember(pruned: list[Any]) -> str:
        seen.append(pruned)
        return f"summary {len(seen)}"

    reducer = injecting(summarize_fn=remember)
    state = reducer.reduce(conversation(3, calls=0)).surviving
    state = reducer.reduce(state, conversation(2, calls=0, system=False)).surviving
    assert any(str(m.get("id", "")).startswith("summary-") for m in seen[1])
    assert sum(str(m.get("id", "")).startswith("summary-") for m in state) == 2


@pytest.mark.parametrize(
    ("min_messages", "max_messages", "injects"),
    [(4, 4, False), (5, 6, True), (6, 6, True), (3, 5, True)],
)
def test_the_injected_block_counts_against_the_window(
    min_messages: int, max_messages: int, injects: bool
) -> None:
    # The block came on top of min_messages: min=max=4 stored 5 and 6 messages. There, a
    # turn of two beside the system prompt leaves no room for it: the summary is returned.
    reducer = injecting(min_messages=min_messages, max_messages=max_messages)
    state: list[Any] = [{"role": "system", "content": "s", "id": "s"}]
    injected = False
    for n in range(20):
        for message in (
            {"role": "human", "content": f"q{n}", "id": f"h{n}"},
            {"role": "ai", "content": f"a{n}", "id": f"a{n}"},
        ):
            result = reducer.reduce(state, message)
            state = result.surviving
            assert len(state) <= max_messages
            assert not result.pruned or result.summary is not None
            injected = injected or any(is_injected(m) for m in state)
    assert injected == injects


def test_the_same_cut_injects_the_same_ids() -> None:
    messages = conversation(3, calls=0)
    first, second = injecting().plan(messages), injecting().plan(messages)
    assert [m["id"] for m in first.surviving] == [m["id"] for m in second.surviving]


def test_a_custom_factory_shapes_the_block() -> None:
    result = injecting(
        summary_message_factory=lambda text, n: [{"role": "system", "content": text, "id": "mine"}]
    ).reduce(conversation(3, calls=0))
    assert [m["id"] for m in result.surviving] == ["sys", "mine", "h2", "b2"]


def test_a_failing_summarizer_still_cuts(caplog: pytest.LogCaptureFixture) -> None:
    def broken(pruned: list[Any]) -> str:
        raise RuntimeError("llm down")

    result = injecting(summarize_fn=broken).reduce(conversation(3, calls=0))
    assert result.summary is None and len(result.surviving) == 3
    assert "summarize_fn failed" in caplog.text


async def test_an_async_summarizer_needs_the_async_path() -> None:
    async def summarize_later(pruned: list[Any]) -> str:
        return "later"

    reducer = injecting(summarize_fn=summarize_later)
    with pytest.raises(TypeError, match="use aplan/areduce"):
        reducer.plan(conversation(3, calls=0))
    merge = reducer.as_langgraph_reducer()  # the bridge has no async path
    with pytest.raises(TypeError, match=r"as_langgraph_reducer, always calls it synchronously"):
        merge(conversation(3, calls=0), [])
    result = await reducer.aplan(conversation(3, calls=0))
    assert result.summary == "later"
    assert (await reducer.areduce(conversation(3, calls=0))).summary == "later"


def chat(turns: int) -> list[dict[str, Any]]:
    history = [{"role": "system", "content": "sys", "id": "s"}]
    for i in range(turns):
        history += [
            {"role": "human", "content": f"q{i}", "id": f"h{i}"},
            {"role": "ai", "content": f"a{i}", "id": f"a{i}"},
        ]
    return history


def test_token_mode_injects_a_summary_only_within_max_tokens() -> None:
    """Token mode did not count the block: the window went over max_tokens with it, so every
    later call cut the block again, with nothing added, and summarized again (a model call
    per step, a summary of a summary)."""
    calls: list[int] = []

    def summarize_calls(pruned: list[Any]) -> str:
        calls.append(len(pruned))
        return "s" * 40

    def ten(message: Any) -> int:
        return 10

    full = MessageReducer(
        config=ReducerConfig(
            max_tokens=100, token_counter=ten, summarize_fn=summarize_calls, inject_summary=True
        )
    )
    window = full.reduce(chat(8)).surviving
    assert not any(is_injected(m) for m in window) and len(window) * 10 <= 100
    for _ in range(3):  # nothing added: nothing cut, nothing summarized
        result = full.reduce(window)
        assert not result.pruned
    assert calls == [8]

    roomy = MessageReducer(
        config=ReducerConfig(
            max_tokens=100,
            target_tokens=70,
            token_counter=ten,
            summarize_fn=summarize_calls,
            inject_summary=True,
        )
    )
    window = roomy.reduce(chat(8)).surviving
    assert sum(map(is_injected, window)) == 2 and len(window) * 10 <= 100
    assert not roomy.reduce(window).pruned


def test_a_summarize_fn_returning_a_message_gives_its_text() -> None:
    """A chat model's reply returned whole was injected as its repr."""
    reply = AIMessage(content="user likes tea")
    result = injecting(summarize_fn=lambda pruned: reply).reduce(conversation(3, calls=0))
    assert result.summary == "user likes tea"
    assert "user likes tea" in result.surviving[1]["content"]


def test_a_summarize_fn_returning_no_text_cuts_without_a_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    result = injecting(summarize_fn=lambda pruned: 42).reduce(conversation(3, calls=0))
    assert result.summary is None and not any(is_injected(m) for m in result.surviving)
    assert "summarize_fn returned int with no text content" in caplog.text


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": "user likes "}, {"type": "text", "text": "tea"}],
        ["user likes ", {"type": "reasoning", "reasoning": "hm"}, {"text": "tea"}],
    ],
)
def test_a_reply_with_content_blocks_gives_their_text(content: list[Any]) -> None:
    """Anthropic, Gemini and Responses-API replies carry their text in content blocks: the
    summary was dropped (with advice to return `.content`, that same list)."""
    for reply in (AIMessage(content=content), {"role": "assistant", "content": content}):
        result = injecting(summarize_fn=lambda pruned, r=reply: r).reduce(conversation(3, calls=0))
        assert result.summary == "user likes tea"


def test_a_factory_that_builds_no_list_is_named() -> None:
    """It failed inside the cut with "object of type 'int' has no len()"."""
    with pytest.raises(TypeError, match=r"summary_message_factory returned 7, not a list"):
        injecting(summary_message_factory=lambda summary, count: 7).reduce(conversation(3, calls=0))


async def test_a_cut_of_the_same_messages_is_summarized_once() -> None:
    """Each put of a LangGraph run plans the run's whole list again, so every put after a
    cut prunes the same messages: summarize_fn ran on each (ten identical calls in an agent
    loop of ten steps). A planned cut of messages already summarized reuses the text."""
    calls: list[list[str]] = []

    def counting(pruned: list[Any]) -> str:
        calls.append([m["id"] for m in pruned])
        return f"{len(pruned)} earlier"

    reducer = injecting(summarize_fn=counting)
    messages = conversation(3, calls=0)
    first = reducer.plan(messages)
    assert reducer.plan(messages) == first and (await reducer.aplan(messages)) == first
    assert reducer.reduce(messages).surviving == first.surviving and len(calls) == 1
    edited = [dict(m, content="changed") if m["id"] == "h0" else m for m in messages]
    assert reducer.plan(edited).summary == "4 earlier" and len(calls) == 2  # content counts
    longer = reducer.plan(conversation(4, calls=0))
    assert longer.summary == "6 earlier" and len(calls) == 3


def test_a_failed_summary_is_tried_again_on_the_next_cut() -> None:
    outcomes: list[Any] = [RuntimeError("down"), "later"]

    def flaky(pruned: list[Any]) -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return str(outcome)

    reducer = injecting(summarize_fn=flaky)
    assert reducer.plan(conversation(3, calls=0)).summary is None
    assert reducer.plan(conversation(3, calls=0)).summary == "later" and not outcomes


def test_a_cut_whose_content_holds_a_dict_with_mixed_keys_is_summarized_once() -> None:
    """A tool result holding a dict with int and str keys (an OpenAPI `responses` map) made
    the summary cache's key raise, and every plan of the thread with it; then it had no key,
    and each plan summarized it again. Without an id, the message's identity (its delivery
    and its summary ids) failed too: `reduce` and `inject_summary` raised."""
    calls: list[int] = []

    def summarize(pruned: list[Any]) -> str:
        calls.append(len(pruned))
        return "s"

    mixed = {"responses": {200: "OK", "default": {1: "a", "b": [{2: 3, "c": 4}]}}}
    for with_ids in (True, False):  # one without an id is known by its content, in JSON
        for inject in (False, True):
            calls.clear()
            reducer = MessageReducer(
                config=ReducerConfig(
                    min_messages=2,
                    max_messages=4,
                    summarize_fn=summarize,
                    inject_summary=inject,
                    on_prune=[lambda pruned, ns: None],
                )
            )
            messages = [
                {"role": "user", "content": "q0", "id": "h0"},
                {"role": "assistant", "content": [{"type": "json", "json": mixed}]},
                *({"role": "user", "content": f"q{i}", "id": f"h{i}"} for i in range(1, 5)),
            ]
            if with_ids:
                messages[1]["id"] = "a0"
            for _ in range(2):
                planned = reducer.plan(messages)
                assert planned.summary == "s" and len(planned.pruned) == 4
                assert reducer.reduce(messages).pruned == planned.pruned
            assert len(calls) == 1


def test_a_dict_with_mixed_keys_has_one_identity_and_one_token_count() -> None:
    """Key order gives no other identity; every other message keeps the one it had."""
    first = {"role": "tool", "content": [{"type": "json", "json": {200: "OK", "x": 1}}]}
    second = {"role": "tool", "content": [{"type": "json", "json": {"x": 1, 200: "OK"}}]}
    assert message_identity(first) == message_identity(second)
    assert message_identity(first) != message_identity({**first, "tool_call_id": "c"})
    assert heuristic_token_count(first) == heuristic_token_count(second) > 4
    plain = {"role": "user", "content": [{"type": "json", "json": {"b": 1, "a": [2]}}]}
    assert (
        message_identity(plain)
        == "sha256:"
        + hashlib.sha256(b'["human",[{"json":{"a":[2],"b":1},"type":"json"}],[],null]').hexdigest()[
            :32
        ]
    )


# -- an agent loop's summary is no human turn -------------------------------------------


def agent_step(i: int) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "name": "f", "args": {}}
    return [
        {"role": "ai", "content": "", "tool_calls": [call], "id": f"a{i}"},
        {"role": "tool", "content": f"r{i}", "tool_call_id": f"c{i}", "id": f"t{i}"},
    ]


def own_ids(summary: str, pruned_count: int) -> list[Any]:
    """A factory that names its messages itself: the reducer keeps those ids."""
    return [
        {"role": "user", "content": f"Earlier: {summary}", "id": f"mine-{summary}"},
        {"role": "assistant", "content": "OK", "id": f"mine-ok-{summary}"},
    ]


@pytest.mark.parametrize("factory", [None, own_ids], ids=["default", "own-ids"])
@pytest.mark.parametrize("system", [True, False], ids=["system", "no-system"])
@pytest.mark.parametrize("mode", ["count", "tokens"])
def test_an_agent_loops_summary_does_not_stop_later_cuts(
    factory: Any, system: bool, mode: str
) -> None:
    """The injected human summary was the agent loop's newest human message, whose turn is
    never pruned: no later cut pruned anything, and the window grew without limit (29
    messages after 15 steps with max_messages=6, 25 in token mode over max_tokens=60)."""
    window: dict[str, Any] = (
        {"min_messages": 4, "max_messages": 6}
        if mode == "count"
        else {"max_tokens": 60, "target_tokens": 30, "token_counter": lambda m: 5}
    )
    steps = iter(range(1000))
    config = ReducerConfig(
        summarize_fn=lambda pruned: f"s{next(steps)}",
        inject_summary=True,
        summary_message_factory=factory,
        **window,
    )
    reducer = MessageReducer(config=config)
    state: list[Any] = [{"role": "system", "content": "agent", "id": "sys"}] if system else []
    summaries = 0
    for i in range(40):
        result = reducer.reduce(state, agent_step(i))
        state = result.surviving
        summaries += result.summary is not None
        assert len(state) <= 8 if mode == "count" else 5 * len(state) <= 60, [
            m["id"] for m in state
        ]
    assert summaries >= 10
    assert [m["id"] for m in state[-2:]] == ["a39", "t39"]
    assert sum(m["content"].startswith(("Summary", "Earlier")) for m in state) <= 1


def test_a_checkpointed_agent_loop_summary_is_cut_by_a_new_reducer() -> None:
    """A window read back in another process: its summary block is known by its ids."""
    config = ReducerConfig(
        min_messages=4, max_messages=6, summarize_fn=summarize, inject_summary=True
    )
    state: list[Any] = [{"role": "system", "content": "agent", "id": "sys"}]
    for i in range(4):
        state = MessageReducer(config=config).reduce(state, agent_step(i)).surviving
    assert any(is_injected(m) for m in state)
    for i in range(4, 30):
        state = MessageReducer(config=config).reduce(state, agent_step(i)).surviving
        assert len(state) <= 6


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=40),
    st.integers(0, 6),
    st.booleans(),
    st.booleans(),
)
def test_an_agent_loop_with_summaries_stays_bounded(
    widths: list[int], min_messages: int, preserve_first: bool, system: bool
) -> None:
    config = ReducerConfig(
        min_messages=min_messages,
        max_messages=min_messages + 4,
        preserve_first=preserve_first,
        summarize_fn=summarize,
        inject_summary=True,
    )
    reducer = MessageReducer(config=config)
    state: list[Any] = [{"role": "system", "content": "agent", "id": "sys"}] if system else []
    for n, width in enumerate(widths):
        calls = [{"id": f"c{n}_{j}", "name": "f", "args": {}} for j in range(width)]
        new: list[Any] = [{"role": "ai", "content": f"{n}", "tool_calls": calls, "id": f"a{n}"}]
        new += [{"role": "tool", "content": "r", "tool_call_id": c["id"]} for c in calls]
        state = reducer.reduce(state, new).surviving
        # the newest step (a call and up to 3 results) may alone exceed the window
        assert len(state) <= max(min_messages + 4, 1 + 4), [get(m, "id") for m in state]


# -- summary messages carry a marker ----------------------------------------------------


def test_a_shared_reducer_knows_a_custom_block_after_many_other_cuts() -> None:
    """A reducer is shared by all threads (ReducingSaver uses one). It knew a block from a
    factory setting its own ids only among its last 64 cuts' blocks: after 64 cuts of other
    threads, thread A's summary was its newest human turn again (69 messages, max 8)."""
    made = iter(range(10**6))

    def fresh_ids(summary: str, count: int) -> list[Any]:  # a new id for every block
        n = next(made)
        return [
            {"role": "human", "content": f"Summary: {summary}", "id": f"mine-{n}"},
            {"role": "ai", "content": "OK", "id": f"mine-ok-{n}"},
        ]

    config = ReducerConfig(
        min_messages=5,
        max_messages=8,
        summarize_fn=summarize,
        inject_summary=True,
        summary_message_factory=fresh_ids,
    )
    reducer = MessageReducer(config=config)
    a: list[Any] = [{"role": "system", "content": "agent", "id": "sys"}]
    for i in range(8):
        a = reducer.reduce(a, agent_step(i)).surviving
    assert any(m["id"].startswith("mine-") for m in a)
    for t in range(70):
        other: list[Any] = [{"role": "system", "content": "agent", "id": "sys"}]
        for i in range(6):
            other = reducer.reduce(other, agent_step(1000 * (t + 1) + i)).surviving
    for i in range(8, 40):
        a = reducer.reduce(a, agent_step(i)).surviving
        assert len(a) <= 8, [m["id"] for m in a]


def test_the_marker_survives_a_checkpoint_and_is_not_sent_to_a_provider() -> None:
    """LangChain messages from a factory with its own ids, read back from a checkpoint by a
    new reducer (a new process): the block is known by its marker, kept in
    `response_metadata`, which no message sent to a provider carries."""
    from langchain_core.messages import ToolMessage, convert_to_messages
    from langchain_core.messages.utils import convert_to_openai_messages
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    def factory(summary: str, count: int) -> list[Any]:
        return [HumanMessage(f"Earlier: {summary}", id=f"mine-{summary}")]

    config = ReducerConfig(
        min_messages=4,
        max_messages=6,
        summarize_fn=lambda pruned: f"s{len(pruned)}",
        inject_summary=True,
        summary_message_factory=factory,
    )
    serde = JsonPlusSerializer()
    state: list[Any] = [SystemMessage("agent", id="sys")]
    for i in range(30):
        call = {"id": f"c{i}", "name": "f", "args": {}}
        step = [
            AIMessage("", tool_calls=[call], id=f"a{i}"),
            ToolMessage("r", tool_call_id=f"c{i}"),
        ]
        state = MessageReducer(config=config).reduce(state, step).surviving
        state = serde.loads_typed(serde.dumps_typed(state))
        assert len(state) <= 6, [m.id for m in state]
    block = [m for m in state if str(m.id).startswith("mine-")]
    assert len(block) == 1 and block[0].response_metadata == {SUMMARY_MARKER: True}
    sent = convert_to_openai_messages(state)
    assert SUMMARY_MARKER not in repr(sent)
    # a dict block converted by LangChain keeps the marker where the reducer reads it
    (dict_block,) = (
        injecting(summary_message_factory=lambda s, n: [{"role": "human", "content": s}])
        .reduce(conversation(3, calls=0))
        .surviving[1:2]
    )
    (converted,) = convert_to_messages([dict_block])
    assert converted.response_metadata == {SUMMARY_MARKER: True}
    assert SUMMARY_MARKER not in repr(convert_to_openai_messages([dict_block]))


def test_a_users_message_with_a_summary_shaped_id_stays_a_human_turn() -> None:
    """Ids of the shape the reducer gives (``summary-<24 hex>-<n>``) were taken for an
    injected summary anywhere: a user's task carrying one was pruned as no human turn."""
    uid = "summary-0123456789abcdef01234567-0"
    messages: list[Any] = [
        {"role": "system", "content": "s", "id": "sys"},
        {"role": "human", "content": "hello", "id": "h0"},
        {"role": "ai", "content": "hi", "id": "b0"},
        {"role": "human", "content": "THE TASK", "id": uid},
    ]
    messages += [m for i in range(5) for m in agent_step(i)]
    result = MessageReducer(config=ReducerConfig(min_messages=4, max_messages=8)).plan(messages)
    assert all(m["role"] != "human" for m in result.pruned[2:])
    assert [m["id"] for m in result.surviving][:2] == ["sys", uid]


@pytest.mark.parametrize("system", [True, False], ids=["system", "no-system"])
def test_a_block_injected_before_the_marker_is_still_known_by_its_ids(system: bool) -> None:
    """A window checkpointed by an earlier version: its block, right after the preserved
    message, carries the ids but no marker."""
    config = ReducerConfig(min_messages=4, max_messages=6, summarize_fn=summarize)
    prefix = "summary-" + "ab" * 12
    state: list[Any] = [{"role": "system", "content": "agent", "id": "sys"}] if system else []
    state += [
        {"role": "human", "content": "Summary of the 4 earlier messages", "id": f"{prefix}-0"},
        {"role": "ai", "content": "OK", "id": f"{prefix}-1"},
        *agent_step(0),
        *agent_step(1),
        *agent_step(2),
    ]
    result = MessageReducer(config=config).plan(state)
    assert [m["id"] for m in result.pruned][:2] == [f"{prefix}-0", f"{prefix}-1"]


@pytest.mark.parametrize("system", [True, False], ids=["system", "no-system"])
@pytest.mark.parametrize("kind", ["dict", "langchain"])
def test_a_users_message_right_after_the_system_prompt_with_a_block_id_is_the_task(
    system: bool, kind: str
) -> None:
    """Where a cut puts a block, an id of the block's shape was enough: an agent loop's task
    there was taken for an older block and pruned as no human turn, leaving the loop with
    no task. An older block is now known only with the text older releases gave it."""
    uid = "summary-0123456789abcdef01234567-0"
    messages: list[Any] = [{"role": "system", "content": "agent", "id": "sys"}] if system else []
    messages.append({"role": "user", "content": "THE TASK", "id": uid})
    messages += [m for i in range(5) for m in agent_step(i)]
    if kind == "langchain":
        messages = to_langchain(messages)
    result = MessageReducer(config=ReducerConfig(min_messages=4, max_messages=8)).plan(messages)
    assert [get(m, "id") for m in result.surviving][: 1 + system] == [*["sys"][:system], uid]
    assert all(get(m, "id") != uid for m in result.pruned)


def test_an_older_block_needs_its_text_as_well_as_its_ids() -> None:
    """The ids alone no longer make a block; the default factory's text with them does,
    also in LangChain messages, and a block's text without its ids is an ordinary message."""
    prefix = "summary-" + "cd" * 12
    steps = [m for i in range(3) for m in agent_step(i)]
    config = ReducerConfig(min_messages=4, max_messages=6)
    for text, known in [
        ("Summary of the 12 earlier messages: the user wants a report", True),
        ("Summary of the earlier messages", False),
        ("Please summarize the 12 earlier messages", False),
    ]:
        block = [
            {"role": "human", "content": text, "id": f"{prefix}-0"},
            {"role": "ai", "content": "OK", "id": f"{prefix}-1"},
        ]
        listed = [SYSTEM_DICT, *block, *steps]
        for messages in (listed, to_langchain(listed)):
            pruned = [get(m, "id") for m in MessageReducer(config=config).plan(messages).pruned]
            assert (pruned[:2] == [f"{prefix}-0", f"{prefix}-1"]) is known, (text, pruned)
    unnamed = [{"role": "human", "content": "Summary of the 4 earlier messages: x", "id": "u"}]
    kept = MessageReducer(config=config).plan([SYSTEM_DICT, *unnamed, *steps]).surviving
    assert [get(m, "id") for m in kept][:2] == ["sys", "u"]
