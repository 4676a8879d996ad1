"""Namespace tags: every namespace gets its own, and a tag decodes back to its namespace."""

from __future__ import annotations

import json
import re
from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstate_reducer._ledger import namespace_key
from agentstate_reducer_langgraph import RedisDeliveryLedger
from agentstate_reducer_langgraph._keys import DeliveryKeys, namespace_tag, tag_of

_ESCAPED = re.compile(r"(?:[^%:{}*?\[\]\\=\x00-\x20\x7f]|%[0-9A-F]{2})*")

TRICKY: list[Any] = [
    (),
    ("",),
    ("", ""),
    ("", "", ""),
    ("%",),
    ("%%",),
    ("%25",),
    ("a", ""),
    ("", "a"),
    ("a:",),
    ("a", ":"),
    (":",),
    ("a:b",),
    ("a", "b"),
    ("=",),
    ("=null",),
    ("{x}",),
    (" ",),
    "",
    ":",
    None,
    [],
    [""],
    [1],
    ["", 1],
    {"": ""},
]


def unescape(text: str) -> str:
    assert _ESCAPED.fullmatch(text), f"{text!r} holds a character escape() never leaves"
    return re.sub(r"%([0-9A-F]{2})", lambda m: chr(int(m.group(1), 16)), text)


def decode(tag: str) -> Any:
    """The namespace of `tag`: the inverse of `namespace_tag`, so tags never collide."""
    if tag == "%":
        return ()
    if tag == "%%":
        return ("",)
    if tag.startswith("="):
        return json.loads(unescape(tag[1:]))
    return tuple(unescape(part) for part in tag.split(":"))


def canonical(namespace: Any) -> Any:
    """What `namespace` is the same namespace as: a list of strings is that tuple."""
    if isinstance(namespace, (tuple, list)) and all(isinstance(p, str) for p in namespace):
        return tuple(namespace)
    return json.loads(json.dumps(namespace, sort_keys=True))


def check(namespace: Any) -> str:
    tag = namespace_tag(namespace)
    assert tag and "{" not in tag and "}" not in tag
    assert tag_of(DeliveryKeys("app").ledger(namespace)) == tag  # a cluster slot of its own
    assert decode(tag) == canonical(namespace)
    return tag


def test_tricky_namespaces_each_get_a_tag_of_their_own() -> None:
    tags = {repr(canonical(ns)): check(ns) for ns in TRICKY}
    assert len(set(tags.values())) == len(tags), tags
    assert namespace_tag(()) != namespace_tag(("",))
    assert namespace_tag(()) == "%" and namespace_tag(("",)) == "%%"


def test_other_tags_are_unchanged() -> None:
    assert namespace_tag(("memories", "u1")) == "memories:u1"
    assert namespace_tag(["memories", "u1"]) == "memories:u1"
    assert namespace_tag(("", "")) == ":"
    assert namespace_tag(("a", "")) == "a:"
    assert namespace_tag(("a:b",)) == "a%3Ab"
    assert namespace_tag(("%",)) == "%25"
    assert namespace_tag(None) == "=null"


_PARTS = st.text(alphabet=st.sampled_from("a%:={} 0\\") | st.characters(), max_size=6)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
NAMESPACES = st.lists(_PARTS, max_size=4).map(tuple) | st.lists(_PARTS, max_size=3) | _JSON


@settings(max_examples=300, deadline=None)
@given(NAMESPACES, NAMESPACES)
def test_a_tag_decodes_back_so_distinct_namespaces_never_collide(first: Any, second: Any) -> None:
    # compared as JSON: Python holds [False] and [0] equal, but they are distinct namespaces
    same = json.dumps(canonical(first), sort_keys=True) == json.dumps(
        canonical(second), sort_keys=True
    )
    if not same:
        assert check(first) != check(second)
    else:
        assert check(first) == check(second)


# Few values that Python's equality (or an earlier stand-in) takes for one another, so that
# two draws often meet.
_ALIKE = st.recursive(
    st.sampled_from([0, 1, True, False, 0.0, 1.0, -0.0, None, "1", "true", "json", '{"a": 1}'])
    | st.just({"a": 1}),
    lambda inner: st.lists(inner, max_size=2).map(tuple) | st.lists(inner, max_size=2),
    max_leaves=3,
)


@settings(max_examples=300, deadline=None)
@given(NAMESPACES | _ALIKE, _ALIKE)
def test_the_in_memory_ledger_keys_namespaces_apart_as_the_redis_ledger_does(
    first: Any, second: Any
) -> None:
    """`InMemoryLedger` and the retry buffer (`namespace_key`) take two namespaces for one
    exactly when `RedisDeliveryLedger` does: a hook moved from one ledger to the other
    neither gets a message again nor loses one (``1``, ``True`` and ``1.0`` were one
    namespace in memory and three in Redis)."""
    same_tag = namespace_tag(first) == namespace_tag(second)
    assert (namespace_key(first) == namespace_key(second)) is same_tag


def test_a_delivery_in_the_empty_namespace_is_not_one_in_the_empty_part(
    client: redis.Redis, prefix: str
) -> None:
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    ledger.mark("hook", (), ["m1"])
    assert ledger.seen("hook", ("",), ["m1"]) == set()
    assert ledger.seen("hook", (), ["m1"]) == {"m1"}
    ledger.mark("hook", ("",), ["m2"])
    assert ledger.seen("hook", (), ["m2"]) == set()
    assert ledger.keys.ledger(()) != ledger.keys.ledger(("",))
