"""`plainredis`: the inspector commands against a real Redis, their prompts and exit codes."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import io
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from cli_helpers import chat, cli, listed, memory_usage
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from agentstate_testkit import servers
from langgraph_checkpoint_plainredis import AsyncRedisSaver, PlainRedisError, RedisSaver
from langgraph_checkpoint_plainredis._cli import main
from langgraph_checkpoint_plainredis._inspect import jsonable
from langgraph_checkpoint_plainredis._keys import KeySpace

THREADS = {"user-42:session-7": 2, "a": 1, "a:b": 3, "with space ✓": 1}


def test_threads_lists_every_thread_with_its_checkpoints(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    chat(redis_url, prefix, THREADS)
    chat(redis_url, prefix, {"short-lived": 1}, ttl=3600)
    code, out, err = cli(capsys, "threads", "--url", redis_url, "--prefix", prefix)
    assert code == 0
    assert out.splitlines()[0].split() == ["CHECKPOINTS", "NS", "EXPIRES", "THREAD"]
    rows = {row[3]: row[:3] for row in (line.split(None, 3) for line in out.splitlines()[1:])}
    assert set(rows) == {*THREADS, "short-lived"}
    for thread_id in THREADS:
        count, namespaces, expires = rows[thread_id]
        assert int(count) == len(listed(redis_url, prefix, thread_id)) == 3 * THREADS[thread_id]
        assert (namespaces, expires) == ("1", "never")
    expires = datetime.datetime.strptime(rows["short-lived"][2], "%Y-%m-%dT%H:%M:%SZ")
    in_an_hour = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    assert abs((expires - in_an_hour).total_seconds() - 3600) < 120
    assert err.strip() == f"5 threads under prefix {prefix!r}"


def test_threads_judges_expiry_by_the_servers_clock(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run on a machine whose clock is two hours ahead, `threads` still shows a thread with
    an hour to live as the server gives it that hour, not as expired."""
    chat(redis_url, prefix, {"t": 1}, ttl=3600)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 7200)
    code, out, _ = cli(capsys, "threads", "--url", redis_url, "--prefix", prefix)
    assert code == 0
    count, namespaces, expires, thread = out.splitlines()[1].split()
    assert (count, namespaces, thread) == ("3", "1", "t") and expires != "expired"


