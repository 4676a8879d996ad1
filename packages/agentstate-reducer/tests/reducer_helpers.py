"""Conversation builders, strategies and rule checks shared by the reducer tests."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

HUMAN_ROLES = ("human", "user")
AI_ROLES = ("ai", "assistant", "agent")


def role(message: Any) -> str:
    """The normalized role, computed independently of the package under test."""
    if isinstance(message, dict):
        raw = message.get("role") or message.get("type")
    else:
        raw = message.type
    if raw in HUMAN_ROLES:
        return "human"
    if raw in AI_ROLES:
        return "ai"
    return str(raw)


def get(message: Any, key: str) -> Any:
    if isinstance(message, dict):
        return message.get(key)
    return getattr(message, key, None)


def call_ids(message: Any) -> list[str]:
    return [c["id"] for c in get(message, "tool_calls") or []]


def turn(n: int, *, calls: int = 0, prefix: str = "") -> list[dict[str, Any]]:
    """One human turn: question, optional tool round trip, answer."""
    out: list[dict[str, Any]] = [{"role": "human", "content": f"q{n}", "id": f"{prefix}h{n}"}]
    if calls:
        tool_calls = [{"id": f"{prefix}c{n}_{j}", "name": "f", "args": {}} for j in range(calls)]
        out.append({"role": "ai", "content": "", "tool_calls": tool_calls, "id": f"{prefix}a{n}"})
        out += [
            {"role": "tool", "content": "r", "tool_call_id": c["id"], "id": f"{prefix}t{c['id']}"}
            for c in tool_calls
        ]
    out.append({"role": "ai", "content": f"answer {n}", "id": f"{prefix}b{n}"})
    return out


def conversation(turns: int, *, calls: int = 2, system: bool = True) -> list[dict[str, Any]]:
    head = [{"role": "system", "content": "be brief", "id": "sys"}] if system else []
    return head + [m for n in range(turns) for m in turn(n, calls=calls)]


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 10) -> list[dict[str, Any]]:
    """Random conversations with tool calls, aliases, mid-list system messages, id-less
    messages and a possibly pending final tool call, some of them agent loops without human
    messages after the opening. Contents are unique."""
    counter = itertools.count()
    messages: list[dict[str, Any]] = []

    def add(message: dict[str, Any]) -> dict[str, Any]:
        n = next(counter)
        message["content"] = message.get("content", "") + f"#{n}" + "x" * draw(st.integers(0, 30))
        if draw(st.integers(0, 7)):
            message["id"] = f"m{n}"
        messages.append(message)
        return message

    opening = draw(st.sampled_from(["system", "system", "none", "ai", "human"]))
    if opening == "system":
        add({"role": "system"})
    elif opening == "ai":
        add({"role": draw(st.sampled_from(AI_ROLES)), "content": "hello"})
    elif opening == "human":
        add({"role": draw(st.sampled_from(HUMAN_ROLES))})
    turns = draw(st.integers(0, max_turns))
    agent_loop = draw(st.integers(0, 4)) == 0
    for t in range(turns):
        if draw(st.integers(0, 5)) == 0:
            add({"role": "system", "content": "note"})
        if not agent_loop:
            add({"role": draw(st.sampled_from(HUMAN_ROLES))})
        steps = draw(st.integers(0, 3))
        for s in range(steps):
            width = draw(st.integers(0, 3))
            ai = add({"role": draw(st.sampled_from(AI_ROLES))})
            if not width:
                continue
            ids = [f"call{len(messages)}_{j}" for j in range(width)]
            ai["tool_calls"] = [{"id": i, "name": "f", "args": {"q": i}} for i in ids]
            pending = t == turns - 1 and s == steps - 1 and draw(st.booleans())
            if not pending:
                results = draw(st.permutations(ids))
                if not agent_loop and draw(st.integers(0, 9)) == 0:  # a human interjects
                    add({"role": draw(st.sampled_from(HUMAN_ROLES))})
                for i in results:
                    add({"role": "tool", "tool_call_id": i})
        if draw(st.integers(0, 9)) == 0:  # a result whose call is not in the list
            add({"role": "tool", "tool_call_id": f"lost{len(messages)}"})
    return messages


def positions(result_part: Sequence[Any], source: Sequence[Any]) -> list[int]:
    index = {id(m): i for i, m in enumerate(source)}
    return [index[id(m)] for m in result_part]


def is_injected(message: Any) -> bool:
    return str(get(message, "id") or "").startswith("summary-")


def preserved_count(messages: Sequence[Any], preserve_first: bool) -> int:
    return int(bool(preserve_first and messages and role(messages[0]) in ("system", "human")))


def check_partition(source: Sequence[Any], surviving: Sequence[Any], pruned: Sequence[Any]) -> None:
    """Order is kept and surviving + pruned is the input, plus injected summary messages."""
    inputs = {id(m) for m in source}
    assert all(is_injected(m) for m in surviving if id(m) not in inputs)
    kept = [m for m in surviving if id(m) in inputs]
    kept_at, pruned_at = positions(kept, source), positions(pruned, source)
    assert kept_at == sorted(kept_at)
    assert pruned_at == sorted(pruned_at)
    assert sorted(kept_at + pruned_at) == list(range(len(source)))


def check_valid(
    source: Sequence[Any], surviving: Sequence[Any], *, preserved: int, human_first: bool
) -> None:
    """The provider rules: opening message, no orphaned results, no unanswered calls."""
    body = [m for m in surviving[preserved:] if not is_injected(m)]
    if body:
        assert role(body[0]) != "tool"
        if human_first:
            assert role(body[0]) == "human", [role(m) for m in surviving]
    callers: dict[str, int] = {}
    for i, message in enumerate(source):
        for c in call_ids(message):
            callers[c] = i
    alive = {id(m) for m in surviving}
    called_so_far: set[str] = set()
    for message in surviving:
        if role(message) == "ai":
            called_so_far.update(call_ids(message))
        if role(message) == "tool":
            assert get(message, "tool_call_id") in called_so_far, "orphaned tool result"
    for i, message in enumerate(source):
        if role(message) == "tool" and id(message) not in alive:
            caller = callers.get(get(message, "tool_call_id"))
            if caller is not None and caller < i:
                assert id(source[caller]) not in alive, "a surviving call lost its result"


def last_human(messages: Sequence[Any]) -> int:
    return max((i for i, m in enumerate(messages) if role(m) == "human"), default=-1)


def held_call(messages: Sequence[Any], kept: Sequence[Any]) -> list[Any] | None:
    """The results of the newest AI message when `kept` holds it, it calls tools and a human
    message follows it (no AI message has read them): a cut may keep it with them over the
    limit, by those results. None otherwise."""
    newest = max((i for i, m in enumerate(messages) if role(m) == "ai"), default=-1)
    calls = set(call_ids(messages[newest])) if newest >= 0 else set()
    if not calls or newest > last_human(messages) or not any(m is messages[newest] for m in kept):
        return None
    return [m for m in messages if role(m) == "tool" and get(m, "tool_call_id") in calls]


def human_first_applies(
    source: Sequence[Any], kept: Sequence[Any], preserved: int, require_human_first: bool
) -> bool:
    """Whether a cut's kept part must open with a human message after the preserved one: not
    when the only human message is the preserved one (the steps after it are an agent loop's),
    nor when a preserved question is followed by the call a cut holds (`held_call`) and no
    other human message before it."""
    newest = last_human(source)
    if not require_human_first or newest < preserved:
        return False
    if preserved and role(source[0]) == "human" and held_call(source, kept) is not None:
        call = max(i for i, m in enumerate(source) if role(m) == "ai")
        return any(role(m) == "human" for m in source[preserved:call])
    return True


def splits_no_call(messages: Sequence[Any], index: int) -> bool:
    """True when no tool result at or after `index` answers a call made before it."""
    callers: dict[str, int] = {}
    for i, message in enumerate(messages):
        for c in call_ids(message):
            callers[c] = i
        if i >= index and role(message) == "tool":
            caller = _caller_before(messages, i)
            if caller is not None and caller < index:
                return False
    return True


def _caller_before(messages: Sequence[Any], index: int) -> int | None:
    call = get(messages[index], "tool_call_id")
    for i in range(index - 1, -1, -1):
        if call in call_ids(messages[i]):
            return i
    return None


def to_langchain(messages: Sequence[dict[str, Any]]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        r = role(m)
        kwargs: dict[str, Any] = {"content": m["content"], "id": m.get("id")}
        if r == "human":
            out.append(HumanMessage(**kwargs))
        elif r == "ai":
            out.append(AIMessage(**kwargs, tool_calls=m.get("tool_calls", [])))
        elif r == "tool":
            out.append(ToolMessage(**kwargs, tool_call_id=m["tool_call_id"]))
        else:
            out.append(SystemMessage(**kwargs))
    return out


class Recorder:
    """A hook that records what it receives and can be told to fail."""

    def __init__(self, fail: Callable[[], bool] = lambda: False) -> None:
        self.calls: list[tuple[list[Any], Any]] = []
        self.fail = fail

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        if self.fail():
            raise RuntimeError("memory store is down")
        self.calls.append((list(pruned), namespace))

    @property
    def ids(self) -> list[str]:
        return [get(m, "id") for batch, _ in self.calls for m in batch]


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Yield to the event loop until `condition()` holds; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.001)


class StallingLedger:
    """An in-memory `AsyncDeliveryLedger`, a test double of a user's network ledger: while
    `stalled`, `aseen` for hook `stall` (every hook when None) waits until cancelled."""

    def __init__(self, stall: str | None = None) -> None:
        self.rows: set[tuple[str, Any, str]] = set()
        self.stall = stall
        self.stalled = True
        self.stuck = 0

    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        raise AssertionError("seen() ran; aseen() was expected")

    def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        raise AssertionError("mark() ran; amark() was expected")

    async def aseen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        if self.stalled and self.stall in (None, hook_key):
            self.stuck += 1
            await asyncio.Event().wait()  # until cancelled
        await asyncio.sleep(0)
        return {i for i in message_ids if (hook_key, namespace, i) in self.rows}

    async def amark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        await asyncio.sleep(0)
        self.rows.update((hook_key, namespace, i) for i in message_ids)
