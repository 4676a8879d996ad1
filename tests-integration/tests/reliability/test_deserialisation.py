"""Deserialisation: LangGraph's strict msgpack allowlist, and payloads planted in Redis.

LangGraph reads ``LANGGRAPH_STRICT_MSGPACK`` at import, so each mode runs in a process of
its own (`reliability_strict.py`), which reports what it saw as JSON. With the variable:

- graphs whose state holds a custom `Enum` and dataclass run through `RedisSaver`,
  `AsyncRedisSaver` and `ReducingSaver(RedisSaver)`, and a fresh graph reads them back
  typed (LangGraph derives the allowlist from the state schema via `with_allowlist`);
  a bare saver, without that allowlist, does not rebuild them: strict mode is on;
- a pickle planted in a blob, a pending write or a checkpoint's metadata is refused with
  `CorruptDataError` naming the key, and never unpickled;
- a msgpack payload naming ``os.system`` reads back as its inert argument, not called.

Without the variable the same ``os.system`` payload runs, which is the trust model
docs/security.md describes. Each planted payload would create a file if executed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from reliability_support import keys_under

STRICT_SCRIPT = Path(__file__).resolve().parent / "reliability_strict.py"

pytestmark = pytest.mark.standalone


def run_script(url: str, prefix: str, folder: Path, strict: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "LANGGRAPH_STRICT_MSGPACK"}
    if strict:
        env["LANGGRAPH_STRICT_MSGPACK"] = "true"
    done = subprocess.run(
        [sys.executable, str(STRICT_SCRIPT), url, prefix, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert "crash" not in result, result.get("crash")
    return result


def assert_refused(outcome: dict[str, Any]) -> None:
    assert outcome["error"] == "CorruptDataError", outcome
    assert outcome["key"] == outcome["expected_key"]
    assert outcome["expected_key"] in outcome["text"]
    assert "Unknown serialization type: pickle" in outcome["text"]


@pytest.fixture
def cleanup(redis_url: str, prefix: str) -> Any:
    yield
    with redis.Redis.from_url(redis_url, protocol=2) as client:
        keys = keys_under(client, prefix)
        if keys:
            client.delete(*keys)


@pytest.mark.parametrize("redis_kind", ["redis-7"], scope="session")
def test_strict_msgpack_works_with_our_savers_and_refuses_planted_payloads(
    redis_url: str, prefix: str, tmp_path: Path, cleanup: Any
) -> None:
    seen = run_script(redis_url, prefix, tmp_path, strict=True)
    assert seen["strict"] is True
    typed = {"mood": "Mood", "note": "Note", "messages": ["AIMessage", "HumanMessage"]}
    for saver in ("sync", "async"):
        assert {k: v for k, v in seen[saver].items() if k != "count"} == typed, saver
        assert seen[saver]["count"] == 4
    assert {k: v for k, v in seen["reducing"].items() if k != "count"} == typed
    assert seen["reducing"]["count"] <= 4  # 8 messages were said; the reducer kept a window
    assert seen["without_allowlist"] != "Note"

    assert_refused(seen["pickle_blob"])
    assert seen["pickle_blob_reducing"]["error"] == "CorruptDataError"
    assert_refused(seen["pickle_write"])
    assert_refused(seen["pickle_metadata"])
    # Blocked, not called: the value is the payload's argument, a plain string.
    assert seen["ext_blob"]["error"] is None
    assert "touch " in seen["ext_blob"]["value"]
    assert seen["executed"] == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("redis_kind", ["redis-7"], scope="session")
def test_without_strict_msgpack_a_planted_payload_runs_code(
    redis_url: str, prefix: str, tmp_path: Path, cleanup: Any
) -> None:
    """Why docs/security.md says to set LANGGRAPH_STRICT_MSGPACK: the default calls what a
    stored payload names. Pickle stays refused in both modes (no pickle_fallback)."""
    seen = run_script(redis_url, prefix, tmp_path, strict=False)
    assert seen["strict"] is False
    assert seen["without_allowlist"] == "Note"
    assert_refused(seen["pickle_blob"])
    assert_refused(seen["pickle_write"])
    assert_refused(seen["pickle_metadata"])
    assert seen["executed"] == ["ext"]
