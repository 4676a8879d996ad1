"""Stored bytes, counted exactly: raw payloads against 0.1.0's JSON+base64 wrapping."""

from __future__ import annotations

import base64
import json
import random
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_checkpoint_plainredis import RedisSaver
from langgraph_checkpoint_plainredis._codec import decode_blob, decode_checkpoint, decode_write
from langgraph_checkpoint_plainredis._errors import CorruptDataError
from langgraph_checkpoint_plainredis._keys import KeySpace, blob_suffix


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


WORDS = "redis graph state thread window memory latency replica shard key value turn agent".split()


def reply(state: State) -> dict[str, Any]:
    # Varied text (a seeded shuffle), so compression has no easy repetition to exploit.
    rng = random.Random(len(state["messages"]))
    answer = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(60))
    return {"messages": [AIMessage(content=answer)]}


def wrapped(typed: tuple[str, bytes]) -> int:
    """Bytes 0.1.0 stored for one serialized value."""
    return len(json.dumps({"t": typed[0], "d": base64.b64encode(typed[1]).decode()}))


def test_a_50_turn_thread_stores_at_most_three_quarters_of_the_wrapped_format(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    with RedisSaver(redis_url, prefix=prefix) as saver:
        graph = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
        app = graph.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "chat"}}
        for turn in range(50):
            app.invoke({"messages": [HumanMessage(f"question number {turn} about Redis")]}, config)
    ours = theirs = 0
    for key in client.scan_iter(match=f"{prefix}:*"):
        name = key.decode()
        if ":cp:" in name:
            raw = client.get(key)
            stored = decode_checkpoint(raw, name)
            ours += len(raw)
            theirs += wrapped((stored.checkpoint[0], stored.checkpoint[1] + stored.metadata[1]))
        elif ":blob:" in name:
            raw = client.get(key)
            ours += len(raw)
            theirs += wrapped(decode_blob(raw, name))
        elif ":wr:" in name:
            for value in client.hvals(key):
                ours += len(value)
                theirs += wrapped(decode_write(value, name).value)
    assert theirs > 0
    assert ours <= 0.75 * theirs, (ours, theirs, ours / theirs)


def _chat_thread(redis_url: str, prefix: str, turns: int) -> dict[str, Any]:
    """Writes a chat thread of `turns` turns (three checkpoints each); returns its config."""
    config = {"configurable": {"thread_id": "chat"}}
    with RedisSaver(redis_url, prefix=prefix) as writer:
        app = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
        graph = app.compile(checkpointer=writer)
        for turn in range(turns):
            graph.invoke(
                {"messages": [HumanMessage(f"question number {turn} about Redis")]}, config
            )
    return config


def _listed_until_damage(
    reader: RedisSaver, config: dict[str, Any]
) -> tuple[list[Any], CorruptDataError]:
    """The checkpoints `list` yields before it raises CorruptDataError, and that error."""
    listed = []
    with pytest.raises(CorruptDataError) as caught:
        for tup in reader.list(config):
            listed.append(tup)
    return listed, caught.value


def test_a_page_of_history_inflates_the_messages_they_share_once(
    redis_url: str, prefix: str, client: redis.Redis, fed: list[int]
) -> None:
    """`list` of a chat thread read by a process that did not write it (nothing remembered):
    every checkpoint reads back as a read by id gives it, and the page's messages, stored
    as one growing body, are inflated about once instead of once per checkpoint."""
    config = _chat_thread(redis_url, prefix, turns=8)
    with RedisSaver(redis_url, prefix=prefix) as reader:
        page = list(reader.list(config, limit=10))
        inflated = sum(fed)
        for tup in page:
            alone = reader.get_tuple(tup.config)
            assert alone is not None
            assert alone.checkpoint == tup.checkpoint
            assert alone.metadata == tup.metadata
            assert alone.pending_writes == tup.pending_writes
    assert len(page) == 10
    keys = KeySpace(prefix).thread("chat")
    streams = 0  # the compressed bytes of the page's distinct message versions
    for version in {tup.checkpoint["channel_versions"]["messages"] for tup in page}:
        raw = client.get(keys.blob_at("", blob_suffix("messages", version)))
        assert raw is not None and raw[0] & 0x10  # compressed: all but 2 bytes a stream
        streams += len(raw) - 2
    assert 0 < inflated * 3 < streams, (inflated, streams)


def test_a_damaged_blob_is_reported_for_its_own_checkpoint_after_the_ones_before_it(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    """Blobs decoded ahead of their tuples: the checkpoints listed before the one reading a
    damaged blob still come out, then the error names that blob; and the first tuple of a
    long walk waits for one window of entries, not the whole page."""
    config = _chat_thread(redis_url, prefix, turns=8)
    keys = KeySpace(prefix).thread("chat")
    with RedisSaver(redis_url, prefix=prefix) as reader:
        windows: list[int] = []
        decode_window = reader._decode_window

        def counted(tk: Any, entries: Any, shared: Any) -> Any:
            windows.append(len(entries))
            return decode_window(tk, entries, shared)

        reader._decode_window = counted  # type: ignore[method-assign]
        walk = reader.list(config)
        next(walk)
        assert windows == [16]  # of 24 checkpoints on the page
        versions = [t.checkpoint["channel_versions"].get("messages") for t in reader.list(config)]
        compressed = [
            v
            for v in dict.fromkeys(versions)
            if v and (raw := client.get(keys.blob_at("", blob_suffix("messages", v))))
            if raw[0] & 0x10
        ]
        oldest = compressed[-1]
        damaged_key = keys.blob_at("", blob_suffix("messages", oldest))
        client.set(damaged_key, client.get(damaged_key)[:-3])
        listed, error = _listed_until_damage(reader, config)
    assert error.key == damaged_key
    assert len(listed) == versions.index(oldest) > 16  # past the first window


def test_a_damaged_payload_past_the_first_window_is_reported_in_its_turn(
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    config = _chat_thread(redis_url, prefix, turns=8)
    keys = KeySpace(prefix).thread("chat")
    with RedisSaver(redis_url, prefix=prefix) as reader:
        ids = [t.config["configurable"]["checkpoint_id"] for t in reader.list(config)]
        damaged_key = keys.cp("", ids[20])
        client.set(damaged_key, client.get(damaged_key)[:-5])
        listed, error = _listed_until_damage(reader, config)
    assert error.key == damaged_key
    assert len(listed) == 20
