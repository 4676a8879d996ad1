"""`plainredis` where a review found it failing: a foreign `PREFIX:seq` deleted by migrate,
tracebacks on odd members, pipes, stdin, encodings and URLs, misleading messages."""

from __future__ import annotations

import argparse
import io
import os
import re
import shlex
import subprocess
import sys
import uuid
from typing import Any

import pytest
import redis
from cli_helpers import chat, cli, listed, memory_usage
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_checkpoint_plainredis import RedisSaver, _inspect
from langgraph_checkpoint_plainredis._cli import _history_command, _parser, main
from langgraph_checkpoint_plainredis._keys import KeySpace


def command(*argv: str) -> list[str]:
    return [sys.executable, "-m", "langgraph_checkpoint_plainredis", *argv]


@pytest.fixture
def standalone(redis_kind: str) -> None:
    if redis_kind.endswith("-cluster"):
        pytest.skip("a standalone server: migrate, ACL users and the thread registry")


def test_migrate_deletes_seq_only_after_a_010_keyspace_and_says_when_there_is_none(
    redis_url: str,
    prefix: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    standalone: None,
) -> None:
    """With no 0.1.0 registry under the prefix, migrate deleted `PREFIX:seq` (another
    program's key: 0.1.0 kept a string counter there) and said only 'migrated 0'."""
    chat(redis_url, prefix, {"a": 1})  # the current layout, nothing from 0.1.0
    seq = f"{prefix}:seq"
    client.zadd(seq, {"another program's member": 1})
    argv = ("migrate", "--url", redis_url, "--prefix", prefix)
    code, out, err = cli(capsys, *argv)
    assert (code, err) == (0, "")  # an already migrated keyspace: a rerun still succeeds
    assert "deleted 0 old keys" in out
    assert f"no 0.1.0 registry at '{prefix}:threads'" in out and "--prefix" in out
    assert client.type(seq) == b"zset" and client.zcard(seq) == 1
    client.delete(seq)
    client.set(seq, "42")  # a string, but no 0.1.0 data: not this run's to delete
    for keep in ([], ["--keep-old"]):
        code, out, _ = cli(capsys, *argv, *keep)
        assert code == 0 and "no 0.1.0 registry" in out
        assert client.get(seq) == b"42"
    assert len(listed(redis_url, prefix, "a")) == 3


def test_migrate_of_a_010_keyspace_deletes_its_seq_but_not_a_foreign_one(
    redis_url: str,
    prefix: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    standalone: None,
) -> None:
    """A 0.1.0 run to finish (here the record of one that stopped after its last thread):
    its string counter goes; a key of another type there stays."""
    argv = ("migrate", "--url", redis_url, "--prefix", prefix)
    for value, kept in ((b"7", False), (None, True)):
        client.set(f"{prefix}:v010:parked", prefix)
        if value is None:
            client.sadd(f"{prefix}:seq", "foreign")
        else:
            client.set(f"{prefix}:seq", value)
        code, out, _ = cli(capsys, *argv)
        assert code == 0 and "no 0.1.0 registry" not in out
        assert bool(client.exists(f"{prefix}:seq")) is kept
        assert not client.exists(f"{prefix}:v010:parked")
        client.delete(f"{prefix}:seq")


