"""`plainredis` on URLs and keyspaces the commands once failed on with a traceback or a bare
Redis error: unix sockets, unknown URL options, DeltaChannel threads, foreign keys."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_testkit import servers
from langgraph_checkpoint_plainredis import RedisSaver
from langgraph_checkpoint_plainredis._cli import main
from langgraph_checkpoint_plainredis._keys import KeySpace

try:
    from langgraph.channels.delta import DeltaChannel
except ImportError:  # a langgraph before DeltaChannel (the lowest-dependency run)
    DeltaChannel = None


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def _extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Logged(TypedDict):
    log: Annotated[list[str], DeltaChannel(_extend)]  # read when a graph is built


def reply(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}


def chat(url: str, prefix: str, threads: dict[str, int]) -> None:
    """Runs `turns` chat turns on each thread, through a real graph."""
    with RedisSaver(url, prefix=prefix) as saver:
        graph = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
        app = graph.compile(checkpointer=saver)
        for thread_id, turns in threads.items():
            for turn in range(turns):
                config = {"configurable": {"thread_id": thread_id}}
                app.invoke({"messages": [HumanMessage(f"question {turn}")]}, config)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def counts(url: str, prefix: str, *thread_ids: str) -> dict[str, int]:
    with RedisSaver(url, prefix=prefix) as saver:
        return {
            t: len(list(saver.list({"configurable": {"thread_id": t, "checkpoint_ns": ""}})))
            for t in thread_ids
        }


@pytest.mark.parametrize("kind", ["redis-5", "redis-7"])
def test_every_command_takes_a_unix_socket_url(
    capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """The savers take unix:///path URLs; the inspector rebuilt them as unix:/path, which
    redis-py refuses, so every command but migrate exited 2 on them."""
    # A path relative to the server's dir (its working directory): short enough for a socket.
    extra = ("--unixsocket", "redis.sock", "--unixsocketperm", "700")
    with servers.start(kind, extra_args=extra) as srv:
        sock = srv.directory / "redis.sock"
        assert sock.is_socket()
        url = f"unix://{sock}"
        chat(url, "lg", {"t": 2, "u": 1})
        # A query is kept too, but for the protocol the inspector drops (it reads RESP2).
        for given in (url, f"{url}?db=0&protocol=3"):
            code, out, err = cli(capsys, "threads", "--url", given)
            assert code == 0, err
            assert sorted(line.split()[-1] for line in out.splitlines()[1:]) == ["t", "u"]
            code, out, err = cli(capsys, "history", "t", "--url", given)
            assert code == 0 and len(out.splitlines()) == 1 + 6, err
            code, out, err = cli(capsys, "show", "t", "--url", given)
            assert code == 0 and '"thread_id": "t"' in out, err
            code, out, err = cli(capsys, "stats", "--url", given)
            assert code == 0 and "2 threads: 9 checkpoints" in out, err
        code, out, err = cli(capsys, "prune", "t", "--yes", "--url", url)
        assert code == 0 and "6 checkpoints before, 1 checkpoint now" in out, err
        code, out, err = cli(capsys, "delete", "u", "--yes", "--url", url)
        assert code == 0 and out == "deleted thread 'u' (3 checkpoints)\n", err
        assert counts(url, "lg", "t", "u") == {"t": 1, "u": 0}


def test_prune_keep_latest_refusal_is_one_line(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The saver refuses keep_latest on a thread whose DeltaChannel marks name no channels
    (LangGraph.js's); the command let its NotImplementedError out as a traceback. Now one
    line on stderr, exit 1, and no thread asked for is pruned. A LangGraph DeltaChannel
    thread is pruned (what its state is rebuilt from is kept)."""
    if DeltaChannel is None:
        pytest.skip("this langgraph has no DeltaChannel")

    def step(state: Logged) -> dict[str, Any]:
        return {"log": [f"n{len(state['log'])}"]}

    builder = StateGraph(Logged)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    with RedisSaver(redis_url, prefix=prefix) as saver:
        app = builder.compile(checkpointer=saver)
        for i in range(2):
            app.invoke({"log": [f"in{i}"]}, {"configurable": {"thread_id": "graph"}})
        config: Any = {"configurable": {"thread_id": "js", "checkpoint_ns": ""}}
        for step_ in range(2):
            meta: Any = {"step": step_, "delta_writes_versioned": True}
            config = saver.put(config, empty_checkpoint(), meta, {})
        state = app.get_state({"configurable": {"thread_id": "graph"}}).values
    chat(redis_url, prefix, {"plain": 2})
    before = counts(redis_url, prefix, "plain", "js")
    args = ("--url", redis_url, "--prefix", prefix)
    code, out, err = cli(capsys, "prune", "plain", "js", "--yes", *args)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith("plainredis: error: ")
    assert "name no channels" in err and "'js'" in err and "Nothing was pruned" in err
    assert "--strategy delete" in err  # the fix, in the command line's words
    assert counts(redis_url, prefix, "plain", "js") == before

    code, out, err = cli(capsys, "prune", "graph", "plain", "--yes", *args)
    assert code == 0, err
    with RedisSaver(redis_url, prefix=prefix) as saver:
        app = builder.compile(checkpointer=saver)
        assert app.get_state({"configurable": {"thread_id": "graph"}}).values == state
    code, out, err = cli(capsys, "prune", "js", "--strategy", "delete", "--yes", *args)
    assert code == 0, err
    assert counts(redis_url, prefix, "js") == {"js": 0}


