"""The Redis key layout of durable delivery. Every key is built here and nowhere else.

Layout (``P`` = prefix, ``B`` = batch id, ``NS`` = namespace tag, see `namespace_tag`)::

    P:outbox:{P}:due       zset    staged batches; score = ms when a drain may claim it
    P:outbox:{P}:b:B       hash    one batch: payload, checkpoint, staged-at, failures; kept a
                                   day once discarded (field "d"), out of the due set
    P:outbox:{P}:stats     hash    counters: staged, delivered, failures, discarded
    P:ledger:{NS}          hash    field "hook:message id" -> ms it was delivered
    P:<kind>:{NS}          any     a sink's data beside its namespace's ledger, e.g. P:mem:{NS}

``NS`` of a tuple of strings is its escaped parts joined by ``:`` (``("memories", "u1")`` is
``memories:u1``), except ``()``, which is ``%``, and ``("",)``, which is ``%%``; any other
namespace is ``=`` and its escaped JSON, in which a set reads as ``set[...]``, its items
sorted. A tag decodes back to its namespace, so no two JSON namespaces share one (a list is
the tuple of the same items, a frozenset the set).

The outbox carries the hash tag ``{P}`` and each namespace the tag ``{NS}``, so on a
cluster the outbox scripts touch one slot and a sink's writes share a slot with the
ledger entries they are recorded with. The Lua scripts receive the batch-key prefix
from `DeliveryKeys.batch_prefix` and append ``B``; that is the only concatenation
outside this module.
"""

from __future__ import annotations

from typing import Any

from agentstate_reducer import namespace_json

__all__ = ["DeliveryKeys", "escape", "namespace_tag", "tag_of"]

SEP = ":"
# Characters that would make a key ambiguous (":"), move the cluster hash tag ("{", "}"),
# act as glob metacharacters in SCAN MATCH ("*?[]\\"), start an escape ("%") or mark a
# JSON-rendered namespace ("="). Control characters and space are escaped too.
_SPECIAL = frozenset("%:{}*?[]\\=") | frozenset(chr(i) for i in range(0x21)) | {"\x7f"}
# An escaped string never holds a "%" without two hex digits after it, so these two tags
# are no join of escaped parts: "%" is the empty tuple namespace, "%%" the one empty part.
EMPTY = "%"
EMPTY_PART = "%%"


def escape(value: str) -> str:
    """Escapes `value` so it holds no separator, brace, glob, `=` or control character."""
    if not any(ch in _SPECIAL for ch in value):
        return value
    return "".join(f"%{ord(ch):02X}" if ch in _SPECIAL else ch for ch in value)


def namespace_tag(namespace: Any) -> str:
    """The hash-tag text of a memory namespace, the same in every process.

    A tuple (or list) of strings, the usual ``("memories", user_id)``, reads as its escaped
    parts joined by ``:``, except ``()``, which is ``%``, and ``("",)``, which is ``%%`` (both
    would join to the empty string); anything else is ``=`` and its escaped JSON text
    (`agentstate_reducer.namespace_json`, which the in-memory ledger keys by too: a set
    reads as ``set[...]``, its items sorted). The tag decodes back to
    its namespace, so two namespaces of JSON values never share one (a list is the tuple
    of the same items, a frozenset the set; other values are rendered with `str`).
    """
    if isinstance(namespace, (tuple, list)) and all(isinstance(p, str) for p in namespace):
        if not namespace:
            return EMPTY
        return SEP.join(escape(part) for part in namespace) or EMPTY_PART
    return "=" + escape(namespace_json(namespace))


def tag_of(key: str) -> str | None:
    """The cluster hash tag of `key` (the text between its first ``{`` and the next ``}``)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    if start < 0 or end <= start + 1:
        return None
    return key[start + 1 : end]


class DeliveryKeys:
    """Builds every key of one delivery keyspace.

    Args:
        prefix: The first component of every key, without a trailing ``:``.
    """

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__} {prefix!r}")
        if not prefix:
            raise ValueError("prefix must not be empty; pass e.g. prefix='agentstate'")
        bad = sorted({ch for ch in prefix if ch in "{}*?[]\\" or ord(ch) <= 0x20})
        if bad:
            raise ValueError(
                f"prefix {prefix!r} contains {''.join(bad)!r}; braces would move the cluster "
                "hash tag and glob characters break SCAN patterns: use letters, digits, "
                "'-', '_', '.' and ':' (e.g. 'myapp:memory')"
            )
        if prefix.endswith(SEP):
            raise ValueError(
                f"prefix {prefix!r} ends with {SEP!r}; the separator is added for you: "
                f"pass {prefix.rstrip(SEP)!r}"
            )
        self.prefix = prefix

    def _outbox(self, tail: str) -> str:
        return f"{self.prefix}{SEP}outbox{SEP}{{{self.prefix}}}{SEP}{tail}"

    @property
    def due(self) -> str:
        """The zset of staged batches, scored by when they may be claimed."""
        return self._outbox("due")

    @property
    def stats(self) -> str:
        """The hash of outbox counters."""
        return self._outbox("stats")

    @property
    def batch_prefix(self) -> str:
        """Prefix of batch keys; a script appends the batch id."""
        return self._outbox(f"b{SEP}")

    def batch(self, batch_id: str) -> str:
        return f"{self.batch_prefix}{batch_id}"

    def namespaced(self, kind: str, namespace: Any) -> str:
        """A key of `kind` in the hash slot of `namespace`, e.g. ``P:mem:{memories:u1}``."""
        if not kind or any(ch in _SPECIAL for ch in kind):
            raise ValueError(
                f"key kind {kind!r} must be a non-empty word without ':', braces, '%', '=' "
                "or spaces, e.g. 'mem'"
            )
        return f"{self.prefix}{SEP}{kind}{SEP}{{{namespace_tag(namespace)}}}"

    def ledger(self, namespace: Any) -> str:
        """The ledger hash of `namespace`."""
        return self.namespaced("ledger", namespace)

    @staticmethod
    def ledger_field(hook_key: str, message_id: str) -> str:
        """The field recording that `hook_key` received `message_id`."""
        return f"{escape(hook_key)}{SEP}{message_id}"

    @property
    def pattern(self) -> str:
        """A SCAN pattern matching every key of this keyspace."""
        return f"{self.prefix}{SEP}*"
