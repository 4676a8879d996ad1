"""Set namespaces: keyed alike in every process, whatever the string hash seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from agentstate_reducer import InMemoryLedger
from agentstate_reducer._ledger import namespace_json, namespace_key

TAGS = frozenset({"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"})

# Each process renders these; `str` of a set ordered them by the process's hash seed.
CHILD = """
import json
from agentstate_reducer._ledger import namespace_key

TAGS = frozenset({"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"})
NAMESPACES = [
    {"user": "u1", "tags": TAGS},
    ("memories", TAGS),
    set(TAGS),
    [{"deep": [TAGS, {frozenset({"x", "y", "z"}), "w"}]}],
]
print(json.dumps([namespace_key(ns)[1] for ns in NAMESPACES]))
"""


def render_in_process(seed: str) -> Any:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_set_namespace_is_keyed_alike_in_every_process() -> None:
    """`namespace_key` rendered a set with `str`, whose order follows ``PYTHONHASHSEED``:
    a process keyed the namespace apart from every other, so a durable ledger delivered its
    messages again."""
    renderings = {seed: render_in_process(seed) for seed in ("0", "1", "2", "3")}
    assert len({json.dumps(r) for r in renderings.values()}) == 1, renderings
    assert renderings["0"][0] == (
        '{"tags":set["alpha","beta","delta","epsilon","eta","gamma","theta","zeta"],"user":"u1"}'
    )
    assert renderings["0"][0] == namespace_json({"user": "u1", "tags": set(TAGS)})


def test_a_namespace_without_a_set_renders_as_it_always_did() -> None:
    for namespace in [None, 1, True, 1.5, "x", [1, "a"], {"b": [1, {"a": None}], "a": 2}]:
        want = json.dumps(namespace, sort_keys=True, separators=(",", ":"), default=str)
        assert namespace_json(namespace) == want
        assert namespace_key(namespace) == namespace_key(json.loads(want))
    assert namespace_key(("memories", "u1")) == ("memories", "u1")


def test_a_set_is_one_namespace_in_any_order_and_never_a_list_or_a_string() -> None:
    assert namespace_key({"b", "a"}) == namespace_key(frozenset({"a", "b"}))
    assert namespace_key({"t": {"a", "b"}}) == namespace_key({"t": frozenset({"b", "a"})})
    apart = [
        frozenset({"a", "b"}),
        ("a", "b"),  # a list of the same items is this namespace too
        '["a","b"]',
        'set["a","b"]',
        "{'a', 'b'}",
        "frozenset({'a', 'b'})",
        frozenset({("a", "b")}),
        frozenset({"a,b"}),
        frozenset({frozenset({"a", "b"})}),
        frozenset(),
        [],
        "set[]",
        frozenset({1}),
        frozenset({True}),
        frozenset({1.0}),
        frozenset({"1"}),
    ]
    keys = [namespace_key(ns) for ns in apart]
    assert len(set(keys)) == len(keys), keys


def test_the_in_memory_ledger_finds_a_set_namespace_marked_in_another_order() -> None:
    ledger = InMemoryLedger()
    ledger.mark("hook", {"user": "u1", "tags": TAGS}, ["m1"])
    again = {"tags": set(sorted(TAGS, reverse=True)), "user": "u1"}
    assert ledger.seen("hook", again, ["m1", "m2"]) == {"m1"}
    assert ledger.seen("hook", {"user": "u1", "tags": sorted(TAGS)}, ["m1"]) == set()
