"""The agentstate demo: a chat graph on plain Redis with a bounded message window.

A deterministic chat graph (no LLM, no network) runs a dozen turns on `AsyncRedisSaver`
wrapped in `ReducingSaver`. Turns that leave the window go to an `on_prune` hook that writes
them into a LangGraph store under the run's memory namespace.

    REDIS_URL=redis://127.0.0.1:6379/0 python examples/demo.py   # your server
    python examples/demo.py                                       # a private, throwaway Redis

It then runs the same conversation on the blocking `RedisSaver` with `invoke`; `--sync` runs
only that part.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

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


class Unreachable(Exception):
    """REDIS_URL names a server the demo cannot use."""


def reachable(url: str) -> None:
    """Raises `Unreachable`, naming the fix, when the server at `url` does not answer PING."""
    try:
        with redis.Redis.from_url(url, protocol=2, socket_connect_timeout=3) as client:
            client.ping()
    except ValueError:  # redis-py, or urllib, cannot parse it (its words may quote the password)
        raise Unreachable(
            "REDIS_URL is not a Redis URL redis-py can parse: fix it "
            "(redis://[user:password@]host:port/db), or unset REDIS_URL and the demo starts "
            "a private Redis of its own"
        ) from None
    except (redis.RedisError, OSError) as error:
        raise Unreachable(
            f"REDIS_URL does not answer ({type(error).__name__}: {error}): fix the URL "
            "(redis://[user:password@]host:port/db), or unset REDIS_URL and the demo starts "
            "a private Redis of its own"
        ) from None


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """REDIS_URL when set, else a private Redis from the project's server harness."""
    if os.environ.get("REDIS_URL"):
        url = os.environ["REDIS_URL"]
        reachable(url)
        yield url
        return
    from agentstate_testkit.servers import start

    print("REDIS_URL is not set: starting a private Redis 5 for this demo...", flush=True)
    with start("redis-5") as server:
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
    except Unreachable as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    print("\nDone: every key the demo wrote was deleted again.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
