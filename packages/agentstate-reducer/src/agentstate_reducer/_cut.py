"""Where to cut a message list: a pure function of the list and the config, O(n)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, compress
from typing import Any

from ._config import ReducerConfig, TokenCounter
from ._delivery import hook_key
from ._messages import (
    AI,
    FUNCTION,
    HUMAN,
    SYSTEM,
    TOOL,
    check_roles,
    id_of,
    role_of,
    tool_call_id_of,
    tool_call_ids,
)
from ._summary import is_summary, legacy_block

# The roles a preserved first message may have: those that open a conversation. A role the
# package does not know (`ChatMessage(role="critic")`) is an ordinary message.
_PRESERVABLE = frozenset({SYSTEM, HUMAN})


@dataclass(frozen=True)
class Cut:
    """A cut of a message list.

    Attributes:
        preserved: 1 when index 0 is kept as the preserved first message, else 0.
        start: Index of the first kept message after the preserved one; `[preserved:start]`
            is pruned.
        orphans: Indices at or after `start` also pruned: tool results whose call was cut,
            or that answer no call in the list.
        kept_tokens: In token mode, the tokens of the messages the cut keeps (counted once,
            here); None in count mode.
        anchor: The newest human message, kept ahead of `start` when the preserved message
            and its turn are over the limit (`max_messages`, `max_tokens`): a cut inside the
            turn, which prunes `[anchor + 1:start]` too; else None.
        over: How far the kept part may go over the limit: the messages (count mode) or
            tokens of the results of a call held for a graph to resume into (see
            `plan_cut`), else 0.
    """

    preserved: int
    start: int
    orphans: tuple[int, ...]
    kept_tokens: int | None = None
    anchor: int | None = None
    over: int = 0

    def pruned_indices(self) -> list[int]:
        """Return every pruned index, ascending."""
        if self.anchor is None:
            return [*range(self.preserved, self.start), *self.orphans]
        return [
            *range(self.preserved, self.anchor),
            *range(self.anchor + 1, self.start),
            *self.orphans,
        ]

    def kept_indices(self, n: int) -> list[int]:
        """Return every index a cut of `n` messages keeps, ascending."""
        gone = set(self.orphans)
        head = [] if self.anchor is None else [self.anchor]
        return [*range(self.preserved), *head, *(i for i in range(self.start, n) if i not in gone)]


def plan_cut(
    messages: Sequence[Any],
    config: ReducerConfig,
    count_tokens: TokenCounter | None,
    reserve: int = 0,
) -> Cut | None:
    """Return the cut `messages` needs under `config`, or None when it is within bounds.

    Args:
        messages: The whole list, oldest first.
        config: Window sizes and rules.
        count_tokens: The token counter; only used in token mode.
        reserve: Count mode: messages the cut leaves room for, the summary block injected
            after it, so that the stored window stays within `min_messages`.

    Returns:
        None when the list does not exceed `max_messages` or `max_tokens`. Otherwise the cut
        keeping the most recent messages within budget such that the kept tail starts a
        human turn (or, with `require_human_first` off, splits no tool call from its
        results), never starting after the newest human message while the preserved one
        and that turn fit the limit, nor after the newest AI message when it calls tools and
        a human message follows it (a graph paused before or after its tools, given a message
        by `update_state`, resumes into that call, whose results no AI message has read), as
        long as a cut before it fits the limit, its results aside (so they may take the list
        over it until an AI message follows). A longer newest turn is cut inside: its human
        message is kept (`Cut.anchor`), and after it the steps an agent loop's cut keeps.
        With no human message after the preserved one (an agent loop) the kept tail starts
        where it splits no tool call, never after the newest AI message when that calls tools
        (a graph paused before its tools, or just after them, resumes from that message) nor
        after the newest message that is neither a system message nor a tool result, however many
        tokens it holds. A tool result that arrived late (after a newer AI or human message
        than its call) leaves with its call instead of holding the cut back. A result listed
        before its call stays with it when only tool and system messages lie between them;
        otherwise it is an orphan. No cut falls right before a tool or function result, so
        the kept tail opens with one only when nothing before it could be kept (the list
        opens there with results the newest step keeps). A summary message the reducer
        injected (`is_summary`, or an older block, `legacy_block`) is no human turn (an
        agent loop's summary would be its newest human message, never pruned) and no
        preserved first message.

    Raises:
        ValueError: A message has no role, or is a removal marker (`check_roles`).
    """
    n = len(messages)
    roles = [role_of(m) for m in messages]
    check_roles(messages, roles)
    tokens: list[int] | None = None
    if config.max_tokens is not None:
        assert count_tokens is not None
        tokens = [checked_count(count_tokens, m, i) for i, m in enumerate(messages)]
        if sum(tokens) <= config.max_tokens:
            return None
    elif config.max_messages is None or n <= config.max_messages:
        return None

    legacy = legacy_block(messages)

    def summary(i: int) -> bool:
        return i in legacy or is_summary(messages[i])

    # parent[i]: index of the AI message whose tool call the tool result at i answers (the
    # newest one before it; else, for a result listed before its call with nothing but tool
    # and system messages between them, that call), -1 for an orphan. Only tool results
    # have entries.
    parent: dict[int, int] = {}
    late: set[int] = set()  # results after a newer AI or human message than their call
    callers: dict[str, int] = {}
    waiting: dict[str, list[int]] = {}  # results whose call has not been seen yet
    humans: list[int] = []  # human messages, summary messages left out
    functions: list[int] = []  # function results (the legacy form of tool results)
    newest_call = n  # the newest AI message when it calls tools, else n
    last_turn = -1  # the newest AI or human message so far
    for i, role in enumerate(roles):
        if role == TOOL:
            call = tool_call_id_of(messages[i])
            caller = callers.get(call, -1) if call is not None else -1
            parent[i] = caller
            if caller >= 0 and last_turn > caller:
                late.add(i)
            elif caller < 0 and call is not None:
                waiting.setdefault(call, []).append(i)
            continue
        if role == SYSTEM:
            continue
        if role == FUNCTION:
            functions.append(i)
        elif role == AI:
            call_ids = tool_call_ids(messages[i])
            newest_call = i if call_ids else n
            for call_id in call_ids:
                callers[call_id] = i
                if waiting:
                    for result in waiting.pop(call_id, ()):
                        parent[result] = i
            last_turn = i
        elif role == HUMAN:
            last_turn = i
            if not summary(i):
                humans.append(i)
        # Any other message between an early result and its call unbinds them: the result
        # stays an orphan, pruned by any cut at or before it.
        if waiting:
            waiting.clear()

    preserved = (
        1 if config.preserve_first and n and roles[0] in _PRESERVABLE and not summary(0) else 0
    )
    # A preserved first human message opens the only turn: the steps after it are cut as an
    # agent loop's (`create_react_agent` asked once, then calling tools for ever).
    last_human = humans[-1] if humans and humans[-1] >= preserved else -1
    clean = _clean(n, parent, late)
    # No cut falls right before a tool or function result: the kept part would open with it
    # (a result listed just before its call), which a provider rejects. Before an orphan
    # result it would keep what a cut right after it keeps.
    for result in (*parent, *functions):
        clean[result] = False

    human_turns = last_human >= preserved
    answers: list[int] = []  # the results of a held call (see below)
    if human_turns and config.require_human_first:
        candidates = [i for i in humans if i >= preserved and clean[i]]
    else:
        candidates = list(compress(range(preserved, n), clean[preserved:]))
    if human_turns:
        limit = last_human
        if newest_call < last_human:
            # A human message came after the newest AI message, which calls tools (given by
            # `update_state` to a graph paused before or after its tools): no AI message has
            # read their results yet, and the graph resumes into that call. It is kept, with
            # its results, where a cut before it leaves the list within its limit, those
            # results aside (a tools node may have just added them).
            before = [i for i in candidates if i <= newest_call]
            if not before and preserved and roles[0] == HUMAN:
                # the preserved question opens the turn: its steps are cut as an agent loop's
                before = [i for i in range(preserved, newest_call + 1) if clean[i]]
            results = [i for i, caller in parent.items() if caller == newest_call]
            if before and not _over_limit(config, tokens, preserved, before[-1], n, results):
                limit = newest_call
                candidates = sorted({*candidates, *before})
                answers = results
                if not _over_limit(config, tokens, 0, 0, n, answers):
                    return None  # over the limit by those results only: nothing to cut
    else:  # an agent loop keeps its newest step: the newest message, or the call it answers
        # A tool result is left out: one that answers the newest call limits the cut at
        # that call (`newest_call`), and an orphan, or one that arrived late, leaves with
        # any cut after its call, so a cut before it would protect only what follows it.
        limit = min(newest_call, _newest_step(roles, preserved - 1))
    candidates.append(n)

    if tokens is None:
        budget = config.min_messages - preserved - reserve
    else:
        target = config.target_tokens if config.target_tokens is not None else config.max_tokens
        assert target is not None
        budget = target - (tokens[0] if preserved else 0)

    anchor = None
    # the newest turn is measured as the held call was: its results aside
    after = [i for i in answers if i > last_human]
    if human_turns and _over_limit(config, tokens, preserved, last_human, n, after):
        # Kept whole, the newest turn would leave the list over its limit: it keeps its human
        # message and, after it, the newest steps that fit the budget, cut as an agent
        # loop's (never after its newest step).
        anchor = last_human
        inside = [i for i in range(anchor + 1, n) if clean[i]]
        start = _choose(
            [*inside, n],
            n,
            tokens,
            budget - (1 if tokens is None else tokens[anchor]),
            # a call before the turn (its last step ended on one) is pruned with that turn
            min(newest_call if newest_call > anchor else n, _newest_step(roles, anchor)),
            anchor + 1,
        )
        if start == anchor + 1:  # nothing inside the turn to cut: keep it whole
            anchor, start = None, last_human
    else:
        start = _choose(candidates, n, tokens, budget, limit, preserved)
    orphans = tuple(i for i in range(start, n) if parent.get(i, start) < start)
    over = len(answers) if tokens is None else sum(tokens[i] for i in answers)
    cut = Cut(preserved=preserved, start=start, orphans=orphans, anchor=anchor, over=over)
    if tokens is None:
        return cut
    return replace(cut, kept_tokens=sum(tokens[i] for i in cut.kept_indices(n)))


def _newest_step(roles: list[str], after: int) -> int:
    """The newest index after `after` whose message is neither a system message nor a tool
    result (an agent loop's newest step), else ``len(roles)``."""
    return next(
        (i for i in range(len(roles) - 1, after, -1) if roles[i] not in (SYSTEM, TOOL)),
        len(roles),
    )


def _over_limit(
    config: ReducerConfig,
    tokens: list[int] | None,
    preserved: int,
    first: int,
    n: int,
    spare: Sequence[int] = (),
) -> bool:
    """Whether the preserved message and `[first:n]` alone, the indices `spare` (within it)
    left out, exceed `max_messages` (count mode) or `max_tokens` (token mode)."""
    if tokens is None:
        assert config.max_messages is not None
        return preserved + n - first - len(spare) > config.max_messages
    assert config.max_tokens is not None
    size = sum(tokens[:preserved]) + sum(tokens[first:]) - sum(tokens[i] for i in spare)
    return size > config.max_tokens


def checked_count(count_tokens: TokenCounter, message: Any, index: int) -> int:
    """`count_tokens(message)`; an error names the counter and message `index`, and chains
    what the counter raised."""
    try:
        value = count_tokens(message)
    except Exception as exc:
        raise ValueError(
            f"token_counter {hook_key(count_tokens)} raised {exc!r} on {_label(message, index)}; "
            "it must return an int >= 0 for every message"
        ) from exc
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"token_counter {hook_key(count_tokens)} returned {value!r} for "
            f"{_label(message, index)}; it must return an int >= 0"
        )
    return value


def _label(message: Any, index: int) -> str:
    message_id = id_of(message)
    return f"message {index}" if message_id is None else f"message {index} (id {message_id!r})"


def _clean(n: int, parent: dict[int, int], late: set[int]) -> list[bool]:
    """`clean[i]`: cutting before `i` separates no tool result from its call.

    A result listed before its call keeps to it: both are kept or both pruned. A result that
    arrived late (after a newer AI or human message than its call) does not hold the cut
    back: a cut between them prunes it with its call, as a result whose call was cut.
    """
    crossing = [0] * (n + 2)  # +1 where a call-result span opens, -1 past where it closes
    for result, caller in parent.items():
        if caller < 0 or result in late:
            continue
        low, high = min(result, caller), max(result, caller)
        crossing[low + 1] += 1
        crossing[high + 1] -= 1
    if not any(crossing):
        return [True] * n
    return [open_spans == 0 for open_spans in accumulate(crossing[:n])]


def _choose(
    candidates: list[int],
    n: int,
    tokens: list[int] | None,
    budget: int,
    limit: int,
    preserved: int,
) -> int:
    """Smallest candidate whose tail fits `budget`, but never past `limit` (when no
    candidate is at or before it, `preserved`: nothing is cut)."""
    best = n
    suffix = 0
    position = n
    for candidate in reversed(candidates):
        if tokens is None:
            suffix = n - candidate
        else:
            while position > candidate:
                position -= 1
                suffix += tokens[position]
        if suffix > budget:
            break
        best = candidate
    if best <= limit:
        return best
    return max((c for c in candidates if c <= limit), default=preserved)
