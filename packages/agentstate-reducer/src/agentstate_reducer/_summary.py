"""The summary messages injected in place of a cut."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ._config import SummaryMessageFactory
from ._messages import (
    _get,
    _jsonable,
    id_of,
    kind_of,
    message_identity,
    role_of,
    to_langchain_message,
    with_id,
)

SUMMARY_ID_PREFIX = "summary-"
# The ids `summary_block` gives: the prefix, 24 hex digits of the pruned messages' hash, the
# message's position in the block.
_SUMMARY_ID = re.compile(re.escape(SUMMARY_ID_PREFIX) + r"[0-9a-f]{24}-[0-9]+")

# How many cuts' summaries a reducer remembers (see `Summaries`).
SUMMARIES = 64


class Summaries:
    """The summary text of the last `SUMMARIES` cuts, by what they pruned.

    A caller that plans the same list again (each put of a LangGraph run cuts the run's
    whole list in memory, so every put after a cut prunes the same messages) gets the text
    `summarize_fn` returned for those messages instead of a new call. The key is each
    pruned message's identity and content, so an edit under the same id summarizes again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: OrderedDict[str, str] = OrderedDict()

    @staticmethod
    def key(pruned: Sequence[Any]) -> str | None:
        """The key of a cut pruning `pruned`; None when its content has no JSON text (a
        dict with keys of mixed types, say): such a cut is summarized every time."""
        try:  # a message without an id is known by its content, in JSON text too
            payload = [
                [message_identity(m), role_of(m), _get(m, "content"), _get(m, "tool_calls")]
                for m in pruned
            ]
            text = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=_jsonable)
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


class Injected:
    """Tells the summary messages a reducer injected, so that a cut treats them as no human
    turn and no preserved first message, only as the front of the window it prunes.

    A message is one when it carries an id `summary_block` gives (``summary-``, 24 hex
    digits, ``-`` and its position: read back from a checkpoint, in any process), or the
    identity of a message this reducer injected, among its last `SUMMARIES` cuts' blocks
    (a `summary_message_factory` that sets its own ids). Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocks: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._ids: dict[str, int] = {}  # identity -> how many remembered blocks hold it
        self._hashed = 0  # identities among them of messages without an id

    def add(self, block: Sequence[Any]) -> None:
        """Remember the identities of an injected `block`."""
        ids = tuple(message_identity(m) for m in block)
        with self._lock:
            if ids in self._blocks:
                self._blocks.move_to_end(ids)
                return
            self._blocks[ids] = None
            for identity in ids:
                if identity not in self._ids:
                    self._hashed += identity.startswith("sha256:")
                self._ids[identity] = self._ids.get(identity, 0) + 1
            while len(self._blocks) > SUMMARIES:
                for identity in self._blocks.popitem(last=False)[0]:
                    self._ids[identity] -= 1
                    if not self._ids[identity]:
                        del self._ids[identity]
                        self._hashed -= identity.startswith("sha256:")

    def __call__(self, message: Any) -> bool:
        message_id = id_of(message)
        if message_id is not None:
            if _SUMMARY_ID.fullmatch(message_id):
                return True
            with self._lock:
                return message_id in self._ids
        if not self._hashed:  # no id-less block remembered: spare hashing the message
            return False
        identity = message_identity(message)
        with self._lock:
            return identity in self._ids


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
    """Return the messages to inject, of the same kind as `messages`, each with an id.

    Ids are derived from the pruned messages, so planning the same cut twice (a retried
    checkpoint write) injects the same ids.
    """
    block = _built(factory, summary, len(pruned))
    if kind_of(messages) == "langchain":
        block = [to_langchain_message(m) if isinstance(m, Mapping) else m for m in block]
    seed = hashlib.sha256("\n".join(message_identity(m) for m in pruned).encode("utf-8"))
    prefix = SUMMARY_ID_PREFIX + seed.hexdigest()[:24]
    return [with_id(m, f"{prefix}-{i}") for i, m in enumerate(block)]
