"""Token counting: a user counter, tiktoken when available offline, else a heuristic."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from ._config import TokenCounter
from ._messages import is_mapping, sorted_json

logger = logging.getLogger("agentstate_reducer")

CHARS_PER_TOKEN = 4
PER_MESSAGE_OVERHEAD = 4

_ENCODING = "cl100k_base"
# Where tiktoken itself fetches and caches this encoding (tiktoken/load.py,
# tiktoken_ext/openai_public.py). Checking the cached file first is the only way to learn
# that get_encoding() will not go to the network.
_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
_ENCODING_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


def message_text(message: Any) -> str:
    """Return the text a message sends to a model: its content and its tool calls."""
    if is_mapping(message):
        content, calls = message.get("content"), message.get("tool_calls")
    else:
        content, calls = getattr(message, "content", None), getattr(message, "tool_calls", None)
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(sorted_json(block, default=str))
    elif content is not None:
        parts.append(str(content))
    for call in calls or ():
        if is_mapping(call):
            payload = {k: call.get(k) for k in ("name", "args", "function")}
        else:
            payload = {"name": getattr(call, "name", None), "args": getattr(call, "args", None)}
        parts.append(sorted_json(payload, default=str))
    return "\n".join(parts)


def heuristic_token_count(message: Any) -> int:
    """Estimate tokens: `4 + ceil(len(text) / 4)`, text being content plus tool calls."""
    return PER_MESSAGE_OVERHEAD + -(-len(message_text(message)) // CHARS_PER_TOKEN)


def _cached_encoding_path() -> str | None:
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:
        return None
    path = os.path.join(cache_dir, hashlib.sha1(_ENCODING_URL.encode()).hexdigest())
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return path if hashlib.sha256(data).hexdigest() == _ENCODING_SHA256 else None


@functools.lru_cache(maxsize=1)
def _offline_encoding() -> Any:
    try:
        import tiktoken
    except ImportError:
        return None
    if _cached_encoding_path() is None:
        logger.debug("tiktoken %s is not cached locally; counting tokens by heuristic", _ENCODING)
        return None
    try:
        return tiktoken.get_encoding(_ENCODING)
    except Exception:  # A broken cache must not break reducing; the heuristic still works.
        logger.warning("tiktoken could not load %s; counting tokens by heuristic", _ENCODING)
        return None


def resolve_token_counter(token_counter: TokenCounter | None = None) -> TokenCounter:
    """Return the per-message token counter a reducer uses.

    Args:
        token_counter: Returned unchanged when given.

    Returns:
        `token_counter`; else a tiktoken `cl100k_base` counter when tiktoken is installed
        and that encoding is already in tiktoken's local cache (no download is tried); else
        `heuristic_token_count`. The built-in counters count content plus tool calls and add
        4 tokens per message.
    """
    if token_counter is not None:
        return token_counter
    encoding = _offline_encoding()
    if encoding is None:
        return heuristic_token_count

    def count_with_tiktoken(message: Any) -> int:
        tokens = encoding.encode(message_text(message), disallowed_special=())
        return PER_MESSAGE_OVERHEAD + len(tokens)

    return count_with_tiktoken
