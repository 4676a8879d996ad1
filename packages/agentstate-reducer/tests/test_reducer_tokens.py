"""Token counting: user counter, tiktoken only when cached offline, documented heuristic."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken

from agentstate_reducer import MessageReducer, ReducerConfig, _tokens, resolve_token_counter


@pytest.fixture
def no_cached_encoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    _tokens._offline_encoding.cache_clear()
    yield tmp_path
    _tokens._offline_encoding.cache_clear()


def test_the_heuristic_is_four_plus_a_quarter_of_the_characters(no_cached_encoding: Path) -> None:
    count = resolve_token_counter()
    assert count is _tokens.heuristic_token_count
    assert count({"role": "human", "content": ""}) == 4
    assert count({"role": "human", "content": "abcde"}) == 4 + 2
    blocks = {"role": "human", "content": [{"type": "text", "text": "abcd"}]}
    assert count(blocks) == 4 + 1
    call = {"role": "ai", "content": "", "tool_calls": [{"name": "f", "args": {}, "id": "1"}]}
    assert count(call) > 4


def test_a_cache_file_with_the_wrong_bytes_is_not_trusted(no_cached_encoding: Path) -> None:
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    (no_cached_encoding / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"junk")
    assert resolve_token_counter() is _tokens.heuristic_token_count


def test_tiktoken_counts_when_its_encoding_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = tiktoken.Encoding(
        name="tiny",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={"<|endoftext|>": 256},
    )
    monkeypatch.setattr(_tokens, "_offline_encoding", lambda: tiny)
    count = resolve_token_counter()
    assert count({"role": "human", "content": "abc"}) == 4 + 3
    # 0.5.0 raised ValueError on text that spells a special token.
    assert count({"role": "human", "content": "<|endoftext|>"}) == 4 + 13


def test_a_user_counter_wins() -> None:
    def count(message: Any) -> int:
        return 7

    assert resolve_token_counter(count) is count


def test_a_counter_returning_nonsense_is_reported() -> None:
    config = ReducerConfig(max_tokens=10, token_counter=lambda m: -1)
    with pytest.raises(ValueError, match=r"returned -1 for message 0; it must return an int >= 0"):
        MessageReducer(config=config).reduce([{"role": "human", "content": "x"}])


def test_a_counter_that_raises_is_named_with_the_message_it_failed_on() -> None:
    def count(message: Any) -> int:
        if message["id"] == "h1":
            raise KeyError("tokens")
        return 1

    config = ReducerConfig(max_tokens=10, token_counter=count)
    messages = [{"role": "human", "content": "x", "id": i} for i in ("h0", "h1")]
    with pytest.raises(
        ValueError,
        match=r"token_counter .*\.count raised KeyError\('tokens'\) on message 1 \(id 'h1'\)",
    ) as raised:
        MessageReducer(config=config).plan(messages)
    assert isinstance(raised.value.__cause__, KeyError)


def test_a_counter_that_raises_on_the_summary_block_is_named_too() -> None:
    def count(message: Any) -> int:
        if message["id"].startswith("summary-"):
            raise KeyError("tokens")
        return 1

    config = ReducerConfig(
        max_tokens=2,
        token_counter=count,
        summarize_fn=lambda pruned: "earlier",
        inject_summary=True,
        require_human_first=False,
    )
    messages = [{"role": "human", "content": str(i), "id": f"h{i}"} for i in range(4)]
    with pytest.raises(
        ValueError, match=r"count raised KeyError\('tokens'\) on message \d+ \(id 'summary-"
    ) as raised:
        MessageReducer(config=config).plan(messages)
    assert isinstance(raised.value.__cause__, KeyError)
