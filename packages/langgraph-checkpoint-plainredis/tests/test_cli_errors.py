"""`plainredis` on URLs and keyspaces the commands once failed on with a traceback or a bare
Redis error: unix sockets, unknown URL options, DeltaChannel threads, foreign keys."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
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
    assert err.startswith("usage: plainredis") and err.count("\n") == 2
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
