"""The public surface: names, compatibility with 0.5.0, no framework imports, the shim."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

import agentstate_reducer
from agentstate_reducer import (
    DEFAULT_NAMESPACE_KEY,
    Background,
    MessageReducer,
    ReducerConfig,
    ReducerResult,
)

NAMES_IN_0_5_0 = {
    "MessageReducer",
    "ReducerConfig",
    "ReducerResult",
    "RememberFn",
    "Background",
    "DEFAULT_NAMESPACE_KEY",
    "resolve_token_counter",
    "default_summary_messages_factory",
}

FIELDS_IN_0_5_0 = [
    "min_messages",
    "max_messages",
    "max_tokens",
    "target_tokens",
    "token_counter",
    "preserve_first",
    "cascade_tool_messages",
    "summarize_fn",
    "inject_summary",
    "summary_message_factory",
    "on_prune",
    "namespace_key",
    "dedupe_on_prune",
    "dedupe_window",
]


def test_every_0_5_0_name_is_still_public() -> None:
    assert NAMES_IN_0_5_0 <= set(agentstate_reducer.__all__)
    for name in agentstate_reducer.__all__:
        assert getattr(agentstate_reducer, name) is not None
    assert DEFAULT_NAMESPACE_KEY == "memory_namespace"


def test_config_fields_keep_their_order_and_defaults() -> None:
    fields = [f.name for f in dataclasses.fields(ReducerConfig)]
    assert fields[: len(FIELDS_IN_0_5_0)] == FIELDS_IN_0_5_0
    config = ReducerConfig()
    assert (config.min_messages, config.max_messages, config.dedupe_window) == (10, 20, 10_000)
    assert config.preserve_first and config.dedupe_on_prune and config.require_human_first
    assert [f.name for f in dataclasses.fields(ReducerResult)][:3] == [
        "surviving",
        "pruned",
        "summary",
    ]


def test_the_0_5_0_constructor_forms_still_work() -> None:
    assert MessageReducer().config.max_messages is None
    assert MessageReducer(5, 10).max_messages == 10
    reducer = MessageReducer(config=ReducerConfig(min_messages=1, max_messages=2))
    assert reducer.min_messages == 1
    with pytest.warns(UserWarning, match="is ignored because config= is given"):
        MessageReducer(3, 4, config=ReducerConfig())


def test_the_readme_documents_every_config_field() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for field in dataclasses.fields(ReducerConfig):
        assert f"| `{field.name}` |" in readme, field.name


def test_sync_and_async_methods_are_parallel() -> None:
    methods = {n for n in dir(MessageReducer) if not n.startswith("_")}
    for name in ("plan", "deliver", "reduce"):
        assert name in methods and f"a{name}" in methods


def test_importing_the_package_loads_no_framework() -> None:
    code = textwrap.dedent(
        """
        import sys
        import agentstate_reducer as ar
        reducer = ar.MessageReducer(config=ar.ReducerConfig(
            min_messages=2, max_messages=3, summarize_fn=lambda p: "s", inject_summary=True,
            on_prune=[lambda p, ns: None],
        ))
        messages = [{"role": "user", "content": str(n), "id": str(n)} for n in range(5)]
        reducer.reduce(messages)
        reducer.as_langgraph_reducer()(messages, [{"type": "remove", "id": "0"}])
        loaded = [m for m in ("langchain_core", "langgraph", "tiktoken") if m in sys.modules]
        print(",".join(loaded))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.fixture
def fresh_shim() -> Any:
    """Imports of the shim in a test do not leak into later tests."""
    import agentstate_reducer

    saved = sys.modules.pop("agentstate_reducer.langgraph", None)
    had = agentstate_reducer.__dict__.pop("langgraph", None)
    yield
    sys.modules.pop("agentstate_reducer.langgraph", None)
    agentstate_reducer.__dict__.pop("langgraph", None)
    if saved is not None:
        sys.modules["agentstate_reducer.langgraph"] = saved
    if had is not None:
        agentstate_reducer.langgraph = had  # type: ignore[attr-defined]


@pytest.mark.usefixtures("fresh_shim")
def test_the_langgraph_shim_names_the_fix_when_the_extra_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "agentstate_reducer_langgraph", None)
    monkeypatch.delitem(sys.modules, "agentstate_reducer.langgraph", raising=False)
    with pytest.raises(ImportError, match=r'pip install "agentstate-reducer\[langgraph\]"'):
        importlib.import_module("agentstate_reducer.langgraph")


@pytest.mark.usefixtures("fresh_shim")
def test_the_langgraph_shim_re_exports_the_sibling(monkeypatch: pytest.MonkeyPatch) -> None:
    sibling = types.ModuleType("agentstate_reducer_langgraph")
    names: dict[str, Any] = {
        n: object() for n in ("ReducingSaver", "memory_namespace", "apply_reducer")
    }
    for name, value in names.items():
        setattr(sibling, name, value)
    monkeypatch.setitem(sys.modules, "agentstate_reducer_langgraph", sibling)
    monkeypatch.delitem(sys.modules, "agentstate_reducer.langgraph", raising=False)
    shim = importlib.import_module("agentstate_reducer.langgraph")
    assert {n: getattr(shim, n) for n in names} == names
    assert sorted(shim.__all__) == sorted(names)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"min_messages": 30, "max_messages": 20},
            "min_messages=30 is larger than max_messages=20",
        ),
        ({"min_messages": -1}, "min_messages=-1 is below 0"),
        ({"max_messages": -5}, "max_messages=-5 is below 0"),
        ({"max_tokens": 0}, "max_tokens=0 is below 1"),
        (
            {"max_tokens": 100, "target_tokens": 500},
            "target_tokens=500 is larger than max_tokens=100",
        ),
        ({"target_tokens": 50}, "target_tokens=50 has no effect without max_tokens"),
        ({"dedupe_window": 0}, "dedupe_window=0 is below 1"),
        ({"min_messages": "10"}, "min_messages='10' must be an int"),
        ({"on_prune": print}, r"got the single callable print; use on_prune=\[print\]"),
        ({"on_prune": [42]}, r"on_prune\[0\]=42 is not callable"),
        # a class is callable, and each call built an instance: every delivery "failed"
        (
            {"on_prune": [print, Background]},
            r"on_prune\[1\] is the class Background, not a hook: .*Background\(remember\)",
        ),
        ({"token_counter": 3}, "token_counter=3 is not callable"),
        (
            {"token_counter": len},
            r"token_counter=<built-in function len> has no effect without max_tokens; set "
            "max_tokens too, or drop token_counter",
        ),
        ({"namespace_key": ""}, "namespace_key='' must be a non-empty string"),
    ],
)
def test_config_errors_name_the_field_the_value_and_the_fix(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ReducerConfig(**settings)


def test_count_fields_are_not_checked_in_token_mode() -> None:
    ReducerConfig(max_tokens=100, min_messages=50)


def test_inject_summary_without_a_summarizer_warns() -> None:
    with pytest.warns(UserWarning, match="inject_summary=True does nothing without summarize_fn"):
        ReducerConfig(inject_summary=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ReducerConfig(on_prune=(print,))  # type: ignore[arg-type]  # a tuple is accepted


@pytest.mark.parametrize(
    "name", ["preserve_first", "inject_summary", "dedupe_on_prune", "require_human_first"]
)
def test_a_switch_that_is_not_a_bool_is_refused(name: str) -> None:
    """`dedupe_on_prune="false"` was taken as True (a non-empty string)."""
    with pytest.raises(ValueError, match=rf"ReducerConfig\.{name}='false' is not a bool"):
        ReducerConfig(**{name: "false"})
