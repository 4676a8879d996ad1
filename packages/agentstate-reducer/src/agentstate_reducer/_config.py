"""`ReducerConfig`, `ReducerResult` and the hook protocols."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ._report import DeliveryReport

DEFAULT_NAMESPACE_KEY = "memory_namespace"


class RememberFn(Protocol):
    """An `on_prune` hook.

    Called with the pruned messages and the namespace given to `reduce`. May be a coroutine
    function: it is awaited by `areduce` and `adeliver`.
    """

    def __call__(self, pruned: list[Any], namespace: Any, /) -> object: ...


class TokenCounter(Protocol):
    """Count the tokens of one message."""

    def __call__(self, message: Any, /) -> int: ...


class Summarizer(Protocol):
    """Summarize pruned messages: returns a `str`, or an awaitable of one for `aplan`."""

    def __call__(self, pruned: list[Any], /) -> Any: ...


class SummaryMessageFactory(Protocol):
    """Build the messages injected in place of the pruned ones."""

    def __call__(self, summary: str, pruned_count: int, /) -> list[Any]: ...


@dataclass
class ReducerConfig:
    """How a `MessageReducer` cuts, summarizes and delivers.

    Count mode (`max_tokens` is None): a list longer than `max_messages` is cut to at most
    `min_messages` messages. Token mode (`max_tokens` set; it wins over count mode): a list
    over `max_tokens` is cut to the newest whole messages within `target_tokens`. Both
    budgets include the preserved first message. Cuts fall between conversation turns, so
    the newest human turn is kept whole, even when it alone exceeds the budget, as long as
    it fits the limit (`max_messages`, `max_tokens`); a longer one keeps its human message
    and its newest steps that fit the budget.

    Attributes:
        min_messages: Most messages a cut keeps in count mode.
        max_messages: Cut when the list is longer than this; None never cuts in count mode.
        max_tokens: Cut when the list has more tokens than this; None selects count mode.
        target_tokens: Most tokens a cut keeps; None means `max_tokens`.
        token_counter: `(message) -> int`; None uses tiktoken when available offline, else
            a heuristic (see `resolve_token_counter`). Needs `max_tokens`.
        preserve_first: Keep index 0 when it is a system or human message.
        cascade_tool_messages: Deprecated and ignored: tool results always leave with the
            AI message that called them, because providers reject orphans.
        summarize_fn: `(pruned) -> str`, called on each cut; its text is
            `ReducerResult.summary`.
        inject_summary: Also insert the summary messages where the pruned ones were. In
            count mode they count against `min_messages` and never take the window over
            `max_messages`.
        summary_message_factory: `(summary, pruned_count) -> messages` to inject; None uses
            `default_summary_messages_factory`.
        on_prune: Hooks `(pruned, namespace)`, run on every cut by `reduce`.
        namespace_key: The key integrations read the namespace from in a run config.
        dedupe_on_prune: Deliver each message to each hook once per namespace.
        dedupe_window: Size of the in-memory delivery ledger and of the retry buffer.
        require_human_first: Make the first message after the preserved one a human one.
        retry_after: Seconds a hook that raised rests before it is called again; its
            messages, and those cut meanwhile, wait in the retry buffer. Doubles with each
            failure in a row, up to `max_retry_after`; a success resets it. 0 retries at
            the next delivery.
        max_retry_after: The longest rest.
    """

    min_messages: int = 10
    max_messages: int | None = 20
    max_tokens: int | None = None
    target_tokens: int | None = None
    token_counter: TokenCounter | None = None
    preserve_first: bool = True
    cascade_tool_messages: bool = True
    summarize_fn: Summarizer | None = None
    inject_summary: bool = False
    summary_message_factory: SummaryMessageFactory | None = None
    on_prune: list[RememberFn] = field(default_factory=list)
    namespace_key: str = DEFAULT_NAMESPACE_KEY
    dedupe_on_prune: bool = True
    dedupe_window: int = 10_000
    require_human_first: bool = True
    retry_after: float = 1.0
    max_retry_after: float = 300.0

    def __post_init__(self) -> None:
        _check_int("min_messages", self.min_messages, minimum=0)
        _check_int("max_messages", self.max_messages, minimum=0, optional=True)
        _check_int("max_tokens", self.max_tokens, minimum=1, optional=True)
        _check_int("target_tokens", self.target_tokens, minimum=0, optional=True)
        _check_int("dedupe_window", self.dedupe_window, minimum=1)
        for name in ("retry_after", "max_retry_after"):
            _check_seconds(name, getattr(self, name))
        if self.max_retry_after < self.retry_after:
            raise ValueError(
                f"ReducerConfig.max_retry_after={self.max_retry_after!r} is shorter than "
                f"retry_after={self.retry_after!r}; set max_retry_after >= retry_after (the "
                "rest after a failure doubles from retry_after up to max_retry_after)"
            )
        if self.max_tokens is None:
            if self.target_tokens is not None:
                raise ValueError(
                    f"ReducerConfig.target_tokens={self.target_tokens} has no effect without "
                    "max_tokens; set max_tokens too, or drop target_tokens"
                )
            if self.max_messages is not None and self.min_messages > self.max_messages:
                raise ValueError(
                    f"ReducerConfig.min_messages={self.min_messages} is larger than "
                    f"max_messages={self.max_messages}; set min_messages <= max_messages "
                    "(max_messages triggers a cut, min_messages is what the cut keeps)"
                )
        elif self.target_tokens is not None and self.target_tokens > self.max_tokens:
            raise ValueError(
                f"ReducerConfig.target_tokens={self.target_tokens} is larger than "
                f"max_tokens={self.max_tokens}; set target_tokens <= max_tokens, or None to "
                "cut down to max_tokens"
            )
        for name in ("preserve_first", "inject_summary", "dedupe_on_prune", "require_human_first"):
            value = getattr(self, name)
            if not isinstance(value, bool):  # "false" is truthy: it would mean True
                raise ValueError(
                    f"ReducerConfig.{name}={value!r} is not a bool; pass True or False"
                )
        for name in ("token_counter", "summarize_fn", "summary_message_factory"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"ReducerConfig.{name}={value!r} is not callable; pass a function")
        if self.token_counter is not None and self.max_tokens is None:
            raise ValueError(
                f"ReducerConfig.token_counter={self.token_counter!r} has no effect without "
                "max_tokens; set max_tokens too, or drop token_counter"
            )
        if not isinstance(self.namespace_key, str) or not self.namespace_key:
            raise ValueError(
                f"ReducerConfig.namespace_key={self.namespace_key!r} must be a non-empty string; "
                f"the default is {DEFAULT_NAMESPACE_KEY!r}"
            )
        self.on_prune = _check_hooks(self.on_prune)
        if not self.cascade_tool_messages:
            warnings.warn(
                "ReducerConfig.cascade_tool_messages=False is ignored since 0.6.0: a tool "
                "result always leaves with the AI message that called it, because providers "
                "reject orphaned tool results; drop the argument",
                DeprecationWarning,
                stacklevel=3,
            )
        if self.inject_summary and self.summarize_fn is None:
            warnings.warn(
                "ReducerConfig.inject_summary=True does nothing without summarize_fn; pass "
                "summarize_fn=(pruned) -> str",
                UserWarning,
                stacklevel=3,
            )


def _check_int(name: str, value: object, *, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        allowed = "an int or None" if optional else "an int"
        raise ValueError(f"ReducerConfig.{name}={value!r} must be {allowed}")
    if value < minimum:
        raise ValueError(f"ReducerConfig.{name}={value} is below {minimum}; use {minimum} or more")


def _check_seconds(name: str, value: object) -> None:
    default = getattr(ReducerConfig, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"ReducerConfig.{name}={value!r} must be a number of seconds (int or float); "
            f"pass e.g. {name}={default!r}"
        )
    try:
        finite = math.isfinite(value) and value >= 0
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise ValueError(
            f"ReducerConfig.{name}={value!r} must be a finite number of seconds >= 0; "
            f"pass e.g. {name}={default!r}"
        )


def _check_hooks(hooks: object) -> list[RememberFn]:
    if callable(hooks):
        label = getattr(hooks, "__name__", type(hooks).__name__)
        raise ValueError(
            f"ReducerConfig.on_prune must be a list of hooks, got the single callable {label}; "
            f"use on_prune=[{label}]"
        )
    if not isinstance(hooks, Sequence) or isinstance(hooks, (str, bytes)):
        raise ValueError(
            f"ReducerConfig.on_prune={hooks!r} must be a list of (pruned, namespace) hooks"
        )
    for index, hook in enumerate(hooks):
        if isinstance(hook, type):  # callable, and every call would build an instance
            raise ValueError(
                f"ReducerConfig.on_prune[{index}] is the class {hook.__name__}, not a hook: "
                f"pass a function (pruned, namespace) -> Any, or an instance such as "
                f"{hook.__name__}(remember)"
            )
        if not callable(hook):
            raise ValueError(
                f"ReducerConfig.on_prune[{index}]={hook!r} is not callable; pass a function "
                "(pruned, namespace) -> Any"
            )
    return hooks if isinstance(hooks, list) else list(hooks)


@dataclass
class ReducerResult:
    """The outcome of one cut.

    Attributes:
        surviving: The new message list, with any injected summary messages.
        pruned: The messages cut out, in input order.
        summary: The text `summarize_fn` returned, if it ran.
        delivery: What the hooks got; None from `plan`, or when nothing was delivered.
    """

    surviving: list[Any] = field(default_factory=list)
    pruned: list[Any] = field(default_factory=list)
    summary: str | None = None
    delivery: DeliveryReport | None = None
