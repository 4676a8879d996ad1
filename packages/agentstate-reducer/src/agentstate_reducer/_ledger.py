"""Which messages each hook has received: the `DeliveryLedger` protocol and its default."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, Protocol, runtime_checkable

from ._messages import json_key, mixed_key_order


@runtime_checkable
class DeliveryLedger(Protocol):
    """Records which message identities each hook has received, per namespace.

    A reducer calls `seen` before a hook runs and `mark` only after it returned. A durable
    implementation (a database table keyed by hook, namespace and id) makes delivery
    exactly-once across restarts. Methods may be called from worker threads.

    `namespace` is passed as the caller gave it. `InMemoryLedger` keys it by its JSON text
    (`namespace_key`, `namespace_json`): a list and a tuple of the same items are the same
    namespace, and so are a set and a frozenset, whatever their order; ``1``, ``True`` and
    ``1.0`` are three. A durable ledger should key it alike.
    """

    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        """Return the subset of `message_ids` already delivered to `hook_key` in `namespace`."""
        ...

    def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        """Record `message_ids` as delivered to `hook_key` in `namespace`."""
        ...


@runtime_checkable
class AsyncDeliveryLedger(Protocol):
    """A ledger's event-loop side: `adeliver` awaits these instead of blocking the loop.

    A `DeliveryLedger` that keeps its records over the network (a database, Redis) should
    also have them; without them `adeliver` calls `seen` and `mark` inline. Worker threads
    (`Background` hooks) keep calling the blocking pair.
    """

    async def aseen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        """Return the subset of `message_ids` already delivered to `hook_key` in `namespace`."""
        ...

    async def amark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        """Record `message_ids` as delivered to `hook_key` in `namespace`."""
        ...


_AS_JSON = object()  # heads the key of a namespace kept as its JSON text (no caller's value)


class _HoldsSet(Exception):
    """Raised out of `json.dumps` by `_str_unless_set` at the first set it meets."""


def _str_unless_set(value: Any) -> str:
    if isinstance(value, (set, frozenset)):
        raise _HoldsSet
    return str(value)


def namespace_json(namespace: Any) -> str:
    """The JSON text of `namespace`, the same in every process.

    Keys sorted, no spaces, and `str` of a value JSON has no type for. A set or frozenset
    (at any depth) reads as ``set[...]``, its items' texts sorted: `str` would order them
    by the process's string hash seed (``PYTHONHASHSEED``). No JSON text holds ``set[``,
    so a set never reads as a list, a tuple or a string, and a namespace without a set
    reads exactly as `json.dumps` writes it. A dict whose keys do not compare (``1`` and
    ``"a"``), which `json.dumps` cannot sort, has them ordered by their JSON text, then by
    their type's name. A durable ledger should key namespaces by it;
    `agentstate_reducer_langgraph`'s Redis keys are built from it.
    """
    try:
        return json.dumps(namespace, sort_keys=True, separators=(",", ":"), default=_str_unless_set)
    except _HoldsSet:
        pass
    except TypeError:  # a dict whose keys `sort_keys` cannot order (1 and "a"), at any depth
        if not isinstance(namespace, (dict, list, tuple)):
            raise
    if isinstance(namespace, (set, frozenset)):
        return "set[" + ",".join(sorted(namespace_json(item) for item in namespace)) + "]"
    if isinstance(namespace, (tuple, list)):
        return "[" + ",".join(namespace_json(item) for item in namespace) + "]"
    try:  # as `sort_keys` sorts them
        items = sorted(namespace.items(), key=lambda item: item[0])
    except TypeError:  # keys of types that do not compare (1 and "a"): by their JSON text
        items = sorted(namespace.items(), key=lambda item: mixed_key_order(item[0]))
    return "{" + ",".join(f"{json_key(k)}:{namespace_json(v)}" for k, v in items) + "}"


def namespace_key(namespace: Any) -> Hashable:
    """Return a hashable stand-in for `namespace`, keying namespaces apart exactly where a
    durable ledger that stores their JSON text does.

    A tuple or list of strings, the usual ``("memories", user_id)``, is the tuple of its
    parts. Anything else is its JSON text (`namespace_json`: lists and tuples alike, and
    sets and frozensets alike in any order, at any depth, so a namespace that made a JSON
    round trip is the same namespace and its messages are not delivered again), behind a
    marker no namespace can hold: ``1``, ``True`` and ``1.0`` stay three namespaces
    (Python's equality would make them one), and no tuple of strings reads as another
    value's JSON text.
    """
    if isinstance(namespace, (tuple, list)) and all(isinstance(part, str) for part in namespace):
        return tuple(namespace)
    return (_AS_JSON, namespace_json(namespace))


class InMemoryLedger:
    """A `DeliveryLedger` in a bounded LRU map; forgets the least recently used entries.

    Args:
        max_entries: How many (hook, namespace, id) entries to keep.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"InMemoryLedger max_entries={max_entries!r} must be an int >= 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, Hashable, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        """Return the subset of `message_ids` already delivered to `hook_key` in `namespace`."""
        ns = namespace_key(namespace)
        found: set[str] = set()
        with self._lock:
            for message_id in message_ids:
                key = (hook_key, ns, message_id)
                if key in self._entries:
                    self._entries.move_to_end(key)
                    found.add(message_id)
        return found

    def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        """Record `message_ids` as delivered to `hook_key` in `namespace`."""
        ns = namespace_key(namespace)
        with self._lock:
            for message_id in message_ids:
                key = (hook_key, ns, message_id)
                self._entries[key] = None
                self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"InMemoryLedger(max_entries={self.max_entries}, entries={len(self)})"