def test_url_defaults_to_the_REDIS_URL_variable(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    chat(redis_url, prefix, {"t": 1})
    monkeypatch.setenv("REDIS_URL", redis_url)
    code, out, _ = cli(capsys, "threads", "--prefix", prefix)
    assert code == 0 and out.splitlines()[1].split() == ["3", "1", "never", "t"]


def test_history_lists_newest_first_with_step_source_writes_and_parent(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    chat(redis_url, prefix, {"user:1": 3})
    expected = listed(redis_url, prefix, "user:1")
    code, out, _ = cli(
        capsys, "history", "user:1", "--url", redis_url, "--prefix", prefix, "--limit", "0"
    )
    assert code == 0
    assert out.splitlines()[0].split() == [
        "CHECKPOINT", "STEP", "SOURCE", "WRITES", "CREATED", "PARENT",
    ]  # fmt: skip
    rows = [line.split() for line in out.splitlines()[1:]]
    assert len(rows) == len(expected) == 9
    for row, tup in zip(rows, expected, strict=True):
        parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else "-"
        assert row[0] == tup.checkpoint["id"]
        assert row[1:4] == [
            str(tup.metadata["step"]),
            tup.metadata["source"],
            str(len(tup.pending_writes)),
        ]
        assert row[4] == tup.checkpoint["ts"][:19] and row[5] == parent
    assert sorted(row[0] for row in rows) == [row[0] for row in reversed(rows)]
    assert {row[2] for row in rows} == {"input", "loop"} and any(row[3] != "0" for row in rows)

    code, out, _ = cli(capsys, "history", "user:1", "--url", redis_url, "--prefix", prefix,
                       "--limit", "2")  # fmt: skip
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == [
        row[0] for row in rows[:2]
    ]


def test_a_thread_only_in_a_subgraph_namespace_is_named_with_its_namespaces(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` of a thread whose checkpoints are all in a subgraph namespace suggested
    `history`, which suggested `threads`, which named no namespace: no hint reached them.
    Both now name the thread's namespaces and the `history` command for the first."""
    with RedisSaver(redis_url, prefix=prefix) as saver:
        conf = {"configurable": {"thread_id": "only-sub", "checkpoint_ns": "inner:abc"}}
        saver.put(conf, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    base = ("--url", redis_url, "--prefix", prefix)
    hint = f"`plainredis history only-sub --prefix {prefix} --ns inner:abc`"
    for argv in (("show", "only-sub", *base), ("history", "only-sub", *base)):
        code, _, err = cli(capsys, *argv)
        assert code == 1 and "its namespaces are 'inner:abc'" in err and hint in err, err
    code, out, _ = cli(capsys, "history", "only-sub", *base, "--ns", "inner:abc")
    assert code == 0 and len(out.splitlines()) == 2
    code, _, err = cli(capsys, "history", "nobody", *base)
    assert code == 1 and "`plainredis threads` lists the threads there" in err


def test_show_prints_the_decoded_checkpoint_as_json(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    chat(redis_url, prefix, {"t:1": 2})
    newest, *older = listed(redis_url, prefix, "t:1")
    code, out, _ = cli(capsys, "show", "t:1", "--url", redis_url, "--prefix", prefix)
    assert code == 0
    doc = json.loads(out)
    assert doc["thread_id"] == "t:1" and doc["checkpoint_ns"] == ""
    assert doc["checkpoint_id"] == newest.checkpoint["id"]
    assert doc["parent_checkpoint_id"] == newest.parent_config["configurable"]["checkpoint_id"]
    assert doc["metadata"]["step"] == newest.metadata["step"]
    assert doc["checkpoint"]["channel_versions"] == newest.checkpoint["channel_versions"]
    messages = doc["channel_values"]["messages"]
    assert [(m["type"], m["content"]) for m in messages] == [
        ("human", "question 0 你好"), ("ai", "echo: question 0 你好"),
        ("human", "question 1 你好"), ("ai", "echo: question 1 你好"),
    ]  # fmt: skip
    assert [m["id"] for m in messages] == [
        m.id for m in newest.checkpoint["channel_values"]["messages"]
    ]
    assert "你好" in out  # printed as text, not as \\u escapes

    # An older checkpoint, by id, with the pending writes of the step that followed it.
    with_writes = next(t for t in older if t.pending_writes)
    cid = with_writes.checkpoint["id"]
    code, out, _ = cli(capsys, "show", "t:1", cid, "--url", redis_url, "--prefix", prefix)
    assert code == 0
    doc = json.loads(out)
    assert doc["checkpoint_id"] == cid
    assert [(w["task_id"], w["channel"]) for w in doc["pending_writes"]] == [
        (task_id, channel) for task_id, channel, _ in with_writes.pending_writes
    ]
    assert doc["pending_writes"] == json.loads(json.dumps(doc["pending_writes"]))


@dataclasses.dataclass
class Point:
    x: int
    tags: tuple[str, ...]


class Opaque:
    def __repr__(self) -> str:
        return "Opaque()"


def test_jsonable_keeps_what_json_can_say_and_falls_back_to_repr() -> None:
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    value = {
        1: Point(2, ("a",)),
        "when": datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        "raw": b"\x00\xff",
        "nan": float("nan"),
        "set": frozenset({"x"}),
        "opaque": Opaque(),
        "message": HumanMessage("hi", id="m1", name="ada"),
        "cycle": cyclic,
    }
    assert jsonable(value) == {
        "1": {"x": 2, "tags": ["a"]},
        "when": "2025-01-02T03:04:05+00:00",
        "raw": "base64:AP8=",
        "nan": "nan",
        "set": ["x"],
        "opaque": "Opaque()",
        "message": {"type": "human", "content": "hi", "id": "m1", "name": "ada"},
        "cycle": [1, "<cycle: list>"],
    }
    json.dumps(jsonable(value), allow_nan=False)


def scanned_bytes(client: Any, prefix: str) -> tuple[int, int]:
    keys = list(client.scan_iter(match=KeySpace(prefix).pattern))
    return len(keys), sum(memory_usage(client, key) or 0 for key in keys)


def stats_rows(out: str) -> dict[str, tuple[int, int, int]]:
    rows = {}
    for line in out.splitlines()[1:]:
        if not line.startswith(" "):
            break
        size, keys, checkpoints, _, thread_id = line.split(None, 4)
        rows[thread_id] = (int(size.replace(",", "")), int(keys), int(checkpoints))
    return rows


def test_stats_sums_memory_usage_per_thread_and_scan_finds_orphans(
    redis_url: str, prefix: str, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    chat(redis_url, prefix, {"big": 4, "small": 1, "lost:index": 2})
    args = ("--url", redis_url, "--prefix", prefix, "--top", "0")
    code, out, err = cli(capsys, "stats", "--scan", "--progress", *args)
    assert code == 0
    rows = stats_rows(out)
    assert list(rows) == ["big", "lost:index", "small"]  # largest first
    assert [rows[t][2] for t in ("big", "small")] == [12, 3]
    # Every key under the prefix is a thread's or the registry's (a cluster keeps no
    # registry), so the sums match what SCAN finds.
    key_count, total = scanned_bytes(client, prefix)
    registry = memory_usage(client, KeySpace(prefix).threads)
    assert sum(r[1] for r in rows.values()) + (registry is not None) == key_count
    assert sum(r[0] for r in rows.values()) + (registry or 0) == total
    if registry is not None:
        assert f"registry: {registry:,} bytes" in out
    assert "orphans (keys no registered thread reaches): 0 keys, 0 bytes" in out
    assert "threads  [##############################] 100% 3/3" in err

    # A thread's namespace index is lost: the keys it reached are orphans, which only
    # --scan finds.
    index = KeySpace(prefix).thread("lost:index").ns
    index_bytes = memory_usage(client, index) or 0
    client.delete(index)
    lost_bytes, lost_keys, _ = rows["lost:index"]
    code, out, _ = cli(capsys, "stats", *args)
    assert code == 0
    assert stats_rows(out).get("lost:index", (0, 0, 0)) == (0, 0, 0)
    assert "run sets, metadata index and orphans: not counted" in out
    code, out, _ = cli(capsys, "stats", "--scan", *args)
    assert code == 0
    orphans = f"{lost_keys - 1} keys, {lost_bytes - index_bytes:,} bytes"
    assert f"orphans (keys no registered thread reaches): {orphans}" in out
    assert "{lost%3Aindex}" in out  # a sample of the orphaned keys


def test_stats_scan_counts_the_metadata_index_on_its_own_line(
    redis_url: str, prefix: str, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The metadata index (`index_metadata=`, `reindex()`) keeps keys no thread reaches: a
    zset per field and value, and its marker hash. `stats --scan` listed them as orphans;
    they have a line of their own, and a key of another type where one would be stays an
    orphan."""
    users = ("alice", "bob", "carol")
    with RedisSaver(redis_url, prefix=prefix, index_metadata=("user_id",)) as saver:
        for user in users:
            config = {"configurable": {"thread_id": f"t-{user}", "checkpoint_ns": ""}}
            metadata = {"user_id": user, "source": "input", "step": -1}
            saver.put(config, empty_checkpoint(), metadata, {})  # type: ignore[arg-type]
        saver.reindex()
    keyspace = KeySpace(prefix)
    index = [keyspace.index_marker, *(keyspace.index("user_id", f"s{u}") for u in users)]
    sizes = [memory_usage(client, key) for key in index]
    assert None not in sizes
    foreign = keyspace.index("user_id", "sdave")
    client.rpush(foreign, "another program's")
    foreign_size = memory_usage(client, foreign) or 0

    code, out, _ = cli(capsys, "stats", "--scan", "--url", redis_url, "--prefix", prefix)
    assert code == 0
    assert f"metadata index: {len(index)} keys, {sum(s or 0 for s in sizes):,} bytes" in out
    orphans = f"1 keys, {foreign_size:,} bytes"
    assert f"orphans (keys no registered thread reaches): {orphans}" in out
    assert foreign in out and keyspace.index_marker + "\n" not in out


def test_delete_asks_first_and_deletes_only_that_thread(
    redis_url: str,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chat(redis_url, prefix, {"a": 2, "a:b": 1})
    args = ("delete", "a", "--url", redis_url, "--prefix", prefix)
    for answer in ("n\n", "\n", "", "nope\n"):
        monkeypatch.setattr(sys, "stdin", io.StringIO(answer))
        code, _, err = cli(capsys, *args)
        assert code == 1
        assert err.startswith("Delete thread 'a' (6 checkpoints)? [y/N] ")
        assert "not deleted (pass --yes" in err
        assert len(listed(redis_url, prefix, "a")) == 6
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    code, out, _ = cli(capsys, *args)
    assert (code, out) == (0, "deleted thread 'a' (6 checkpoints)\n")
    assert listed(redis_url, prefix, "a") == []
    assert len(listed(redis_url, prefix, "a:b")) == 3

    # --yes does not read stdin (an empty stdin would mean no); an unknown thread fails.
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, _, err = cli(capsys, "delete", "a:b", "--yes", "--url", redis_url, "--prefix", prefix)
    assert code == 0 and err == "" and listed(redis_url, prefix, "a:b") == []
    code, _, err = cli(capsys, *args)
    assert code == 1 and "thread 'a' has no keys under prefix" in err


def test_prune_keeps_the_latest_checkpoint_or_deletes(
    redis_url: str,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chat(redis_url, prefix, {"p1": 2, "p2": 3, "kept": 1})
    latest = {t: listed(redis_url, prefix, t)[0] for t in ("p1", "p2")}
    args = ("--url", redis_url, "--prefix", prefix)
    code, out, err = cli(capsys, "prune", "p1", "p2", "missing", "--yes", *args)
    assert code == 0
    assert out == "pruned 2 threads (keep_latest): 15 checkpoints before, 2 checkpoints now\n"
    assert f"thread 'missing' has no keys under prefix {prefix!r}; skipped" in err
    for thread_id, tup in latest.items():
        (only,) = listed(redis_url, prefix, thread_id)
        assert only.checkpoint == tup.checkpoint
    assert len(listed(redis_url, prefix, "kept")) == 3

    monkeypatch.setattr(sys, "stdin", io.StringIO("yes\n"))
    code, out, err = cli(capsys, "prune", "p1", "--strategy", "delete", *args)
    assert code == 0
    assert "Prune (delete): delete 1 thread (1 checkpoint)? [y/N]" in err
    assert listed(redis_url, prefix, "p1") == []
    code, _, err = cli(capsys, "prune", "missing", *args)
    assert code == 1 and "nothing to prune" in err


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_runtime_errors_exit_1_with_one_line_that_says_what_to_do(
    redis_url: str, prefix: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    down = f"redis://ada:s3cret@127.0.0.1:{closed_port()}/0"
    code, out, err = cli(capsys, "threads", "--url", down)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "s3cret" not in err
    assert err.startswith(f"plainredis: error: cannot connect to {down.replace('s3cret', '***')}")
    assert "point --url (or $REDIS_URL) at your server" in err
    code, _, err = cli(capsys, "migrate", "--url", down)  # migrate takes --url alone
    assert code == 1 and "point --url at your server" in err and "REDIS_URL" not in err

    chat(redis_url, prefix, {"t": 1})
    args = ("--url", redis_url, "--prefix", prefix)
    code, _, err = cli(capsys, "history", "nobody", *args)
    assert code == 1 and "thread 'nobody' has no checkpoints" in err
    code, _, err = cli(capsys, "show", "t", "not-a-checkpoint", *args)
    assert code == 1 and "checkpoint 'not-a-checkpoint' in thread 't'" in err
    assert "was not found" in err and f"`plainredis history t --prefix {prefix}`" in err
    # The command it suggests is one a shell runs as is, in the same place.
    code, _, err = cli(capsys, "show", "weird id ✓", "nope", "--ns", "sub:x", *args)
    assert f"`plainredis history 'weird id ✓' --prefix {prefix} --ns sub:x`" in err

    # A namespace member no saver wrote names the key it sits in and how to clear it.
    ns_key = KeySpace(prefix).thread("t").ns
    client.zadd(ns_key, {"%ZZ": float("inf")})
    code, _, err = cli(capsys, "threads", *args)
    assert code == 1 and err.count("\n") == 1
    assert repr(ns_key) in err and "'%ZZ'" in err and "Remove that member" in err
    client.zrem(ns_key, "%ZZ")

    # A keyspace still in 0.1.0's layout (its registry was a hash) points to the migration.
    legacy = f"{prefix}-old"
    client.hset(KeySpace(legacy).threads, "entry", "{}")
    code, _, err = cli(capsys, "threads", "--url", redis_url, "--prefix", legacy)
    assert code == 1 and err.count("\n") == 1 and "plainredis migrate" in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["history"],
        ["show"],
        ["prune"],
        ["history", "t", "--limit", "-1"],
        ["stats", "--top", "many"],
        ["prune", "t", "--strategy", "everything"],
        ["threads", "--prefix", "a{b}"],
        ["threads", "--prefix", "lg:"],
        ["threads", "--url", "http://127.0.0.1:6379"],
        ["migrate"],
        ["migrate", "--url", "foo://x"],
        ["migrate", "--url", "redis://127.0.0.1:1/0", "--prefix", "lg:"],
        ["migrate", "--url", "redis://127.0.0.1:1/0", "--ttl", "-5"],
        ["migrate", "--url", "redis://127.0.0.1:1/0", "--ttl", "a day"],
        ["migrate", "--url", "redis://127.0.0.1:1/0", "--ttl", "1e16"],
        # redis-py reads a database that is not a number as database 0
        ["migrate", "--url", "redis://127.0.0.1:1/abc"],
        ["threads", "--url", "redis://:secret@127.0.0.1:1/abc"],
        # no scheme: the whole URL read as a path ("database '127.0.0.1:63790'")
        ["threads", "--url", "127.0.0.1:6379/0"],
        ["migrate", "--url", "redis//localhost:6379/0"],
        # bytes that are not UTF-8, as Python hands them over from the shell
        ["history", "bad\udcff"],
        ["delete", "bad\udcff", "--yes"],
        ["prune", "ok", "bad\udcff", "--yes"],
        ["show", "t", "--ns", "\udcff"],
        ["show", "t", "\udcff"],
        ["threads", "--prefix", "\udcff"],
        ["migrate", "--url", "redis://127.0.0.1:1/0", "--prefix", "\udcff"],
    ],
)
def test_bad_arguments_exit_2_with_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: plainredis") and "error:" in err
    if "--ttl" in argv:  # the command line has no ttl=None: no --ttl keeps for ever
        assert "ttl=None" not in err
    if any("\udcff" in arg for arg in argv):
        assert "'\\xff' is not UTF-8" in err or "'bad\\xff' is not UTF-8" in err
    if argv[-1:] and argv[-1].endswith(":6379/0"):
        assert "does not start with redis://" in err and "63790" not in err
    if argv[-1:] and argv[-1].endswith("/abc"):
        assert "names database 'abc', which is not a number" in err
        assert "secret" not in err


def test_the_installed_console_script_exits_2_on_bad_arguments() -> None:
    script = Path(sys.executable).with_name("plainredis")
    done = subprocess.run(
        [str(script), "history"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: plainredis history")
    assert "the following arguments are required: THREAD" in done.stderr


def test_python_dash_m_runs_the_same_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_checkpoint_plainredis", "history"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage: plainredis history")


@pytest.mark.parametrize("kind", ["redis-5", "redis-7"])
def test_a_server_that_renamed_info_away_is_taken_as_standalone(
    capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """`rename-command INFO ""` (a hardening docs/operations/access.md suggests): the savers
    and the CLI take the server as standalone, as for a user without INFO. Before, every call
    of a saver built from a URL, and every CLI command, failed with "unknown command"."""
    with servers.start(kind, extra_args=["--rename-command", "INFO", ""]) as srv:
        chat(srv.url, "lg", {"hardened": 1})
        with RedisSaver(srv.url) as saver:
            assert saver.get_tuple({"configurable": {"thread_id": "hardened"}}) is not None

        async def read() -> Any:
            async with AsyncRedisSaver(srv.url) as saver:
                return await saver.aget_tuple({"configurable": {"thread_id": "hardened"}})

        assert asyncio.run(read()) is not None
        code, out, _ = cli(capsys, "threads", "--url", srv.url)
        assert code == 0 and "hardened" in out


def test_resp3_asked_of_redis_5_names_the_fix_before_any_call() -> None:
    """protocol=3 on a server without RESP3: the saver's own error, naming protocol=2, also
    when it has to ask the server's topology first (no cluster= given)."""
    with servers.start("redis-5") as srv, RedisSaver(srv.url, protocol=3) as saver:
        with pytest.raises(PlainRedisError, match="protocol=2"):
            saver.get_tuple({"configurable": {"thread_id": "t"}})


def test_a_url_asking_for_resp3_works_in_the_cli(
    capsys: pytest.CaptureFixture[str], redis_url: str, prefix: str
) -> None:
    """The inspector parses RESP2 replies: a URL with ?protocol=3 crashed `threads`."""
    if "?" in redis_url:
        pytest.skip("a URL with a query of its own")
    chat(redis_url, prefix, {"resp3": 1})
    code, out, err = cli(capsys, "threads", "--url", f"{redis_url}?protocol=3", "--prefix", prefix)
    assert code == 0 and "resp3" in out, err


@pytest.mark.parametrize("kind", ["redis-6", "redis-7"])
def test_a_user_missing_a_script_command_gets_the_fix(kind: str) -> None:
    """An ACL user without PEXPIRE, a saver with a TTL: Redis stops the put script there. The
    error names the ACL list to grant; it was a bare ResponseError."""
    with servers.start(kind) as srv:
        admin = redis.Redis.from_url(srv.url, protocol=2)
        admin.execute_command(
            "ACL", "SETUSER", "nopexpire", "on", ">pw", "~lg:*", "+@all", "-pexpire"
        )
        url = f"redis://nopexpire:pw@127.0.0.1:{srv.port}/0"
        with RedisSaver(url, ttl=100) as saver, pytest.raises(PlainRedisError, match="access.md"):
            cp = empty_checkpoint()
            cp["channel_values"], cp["channel_versions"] = {"m": 1}, {"m": 1}
            saver.put({"configurable": {"thread_id": "t"}}, cp, {}, {"m": 1})
        admin.close()
