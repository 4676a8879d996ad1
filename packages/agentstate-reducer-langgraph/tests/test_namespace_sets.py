"""Set namespaces: one tag in every process, whatever the string hash seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstate_reducer._ledger import namespace_key
from agentstate_reducer_langgraph import RedisDeliveryLedger
from agentstate_reducer_langgraph._keys import DeliveryKeys, namespace_tag, tag_of

SEEDS = ("0", "1", "2", "3")

# Each child renders these; `str` of a set ordered its items by the process's hash seed.
TAGS = """frozenset({"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"})"""
NAMESPACES = f"""[
    {{"user": "u1", "tags": {TAGS}}},
    ("memories", {TAGS}),
    set({TAGS}),
    [{{"deep": [{TAGS}, {{frozenset({{"x", "y", "z"}}), "w"}}]}}],
]"""
TAG_CHILD = f"""
import json
from agentstate_reducer_langgraph._keys import namespace_tag
print(json.dumps([namespace_tag(ns) for ns in {NAMESPACES}]))
"""
LEDGER_CHILD = f"""
import json, sys
import redis
from agentstate_reducer_langgraph import RedisDeliveryLedger
url, prefix, action = sys.argv[1:]
ledger = RedisDeliveryLedger(redis.Redis.from_url(url, protocol=2), prefix=prefix)
namespace = {{"user": "u1", "tags": {TAGS}}}
if action == "mark":
    ledger.mark("hook", namespace, ["m1"])
else:
    print(json.dumps(sorted(ledger.seen("hook", namespace, ["m1", "m2"]))))
"""


def run(seed: str, code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_set_namespace_gets_one_tag_in_every_process() -> None:
    """`namespace_tag` rendered a set with `str`, whose order follows ``PYTHONHASHSEED``:
    each process had its own ledger key for the namespace."""
    tags = {seed: run(seed, TAG_CHILD) for seed in SEEDS}
    assert len(set(tags.values())) == 1, tags
    first = json.loads(tags["0"])[0]
    assert first == (
        '=%7B"tags"%3Aset%5B"alpha","beta","delta","epsilon","eta","gamma","theta","zeta"%5D,'
        '"user"%3A"u1"%7D'
    )


def test_a_delivery_recorded_by_one_process_is_found_by_another(
    server_url: str, client: redis.Redis, prefix: str
) -> None:
    """A worker marked a message delivered in a set namespace; a worker with another hash
    seed asked the ledger under another key, found nothing and delivered it again."""
    run("1", LEDGER_CHILD, server_url, prefix, "mark")
    for seed in ("2", "3"):
        assert json.loads(run(seed, LEDGER_CHILD, server_url, prefix, "seen")) == ["m1"]
    [key] = client.keys(f"{prefix}:*")
    tags = {"theta", "zeta", "eta", "epsilon", "delta", "gamma", "beta", "alpha"}
    keys = RedisDeliveryLedger(client, prefix=prefix).keys
    assert key.decode() == keys.ledger({"tags": tags, "user": "u1"})


def test_tags_without_a_set_are_unchanged() -> None:
    assert namespace_tag({"user": "u1", "tags": ["a", "b"]}) == (
        '=%7B"tags"%3A%5B"a","b"%5D,"user"%3A"u1"%7D'
    )
    assert namespace_tag(["memories", 1]) == '=%5B"memories",1%5D'
    assert namespace_tag("set[]") == '="set%5B%5D"'


def test_a_set_never_tags_as_a_list_a_tuple_or_a_string() -> None:
    """Chosen rendering: ``set[...]``, which no JSON text holds, so no value without a set
    can read as it (a marker inside JSON, such as ``{"$set": [...]}``, is some dict's JSON)."""
    apart = [
        frozenset({"a", "b"}),
        ("a", "b"),
        ["a", 1],
        '["a","b"]',
        'set["a","b"]',
        "{'a', 'b'}",
        "frozenset({'a', 'b'})",
        {"$set": ["a", "b"]},
        frozenset({("a", "b")}),
        frozenset({frozenset({"a", "b"})}),
        frozenset({"a,b"}),
        frozenset(),
        (),
        "set[]",
        frozenset({1}),
        frozenset({True}),
        frozenset({1.0}),
        frozenset({"1"}),
    ]
    tags = [namespace_tag(ns) for ns in apart]
    assert len(set(tags)) == len(tags), tags
    assert namespace_tag({"a", "b"}) == namespace_tag(frozenset({"b", "a"}))
    assert namespace_tag(["a", "b"]) == namespace_tag(("a", "b"))


def canonical(namespace: Any) -> Any:
    """What `namespace` is the same namespace as: lists are tuples, frozensets sets, and
    leaves their JSON text (``1``, ``True`` and ``1.0`` are three namespaces)."""
    if isinstance(namespace, (set, frozenset)):
        return ("set", frozenset(canonical(item) for item in namespace))
    if isinstance(namespace, (list, tuple)):
        return ("list", tuple(canonical(item) for item in namespace))
    if isinstance(namespace, dict):
        return ("dict", frozenset((key, canonical(v)) for key, v in namespace.items()))
    return ("leaf", json.dumps(namespace))


_LEAVES = st.sampled_from([0, 1, True, False, 1.0, -0.0, None, "", "a", "b", "1", "set[]"])
_HASHABLE = st.recursive(
    _LEAVES,
    lambda inner: st.frozensets(inner, max_size=3) | st.lists(inner, max_size=2).map(tuple),
    max_leaves=5,
)
_WITH_SETS = st.recursive(
    _HASHABLE | st.sets(_HASHABLE, max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.sampled_from(["a", "b", "tags"]), inner, max_size=2)
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(_WITH_SETS, _WITH_SETS)
def test_namespaces_with_sets_key_alike_in_memory_and_in_redis(first: Any, second: Any) -> None:
    """`InMemoryLedger` (`namespace_key`) and `RedisDeliveryLedger` (`namespace_tag`) take two
    namespaces for one exactly when they are one: lists and tuples alike, sets and frozensets
    alike in any order."""
    same = canonical(first) == canonical(second)
    assert (namespace_tag(first) == namespace_tag(second)) is same
    assert (namespace_key(first) == namespace_key(second)) is same
    tag = namespace_tag(first)
    assert tag and "{" not in tag and "}" not in tag
    assert tag_of(DeliveryKeys("app").ledger(first)) == tag