@pytest.mark.parametrize("where", ["keys", "idx"])
def test_stats_names_the_key_of_a_member_that_is_not_utf8(
    redis_url: str,
    prefix: str,
    client: Any,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    """A member no saver writes (not UTF-8) in a timeline or its key index was a
    UnicodeDecodeError traceback; it is a one-line error naming the key and the fix."""
    chat(redis_url, prefix, {"t": 1, "u": 1})
    tk = KeySpace(prefix).thread("u")
    key = tk.keys("") if where == "keys" else tk.idx("")
    client.zadd(key, {b"c\xff" if where == "keys" else b"\xff\xfe": 0})
    code, out, err = cli(capsys, "stats", "--url", redis_url, "--prefix", prefix)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith("plainredis: error: ")
    assert repr(key) in err and "not UTF-8" in err and "Remove that member" in err


def test_output_to_a_reader_that_went_away_stops_quietly(
    redis_url: str,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`plainredis threads | head -1` printed a BrokenPipeError traceback and exited 1."""
    chat(redis_url, prefix, {"t": 1})

    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    for cmd in ("threads", "stats"):
        monkeypatch.setattr(sys, "stdout", Gone())
        assert main([cmd, "--url", redis_url, "--prefix", prefix]) == 141
        monkeypatch.undo()
        assert capsys.readouterr().err in ("", f"1 thread under prefix {prefix!r}\n")

    # A real pipe whose reader is gone before the command writes a byte.
    with subprocess.Popen(
        command("threads", "--url", redis_url, "--prefix", prefix),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
    assert proc.returncode == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_credentials_in_the_url_query_are_not_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """`?password=` and `?username=` values were printed as typed in error messages."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0?username=opsuser&password=s3cret&db=0"
    code, _, err = cli(capsys, "threads", "--url", url)
    assert code == 1 and "s3cret" not in err and "opsuser" not in err
    assert "?username=***&password=***&db=0" in err
    with pytest.raises(SystemExit):  # a usage error names the URL too
        main(["threads", "--url", f"redis://127.0.0.1:{port}/0?password=s3cret&bogus=1"])
    err = capsys.readouterr().err
    assert "s3cret" not in err and "password=***&bogus=1" in err


def test_no_stdin_is_no_answer(
    redis_url: str,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With stdin closed (`0<&-`, sys.stdin is None) delete and prune raised AttributeError."""
    chat(redis_url, prefix, {"a": 1})
    monkeypatch.setattr(sys, "stdin", None)
    for argv in (["delete", "a"], ["prune", "a"]):
        code, _, err = cli(capsys, *argv, "--url", redis_url, "--prefix", prefix)
        assert code == 1 and "(pass --yes to skip the question)" in err
    assert len(listed(redis_url, prefix, "a")) == 3


def test_show_of_an_empty_checkpoint_id_is_not_found(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show THREAD ""` printed the newest checkpoint, as if no id had been given."""
    chat(redis_url, prefix, {"a": 1})
    code, out, err = cli(capsys, "show", "a", "", "--url", redis_url, "--prefix", prefix)
    assert (code, out) == (1, "")
    assert f"checkpoint '' in thread 'a', namespace '', prefix {prefix!r} was not found" in err


def test_the_suggested_history_command_runs_for_a_thread_id_like_an_option(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """For thread '-x' it suggested `plainredis history -x`, which argparse refuses."""
    chat(redis_url, prefix, {"-x": 1})
    for ns in ("", "-n"):
        code, _, err = cli(
            capsys, "show", "--url", redis_url, "--prefix", prefix, f"--ns={ns}", "--", "-x", "no"
        )
        assert code == 1
        found = re.search(r"`(plainredis history [^`]*)`", err)
        assert found is not None, err
        suggested = shlex.split(found.group(1))
        assert suggested[-2:] == ["--", "-x"]
        # As given (the URL left out, as it may carry a password), with --url before `--`.
        code, out, err = cli(capsys, "history", "--url", redis_url, *suggested[2:])
        assert code == 0 and len(out.splitlines()) == 4, err
    # A prefix and a namespace like options too: the words parse back to what they name.
    for thread, prefix_, ns in (("-x", "-p", "-n"), ("t", "-p", "--n"), ("-", "lg", "")):
        args = argparse.Namespace(thread=thread, prefix=prefix_, ns=ns)
        words = shlex.split(_history_command(args))
        parsed = _parser().parse_args([*words[1:2], "--url", "redis://h", *words[2:]])
        assert (parsed.thread, parsed.prefix, parsed.ns) == (thread, prefix_, ns), words


def test_text_the_output_encoding_cannot_show_is_escaped(redis_url: str, prefix: str) -> None:
    """With PYTHONIOENCODING=cp1252, threads, show and stats failed on a thread id '✓'."""
    chat(redis_url, prefix, {"weird id ✓": 1})
    env = dict(os.environ, PYTHONIOENCODING="cp1252")
    for cmd in (["threads"], ["show", "weird id ✓"], ["stats"]):
        done = subprocess.run(
            command(*cmd, "--url", redis_url, "--prefix", prefix), capture_output=True, env=env
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        assert b"weird id \\u2713" in done.stdout


def test_migrate_refuses_a_password_that_is_not_utf8_as_a_usage_error(
    redis_url: str, capsys: pytest.CaptureFixture[str], standalone: None
) -> None:
    """migrate raised UnicodeEncodeError; the other commands exit 2 naming --url."""
    hostport = redis_url.split("//", 1)[1].split("/", 1)[0]
    url = f"redis://u:p\udcff@{hostport}/0"
    for cmd in ("migrate", "threads"):
        with pytest.raises(SystemExit) as exit_info:
            main([cmd, "--url", url])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert f"--url 'redis://u:***@{hostport}/0'" in err and "\udcff" not in err


def test_stats_scan_counts_only_this_prefixs_run_sets(
    redis_url: str, prefix: str, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The keys of a saver with prefix 'P:run' (and any key under 'P:run:') were counted as
    run sets of 'P'; they are orphans, as keys of another program are."""

    def put_runs(prefix: str, thread_id: str, run_ids: list[str]) -> None:
        with RedisSaver(redis_url, prefix=prefix) as saver:
            config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            for step, run_id in enumerate(run_ids):
                metadata: Any = {"source": "loop", "step": step, "run_id": run_id}
                config = saver.put(config, empty_checkpoint(), metadata, {})

    put_runs(prefix, "a", ["r1", "r:2", "r1"])
    runs = [k for k in client.scan_iter(match=f"{prefix}:run:*", count=1000)]
    assert runs and all(client.type(k) == b"set" for k in runs)
    run_bytes = sum(memory_usage(client, k) or 0 for k in runs)
    nested = f"{prefix}:run"
    put_runs(nested, "b", ["r1", "r3"])
    client.set(f"{prefix}:run:not-a-set", "x")
    # The nested saver's keys (its run sets 'P:run:run:r1' and its registry 'P:run:threads',
    # a zset, among them) and the string: all under 'P:run:'.
    nested_keys = [k for k in client.scan_iter(match=f"{nested}:*", count=1000)]
    assert f"{nested}:run:r3".encode() in nested_keys
    code, out, _ = cli(capsys, "stats", "--scan", "--top", "0", "--url", redis_url,
                       "--prefix", prefix)  # fmt: skip
    assert code == 0
    assert f"run sets: {len(runs):,} keys, {run_bytes:,} bytes\n" in out
    orphans = re.search(r"orphans \(keys no registered thread reaches\): ([\d,]+) keys", out)
    assert orphans is not None
    assert int(orphans.group(1).replace(",", "")) == len(set(nested_keys) - set(runs))


def test_a_key_pattern_refusal_names_the_prefix_and_the_acl_pattern(
    redis_url: str,
    prefix: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    standalone: None,
) -> None:
    """A user whose ACL key patterns leave the prefix out was told it lacked commands."""
    if int(client.info("server")["redis_version"].split(".")[0]) < 6:
        pytest.skip("ACL users: Redis 6 and later")
    chat(redis_url, prefix, {"a": 1})
    user = f"cli-{uuid.uuid4().hex[:8]}"
    client.execute_command("ACL", "SETUSER", user, "on", ">pw", "~elsewhere:*", "&*", "+@all")
    try:
        hostport = redis_url.split("//", 1)[1]
        url = f"redis://{user}:pw@{hostport}"
        for argv in (["threads"], ["stats"], ["history", "a"], ["show", "a"]):
            code, _, err = cli(capsys, *argv, "--url", url, "--prefix", prefix)
            assert code == 1 and err.count("\n") == 1, err
            assert f"may not access the keys of --prefix {prefix!r}" in err, err
            assert f"~{prefix}:*" in err and "pw@" not in err
    finally:
        client.execute_command("ACL", "DELUSER", user)


def test_checkpoint_counts_are_what_history_lists(
    redis_url: str, prefix: str, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`threads`, `stats` and the prompts of delete and prune counted every timeline entry,
    so an entry whose checkpoint is gone (expired under a TTL, not yet swept by a put) and,
    but for `stats`, which names the key, a member that is not UTF-8 (no saver writes one; no
    read lists it) made them disagree with `history`. They count what `history` lists."""
    chat(redis_url, prefix, {"t": 2, "u": 1})
    tk = KeySpace(prefix).thread("t")
    (oldest,) = client.zrange(tk.idx(""), 0, 0)
    client.delete(tk.cp("", oldest.decode()))  # as a TTL leaves it until a put sweeps it
    assert len(listed(redis_url, prefix, "t")) == 5
    argv = ("--url", redis_url, "--prefix", prefix)

    def counts(*cmd: str) -> dict[str, int]:
        code, out, err = cli(capsys, *cmd, *argv)
        assert code == 0, err
        rows = [line.split() for line in out.splitlines()[1:] if line.startswith(" ")]
        return {row[-1]: int(row[column].replace(",", "")) for row in rows}

    column = 2
    assert counts("stats") == {"t": 5, "u": 3}
    client.zadd(tk.idx(""), {b"\xff\xfe": 0})
    column = 0
    assert counts("threads") == {"t": 5, "u": 3}
    code, out, err = cli(capsys, "prune", "t", "u", "--strategy", "delete", "--yes", *argv)
    assert (code, out) == (
        0,
        "pruned 2 threads (delete): 8 checkpoints before, 0 checkpoints now\n",
    ), err
    chat(redis_url, prefix, {"t": 1})
    client.zadd(tk.idx(""), {b"\xff\xfe": 0})
    code, out, err = cli(capsys, "delete", "t", "--yes", *argv)
    assert (code, out) == (0, "deleted thread 't' (3 checkpoints)\n"), err


def test_stats_leaves_out_threads_that_expired_and_says_how_many(
    redis_url: str,
    prefix: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    standalone: None,
) -> None:
    """`stats` counted a thread whose keys had all expired under a TTL, and whose registry
    entry no put had swept yet, as a thread of 0 keys and 0 bytes: "2 threads ... bytes per
    thread on average" for one thread a read can list. It is left out and named apart."""
    chat(redis_url, prefix, {"t": 1, "u": 1}, ttl=3600)
    gone = [key for key in client.scan_iter(match=f"{prefix}:*") if b"{u}" in key]
    assert gone
    client.delete(*gone)  # as the TTL leaves it: the registry entry alone, due for a sweep
    client.zadd(KeySpace(prefix).threads, {"u": 1})

    def stats() -> tuple[str, list[str]]:
        """What `stats` printed, and the threads of its rows."""
        code, out, err = cli(capsys, "stats", "--url", redis_url, "--prefix", prefix)
        assert code == 0, err
        return out, [line.split()[-1] for line in out.splitlines()[1:] if line.startswith(" ")]

    out, rows = stats()
    assert rows == ["t"]
    assert re.search(r"^1 thread: 3 checkpoints, ", out, re.MULTILINE), out
    assert (
        "expired threads: 1 registry entry past their TTL, not counted above (later puts "
        "to the prefix sweep them)\n" in out
    )
    chat(redis_url, prefix, {"t": 1}, ttl=3600)  # a put sweeps the entry
    out, _ = stats()
    assert "expired threads" not in out, out
    # A thread whose namespace set went some other way (deleted, evicted) while its entry
    # has not expired is still a thread: it stays a row (the keys only that set leads to
    # show as orphans under --scan).
    chat(redis_url, prefix, {"v": 1}, ttl=3600)
    client.delete(KeySpace(prefix).thread("v").ns)
    out, rows = stats()
    assert "expired threads" not in out, out
    assert sorted(rows) == ["t", "v"]


def test_checkpoint_counts_read_a_long_timeline_a_page_at_a_time(
    redis_url: str,
    prefix: str,
    client: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The count read a timeline whole (ZRANGE 0 -1) and checked it with one EXISTS of all
    its checkpoint keys: past 1,048,576 checkpoints in one namespace Redis 5 and 6 drop the
    connection (their argument limit), and `threads`, `delete` and `prune` failed as "cannot
    connect". Here the page is 4 ids: every command stays within it, the count is exact."""
    monkeypatch.setattr(_inspect, "_MEMBERS", 4)
    monkeypatch.setattr(_inspect, "_PAGES_HELD", 2)
    chat(redis_url, prefix, {"t": 4, "u": 1})  # 12 and 3 checkpoints
    tk = KeySpace(prefix).thread("t")
    client.delete(tk.cp("", client.zrange(tk.idx(""), 5, 5)[0].decode()))
    sent: list[tuple[Any, ...]] = []
    pipeline = _inspect.Inspector._pipeline

    def spy(self: Any, commands: Any) -> Any:
        sent.extend(commands)
        return pipeline(self, commands)

    monkeypatch.setattr(_inspect.Inspector, "_pipeline", spy)
    code, out, err = cli(capsys, "threads", "--url", redis_url, "--prefix", prefix)
    assert code == 0, err
    rows = {line.split()[-1]: line.split()[0] for line in out.splitlines()[1:]}
    assert rows == {"t": "11", "u": "3"}
    assert max(len(c) for c in sent if c[0] in ("ZRANGE", "EXISTS")) == 5  # a command and 4


def test_every_command_names_the_rerun_of_an_unfinished_migration(
    redis_url: str,
    prefix: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    standalone: None,
) -> None:
    """`threads`, `stats`, `delete` and `prune` named the rerun (`--prefix OLD --to-prefix
    NEW`, OLD read from the parked 0.1.0 registry); `history` and `show`, refused by the saver,
    asked the user to find OLD."""
    old = f"{{{prefix}}}"  # a 0.1.0 prefix the savers refuse, migrated into `prefix`
    client.hset(f"{prefix}:v010:threads", f"{old}:idx:t:", '{"thread": "t", "ns": ""}')
    rerun = f"`plainredis migrate --url redis://... --prefix '{old}' --to-prefix {prefix}`"
    for cmd in (["threads"], ["stats"], ["history", "t"], ["show", "t"], ["delete", "t", "-y"],
                ["prune", "t", "-y"]):  # fmt: skip
        code, out, err = cli(capsys, *cmd, "--url", redis_url, "--prefix", prefix)
        assert (code, out) == (1, ""), cmd
        assert err.count("\n") == 1 and "has not finished" in err and rerun in err, (cmd, err)


@pytest.mark.parametrize("found", ["0.1.0-registry", "parked-registry", "foreign-key"])
def test_a_read_only_command_refused_does_not_say_a_write_was_refused(
    redis_url: str,
    prefix: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    standalone: None,
    found: str,
) -> None:
    """`plainredis threads`, `history` and `show` only read, yet a 0.1.0 keyspace, an
    unfinished migration or a foreign key refused them with "... Nothing was written.", as
    if they had tried to write. The refusals say that the keyspace is unchanged, which holds
    for the reads as for the writes the savers refuse."""
    chat(redis_url, prefix, {"t": 1})
    if found == "0.1.0-registry":
        client.delete(KeySpace(prefix).threads)
        client.hset(KeySpace(prefix).threads, f"{prefix}:idx:t:", '{"thread": "t", "ns": ""}')
    elif found == "parked-registry":
        client.hset(f"{prefix}:v010:threads", f"{prefix}:idx:t:", '{"thread": "t", "ns": ""}')
    else:
        client.delete(KeySpace(prefix).threads)
        client.rpush(KeySpace(prefix).threads, "another program's")
    before = {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}:*")}
    commands = [["threads"], ["stats"], ["stats", "--scan"]]
    if found == "parked-registry":  # which the saver behind `history` and `show` refuses too
        commands += [["history", "t"], ["show", "t"]]
    for cmd in commands:
        code, out, err = cli(capsys, *cmd, "--url", redis_url, "--prefix", prefix)
        assert (code, out) == (1, ""), (cmd, err)
        assert err.count("\n") == 1 and "The keyspace is unchanged." in err, (cmd, err)
        assert "Nothing was written" not in err, (cmd, err)
    assert {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}:*")} == before


def test_the_rerun_migrate_names_runs_as_written(
    redis_url: str,
    prefix: str,
    client: redis.Redis,
    capsys: pytest.CaptureFixture[str],
    standalone: None,
) -> None:
    """A migrate refused while another run is unfinished named the rerun as `plainredis
    migrate --prefix OLD --to-prefix NEW`, which exits 2: --url is required."""
    old, into = f"{prefix}-old", f"{prefix}-into"
    client.set(f"{old}:v010:parked", into)  # a run from `old` into `into` that stopped
    client.hset(f"{into}:v010:threads", f"{old}:idx:t:", '{"thread": "t", "ns": ""}')
    for argv in (["--prefix", old], ["--prefix", into]):
        code, out, err = cli(capsys, "migrate", "--url", redis_url, *argv)
        assert (code, out) == (1, ""), err
        found = re.search(r"`(plainredis migrate [^`]*)`", err)
        assert found is not None, err
        words = shlex.split(found.group(1).replace("redis://...", redis_url))
        parsed = _parser().parse_args(words[1:])
        assert (parsed.url, parsed.prefix, parsed.to_prefix) == (redis_url, old, into)


@pytest.mark.parametrize("ttl", ["0", "-5", "nan", "inf", "1e10", "abc"])
def test_a_ttl_refused_names_the_option_as_typed(
    ttl: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--ttl 0` was refused as 'ttl=0.0 ...: pass e.g. ttl=7 * 24 * 3600', Python that a
    shell expands (`*`) and argparse refuses."""
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--url", "redis://127.0.0.1:1/0", "--ttl", ttl])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --ttl: {ttl!r} is not " in err, err
    assert "ttl=" not in err and "*" not in err and "--ttl 604800" in err, err


def test_threads_shows_an_expiry_past_year_9999_instead_of_a_traceback(
    redis_url: str, prefix: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """A namespace score no saver writes (1e300 ms) made `threads` raise OverflowError after
    printing part of its table."""
    chat(redis_url, prefix, {"a": 1}, ttl=3600)
    client.zadd(KeySpace(prefix).thread("a").ns, {"": 1e300})
    code, out, err = cli(capsys, "threads", "--url", redis_url, "--prefix", prefix)
    assert code == 0 and "Traceback" not in err
    assert "after 9999-12-31" in out and "a" in out.split()


def test_show_prints_a_message_field_whose_equality_is_no_bool(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ToolMessage whose artifact is a numpy array made `show` fail with a traceback
    ("the truth value of an array ... is ambiguous"): it compared the field with `==`."""
    numpy = pytest.importorskip("numpy")
    from langchain_core.messages import ToolMessage

    checkpoint = empty_checkpoint()
    message = ToolMessage(content="r", tool_call_id="c1", artifact=numpy.arange(3), id="m")
    checkpoint["channel_values"] = {"messages": [message]}
    with RedisSaver(redis_url, prefix=prefix) as saver:
        versions = {"messages": saver.get_next_version(None, None)}
        checkpoint["channel_versions"] = versions
        saver.put(
            {"configurable": {"thread_id": "np", "checkpoint_ns": ""}}, checkpoint, {}, versions
        )
    code, out, err = cli(capsys, "show", "np", "--url", redis_url, "--prefix", prefix)
    assert (code, err) == (0, ""), err
    assert '"artifact"' in out and '"tool_call_id": "c1"' in out


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("redis://admin:Xy/Z+9q==@127.0.0.1:{port}/3", "Xy/Z+9q=="),  # '/' ends the host early
        ("redis://:p%40ss/w%25rd%3Ax@127.0.0.1:{port}/0", "p%40ss"),
        ("redis://:p@ss/w%rd:x@127.0.0.1:{port}/0", "ss/w%rd"),
        ("redis://:s3cr?et@127.0.0.1:{port}/0", "s3cr"),  # '?' starts a query early
        ("redis://:s3cr#et@127.0.0.1:{port}/0", "s3cr"),  # '#' starts a fragment
        ("redis://127.0.0.1:{port}/0?pasword=hunter2", "hunter2"),  # a misspelt option
        ("redis://:s3cr3t'x?y@127.0.0.1:{port}/0", "s3cr3t"),  # redis-py quotes it with "
    ],
)
def test_a_malformed_url_is_shown_without_its_password(
    url: str, secret: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`urlsplit` ends the user info at the first '/', '?' or '#', so the error for such a URL
    (the one `check_database` exists to name) showed the password in full or in part; a
    misspelt `pasword=` option was shown with its value too (found by review)."""
    url = url.format(port=1)
    with pytest.raises(SystemExit):
        main(["threads", "--url", url])
    err = capsys.readouterr().err
    assert secret not in err and "***" in err, err
    for given in (url, url.replace("redis://", "http://")):
        with pytest.raises((TypeError, ValueError)) as refused:
            RedisSaver(given)
        assert secret not in str(refused.value), refused.value


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://user@host", "redis://user@host"),
        ("rediss://u:p@h:1/2?ssl_cert_reqs=none", "rediss://u:***@h:1/2?ssl_cert_reqs=none"),
        ("redis://h:1/0?client_name=me@work&x=1", "redis://h:1/0?client_name=me@work&x=1"),
        ("redis://u:p@h/0?next=a@b", "redis://u:***@h/0?next=a@b"),
        ("redis://:p@ss/w%rd:x@127.0.0.1:1/0", "redis://:***@127.0.0.1:1/0"),
        ("redis://h/0?pw=a&auth=b&db=1", "redis://h/0?pw=***&auth=***&db=1"),
    ],
)
def test_urls_in_messages_keep_all_but_their_credentials(url: str, shown: str) -> None:
    """The user info ended at the URL's last '@', so an '@' in a query value made the host,
    port and database read as a password (found by review)."""
    from langgraph_checkpoint_plainredis._shell import redacted, scrubbed

    assert redacted(url) == shown
    # Quoted words of an error that are no piece of the password stay.
    said = "it has a '/' in its username or password; port 'port'"
    assert scrubbed(said, "redis://:a/support@h:1/0") == said


def test_the_prefix_suggested_for_one_the_savers_refuse_is_one_migrate_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """For `--prefix 'lg:*'` migrate suggested `--to-prefix lg`, which it then refused: the
    keys under one prefix start with the other (found by review)."""
    for prefix in ("lg:*", "lg:{}", "{agents}"):
        with pytest.raises(SystemExit):
            main(["migrate", "--url", "redis://127.0.0.1:1/0", "--prefix", prefix])
        err = capsys.readouterr().err
        found = re.search(r"accept with --to-prefix (\S+)", err)
        assert found is not None, err
        argv = ["--url", "redis://127.0.0.1:1/0", "--prefix", prefix, "--to-prefix"]
        args = _parser().parse_args(["migrate", *argv, shlex.split(found.group(1))[0]])
        from langgraph_checkpoint_plainredis._migrate import target_prefix

        target_prefix(args.prefix, args.to_prefix)  # taken: no ValueError


def test_a_bool_thread_id_is_refused_as_delete_thread_refuses_it(
    redis_url: str, prefix: str
) -> None:
    """`put` stored thread_id=True as thread 'True', which `delete_thread(True)` refused."""
    with RedisSaver(redis_url, prefix=prefix) as saver:
        checkpoint = empty_checkpoint()
        with pytest.raises(TypeError, match=r"\['thread_id'\] must be a str, got bool True"):
            saver.put(
                {"configurable": {"thread_id": True, "checkpoint_ns": ""}}, checkpoint, {}, {}
            )
        with pytest.raises(TypeError, match=r"\['thread_id'\] must be a str, got bool True"):
            saver.get_tuple({"configurable": {"thread_id": True}})
        assert saver.get_tuple({"configurable": {"thread_id": "True"}}) is None