@pytest.mark.parametrize(
    "command",
    [
        ["threads"],
        ["history", "t"],
        ["show", "t"],
        ["stats"],
        ["delete", "t", "--yes"],
        ["prune", "t", "--yes"],
        ["migrate"],
    ],
)
@pytest.mark.parametrize(
    ("option", "hint"), [("bogus=1", "bogus='1'"), ("socket_timout=5", "socket_timeout?")]
)
def test_an_unknown_url_option_exits_2_naming_it(
    redis_url: str,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    option: str,
    hint: str,
) -> None:
    """redis-py hands a URL's query options to its connections, which raised a TypeError
    traceback at the first command for one they do not take."""
    chat(redis_url, prefix, {"t": 1})
    url = redis_url + ("&" if "?" in redis_url else "?") + option
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--url", url, "--prefix", prefix])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    # The command's own usage line (it was the top-level one), then one line.
    assert err.startswith(f"usage: plainredis {command[0]} "), err
    last = err.splitlines()[-1]
    assert last.startswith(f"plainredis {command[0]}: error: --url {url!r}: it has the option ")
    assert f"error: --url {url!r}: it has the option {option.split('=')[0]}=" in err
    assert hint in err and "correct its spelling, or remove it from the URL" in err
    assert counts(redis_url, prefix, "t") == {"t": 3}  # nothing was deleted or pruned


