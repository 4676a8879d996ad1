"""Set namespaces: keyed alike in every process, whatever the string hash seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from agentstate_reducer import InMemoryLedger, MessageReducer, ReducerConfig
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


# Texts a durable ledger has keyed namespaces by: they must never change, or every message
# delivered under them would be delivered again.
PINNED = [
    (None, "null"),
    (("memories", "u1"), '["memories","u1"]'),
    (["memories", 7, 1.5, True, None], '["memories",7,1.5,true,null]'),
    ({"user": "u1", "org": "o"}, '{"org":"o","user":"u1"}'),
    ({10: "a", 9: "b", 2.5: "c", False: "d"}, '{"false":"d","2.5":"c","9":"b","10":"a"}'),
    ({"b": [1, {"a": None}], "a": (2, "é")}, '{"a":[2,"\\u00e9"],"b":[1,{"a":null}]}'),
    ({"t": {"b", "a"}, "u": 1}, '{"t":set["a","b"],"u":1}'),
    ({2: frozenset({3, 1}), 10: "x"}, '{"2":set[1,3],"10":"x"}'),
    ([{"deep": {1, "a"}}], '[{"deep":set["a",1]}]'),
    ({"o": object.__new__(type("Odd", (), {"__str__": lambda self: "odd"}))}, '{"o":"odd"}'),
]


def test_namespace_texts_a_durable_ledger_keys_on_never_change() -> None:
    for namespace, text in PINNED:
        assert namespace_json(namespace) == text, namespace


def test_a_dict_namespace_with_keys_of_mixed_types_has_a_stable_text() -> None:
    """`json.dumps(sort_keys=True)` cannot order 1 and "user": reduce() raised TypeError."""
    assert namespace_json({"user": 1, 2: "x"}) == '{"2":"x","user":1}'
    assert namespace_json({2: "x", "user": 1}) == namespace_json({"user": 1, 2: "x"})
    # 1 and "1" write the same key: the int goes first, whatever the insertion order
    assert namespace_json({"1": "s", 1: "i"}) == '{"1":"i","1":"s"}'
    assert namespace_json({1: "i", "1": "s"}) == '{"1":"i","1":"s"}'
    assert namespace_json({None: 0, "a": {3: {"z"}, "b": 1}}) == (
        '{"a":{"3":set["z"],"b":1},"null":0}'
    )
    assert namespace_json([{"k": 1, 0: 2}]) == '[{"0":2,"k":1}]'
    ledger = InMemoryLedger()
    ledger.mark("hook", {"user": 1, 2: "x"}, ["m1"])
    assert ledger.seen("hook", {2: "x", "user": 1}, ["m1"]) == {"m1"}


def test_reduce_delivers_under_a_namespace_with_mixed_keys() -> None:
    got: list[Any] = []
    config = ReducerConfig(min_messages=1, max_messages=2, on_prune=[lambda p, ns: got.append(ns)])
    messages = [{"role": "user", "content": str(i), "id": str(i)} for i in range(4)]
    result = MessageReducer(config=config).reduce(messages, namespace={"user": 1, 2: "x"})
    assert result.delivery is not None and result.delivery.ok
    assert got == [{"user": 1, 2: "x"}]
