"""The summary messages injected in place of a cut."""

from __future__ import annotations

import copy
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ._config import SummaryMessageFactory
from ._messages import (
    HUMAN,
    _get,
    _jsonable,
    id_of,
    is_mapping,
    kind_of,
    message_identity,
    role_of,
    sorted_json,
    to_langchain_message,
    with_id,
)

SUMMARY_ID_PREFIX = "summary-"
# The ids `summary_block` gives: the prefix, 24 hex digits of the pruned messages' hash, the
# message's position in the block.
_SUMMARY_ID = re.compile(re.escape(SUMMARY_ID_PREFIX) + r"[0-9a-f]{24}-[0-9]+")
# How the first message of `default_summary_messages_factory`'s block begins: what a block
# injected before `SUMMARY_MARKER` must also show to be known by its ids (`legacy_block`).
_LEGACY_TEXT = re.compile(r"Summary of the [0-9]+ earlier messages")
# The key `summary_block` sets to True in the ``response_metadata`` of every message it
# injects (a dict's ``response_metadata`` key, a LangChain message's field): the mark by
# which a cut knows them (`is_summary`).
SUMMARY_MARKER = "agentstate_reducer_summary"

# How many cuts' summaries a reducer remembers (see `Summaries`).
SUMMARIES = 64


class Summaries:
    """The summary text of the last `SUMMARIES` cuts, by what they pruned.

    A caller that plans the same list again (a `reduce` at every step of a LangGraph run,
    on the run's whole list in memory, prunes the same messages after a cut) gets the text
    `summarize_fn` returned for those messages instead of a new call. The key is each
    pruned message's identity and content, so an edit under the same id summarizes again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: OrderedDict[str, str] = OrderedDict()

    @staticmethod
    def key(pruned: Sequence[Any]) -> str | None:
        """The key of a cut pruning `pruned`; None when its content has no JSON text (a
        circular structure, say): such a cut is summarized every time."""
        try:  # a message without an id is known by its content, in JSON text too
            payload = [
                [message_identity(m), role_of(m), _get(m, "content"), _get(m, "tool_calls")]
                for m in pruned
            ]
            text = sorted_json(payload, ensure_ascii=False, default=_jsonable)
        except (TypeError, ValueError, RecursionError):
            return None
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            text = self._texts.get(key)
            if text is not None:
                self._texts.move_to_end(key)
            return text

    def put(self, key: str, text: str | None) -> None:
        if text is None:  # a failed call is tried again on the next cut
            return
        with self._lock:
            self._texts[key] = text
            self._texts.move_to_end(key)
            while len(self._texts) > SUMMARIES:
                self._texts.popitem(last=False)


def marked(message: Any) -> Any:
    """Return `message` carrying `SUMMARY_MARKER` in its ``response_metadata``; the
    factory's dicts and LangChain messages are copied, not changed. A look-alike without a
    ``response_metadata`` mapping is returned unmarked (see `is_summary`)."""
    meta = _get(message, "response_metadata")
    stamped = {**(meta if isinstance(meta, Mapping) else {}), SUMMARY_MARKER: True}
    if is_mapping(message):
        return {**message, "response_metadata": stamped}
    if not isinstance(meta, Mapping):
        return message
    model_copy = getattr(message, "model_copy", None)
    if callable(model_copy):  # a LangChain message
        return model_copy(update={"response_metadata": stamped})
    duplicate = copy.copy(message)
    try:
        duplicate.response_metadata = stamped
    except (AttributeError, TypeError):
        return message
    return duplicate


def is_summary(message: Any) -> bool:
    """Whether `message` is a summary message a reducer injected: it carries
    `SUMMARY_MARKER` (see `marked`), which a checkpoint keeps, in any process."""
    meta = _get(message, "response_metadata")
    return isinstance(meta, Mapping) and meta.get(SUMMARY_MARKER) is True


def legacy_block(messages: Sequence[Any]) -> range:
    """The indices of a summary block injected before the marker (0.6.0 pre-releases).

    Such a block is known by the ids `summary_block` gives (``summary-``, 24 hex digits,
    ``-`` and the position in the block) together with the text the default factory gave
    its first message, a human message beginning ``Summary of the <n> earlier messages``;
    only where a cut places a block, at index 0 or 1 (after a preserved first message), its
    positions counting up from 0 under one hash. An id alone is no evidence: a user's
    message may have one of that shape. A block a custom factory built then, and a message
    elsewhere with such an id, are ordinary messages.
    """
    for first in (0, 1):
        if first >= len(messages):
            break
        head = messages[first]
        found = id_of(head)
        if found is None or not _SUMMARY_ID.fullmatch(found) or not found.endswith("-0"):
            continue
        content = _get(head, "content")
        if (
            role_of(head) != HUMAN
            or not isinstance(content, str)
            or not _LEGACY_TEXT.match(content)
        ):
            continue
        prefix = found[:-1]
        end = first + 1
        while end < len(messages) and id_of(messages[end]) == f"{prefix}{end - first}":
            end += 1
        return range(first, end)
    return range(0)


def default_summary_messages_factory(summary: str, pruned_count: int) -> list[Any]:
    """Build the default injected block: a human message with the summary and an ai "OK".

    The pair keeps roles alternating after the system prompt, and being ordinary human and
    ai messages at the front of the window, the next cut prunes them and rolls them into
    the next summary.

    Args:
        summary: The text `summarize_fn` returned.
        pruned_count: How many messages it summarizes.

    Returns:
        Two message dicts; the reducer converts them to the input's message type.
    """
    return [
        {
            "role": "human",
            "content": f"Summary of the {pruned_count} earlier messages: {summary}",
        },
        {"role": "ai", "content": "OK"},
    ]


def summary_size(factory: SummaryMessageFactory | None) -> int:
    """How many messages `factory` injects, so a cut can leave room for them before
    `summarize_fn` has run: the block is built from an empty summary of nothing."""
    return len(_built(factory, "", 0))


def _built(factory: SummaryMessageFactory | None, summary: str, count: int) -> list[Any]:
    """The block `factory` (None: the default) builds, which must be a list of messages."""
    block = (factory or default_summary_messages_factory)(summary, count)
    if not isinstance(block, (list, tuple)):
        raise TypeError(
            f"summary_message_factory returned {block!r}, not a list of messages; return the "
            "messages to inject, e.g. [{'role': 'human', 'content': summary}]"
        )
    return list(block)


def summary_block(
    summary: str,
    pruned: Sequence[Any],
    messages: Sequence[Any],
    factory: SummaryMessageFactory | None,
) -> list[Any]:
    """Return the messages to inject, of the same kind as `messages`, each with an id and
    `SUMMARY_MARKER` (see `marked`).

    Ids are derived from the pruned messages, so planning the same cut twice (a retried
    checkpoint write) injects the same ids.
    """
    block = _built(factory, summary, len(pruned))
    if kind_of(messages) == "langchain":
        block = [to_langchain_message(m) if isinstance(m, Mapping) else m for m in block]
    seed = hashlib.sha256("\n".join(message_identity(m) for m in pruned).encode("utf-8"))
    prefix = SUMMARY_ID_PREFIX + seed.hexdigest()[:24]
    return [with_id(marked(m), f"{prefix}-{i}") for i, m in enumerate(block)]