def test_a_known_url_option_is_taken(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    chat(redis_url, prefix, {"t": 1})
    url = redis_url + ("&" if "?" in redis_url else "?") + "socket_timeout=5"
    code, out, err = cli(capsys, "threads", "--url", url, "--prefix", prefix)
    assert code == 0 and out.splitlines()[1].split() == ["3", "1", "never", "t"], err


@pytest.mark.parametrize("where", ["ns", "idx", "keys"])
def test_a_foreign_key_is_named_with_the_fix(
    redis_url: str, prefix: str, client: Any, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """A list where the layout keeps a zset (another program's key under the prefix):
    `threads`, `stats` and `delete` printed Redis's bare WRONGTYPE, naming neither the key
    nor the fix; the savers name both, and so do the commands now."""
    chat(redis_url, prefix, {"good": 1, "t": 1})
    tk = KeySpace(prefix).thread("t")
    key = {"ns": tk.ns, "idx": tk.idx(""), "keys": tk.keys("")}[where]
    client.delete(key)
    client.rpush(key, "another program's")
    args = ("--url", redis_url, "--prefix", prefix)
    commands = [["threads"], ["stats"], ["stats", "--scan"], ["delete", "t", "--yes"]]
    commands.append(["prune", "t", "--yes"])
    if where == "keys":  # which `threads` does not read
        commands.remove(["threads"])
    for command in commands:
        code, out, err = cli(capsys, *command, *args)
        assert code == 1, (command, out, err)
        assert err.count("\n") == 1 and err.startswith("plainredis: error: "), (command, err)
        assert f"Redis key {key!r} is a list, but the plainredis layout keeps a zset" in err
        assert "delete the foreign key" in err and "WRONGTYPE" not in err
    assert client.type(key) in (b"list", "list")  # nothing was deleted
    assert counts(redis_url, prefix, "good") == {"good": 3}

    client.delete(key)  # the fix the message names
    code, out, err = cli(capsys, "threads", *args)
    assert code == 0, err


@pytest.mark.parametrize("kind", ["redis-5", "redis-7"])
def test_a_read_only_replica_gets_one_line_naming_the_primary(
    capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """On a read-only replica `delete` and `prune` printed a raw "Error running script ...
    -READONLY", and `migrate` an error with redis-py's pipeline clause twice and no fix."""
    with servers.start(kind) as primary:
        chat(primary.url, "lg", {"t": 2})
        before = counts(primary.url, "lg", "t")
        write_010 = redis.Redis.from_url(primary.url, protocol=2)
        write_010.hset("old:threads", "old:idx:x:", '{"thread": "x", "ns": ""}')
        write_010.close()
        with servers.start(
            kind, extra_args=("--replicaof", "127.0.0.1", str(primary.port))
        ) as replica:
            with redis.Redis.from_url(replica.url, protocol=2) as follower:
                deadline = time.monotonic() + 30
                while not follower.exists("old:threads") and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert follower.exists("old:threads")
            for argv in (
                ["delete", "t", "--yes"],
                ["prune", "t", "--yes"],
                ["prune", "t", "--strategy", "delete", "--yes"],
                ["migrate", "--prefix", "old"],
            ):
                code, out, err = cli(capsys, *argv, "--url", replica.url)
                assert code == 1 and err.count("\n") == 1, (argv, err)
                assert err.startswith(
                    f"plainredis: error: the server at {replica.url} is a read-only replica"
                ), err
                assert "point --url at its primary" in err and "script" not in err, err
                assert "pipeline" not in err, err
        assert counts(primary.url, "lg", "t") == before


def test_a_full_disk_under_stdout_is_one_line_not_a_traceback(redis_url: str, prefix: str) -> None:
    """`plainredis threads > /dev/full` ended with an OSError traceback."""
    chat(redis_url, prefix, {"t": 1})
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "langgraph_checkpoint_plainredis", "threads", "--url"]
            + [redis_url, "--prefix", prefix],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        "plainredis: error: cannot write the output to stdout ([Errno 28] No space left"
    ), done.stderr


def test_a_password_given_to_a_server_without_one_is_to_be_removed(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said "put user:password in the --url", the opposite of the fix."""
    if "@" in redis_url:
        pytest.skip("a server with a password")
    url = redis_url.replace("redis://", "redis://:secret@", 1)
    for command in ("threads", "migrate"):
        code, out, err = cli(capsys, command, "--url", url)
        assert code == 1 and err.count("\n") == 1, err
        assert "the server has no password; remove the user:password" in err, err
        assert "put user:password" not in err and "secret" not in err, err


@pytest.mark.standalone  # a cluster has one database, and no registry
def test_a_database_the_server_lacks_names_the_ones_it_has(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, _ = redis_url.partition("?")
    url = base.rsplit("/", 1)[0] + "/99"
    code, out, err = cli(capsys, "threads", "--url", url)
    assert code == 1 and err.count("\n") == 1, err
    assert "has no such database (DB index is out of range): name one it has" in err, err
    assert "0 to 15" in err


@pytest.mark.standalone  # a cluster has one database, and no registry
def test_threads_under_a_prefix_nothing_was_stored_under_says_so(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped `--prefix LG` printed "0 threads" with no hint."""
    chat(redis_url, prefix, {"t": 1})
    code, out, err = cli(capsys, "threads", "--url", redis_url, "--prefix", prefix.upper())
    assert code == 0, err
    assert err == (
        f"0 threads under prefix {prefix.upper()!r}: nothing is stored under it (no "
        f"registry '{prefix.upper()}:threads'); is --prefix mistyped? (the savers' default is "
        "lg)\n"
    )
    code, out, err = cli(capsys, "threads", "--url", redis_url, "--prefix", prefix)
    assert code == 0 and err == f"1 thread under prefix {prefix!r}\n", err


def test_a_migrate_usage_error_shows_the_migrate_usage_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`migrate --prefix lg:` printed the top-level usage line (`plainredis [-h] ...`)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--url", "redis://127.0.0.1:1/0", "--prefix", "lg:"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: plainredis migrate ") and "plainredis migrate: error:" in err
