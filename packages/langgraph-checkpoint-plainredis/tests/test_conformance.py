"""LangGraph's own contract: every capability detected and passing, both classes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

from agentstate_testkit.savers import SyncAsAsync, assert_conformance
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver


async def test_async_saver_conformance(redis_url: str) -> None:
    async def factory() -> AsyncIterator[AsyncRedisSaver]:
        async with AsyncRedisSaver(redis_url, prefix=f"conf:{uuid.uuid4().hex}") as saver:
            yield saver

    await assert_conformance(factory, "AsyncRedisSaver")


async def test_sync_saver_conformance(redis_url: str) -> None:
    async def factory() -> AsyncIterator[SyncAsAsync]:
        with RedisSaver(redis_url, prefix=f"conf:{uuid.uuid4().hex}") as saver:
            yield SyncAsAsync(saver)

    await assert_conformance(factory, "RedisSaver")


async def test_conformance_with_ttl(redis_url: str) -> None:
    async def factory() -> AsyncIterator[AsyncRedisSaver]:
        prefix = f"conf:{uuid.uuid4().hex}"
        async with AsyncRedisSaver(redis_url, prefix=prefix, ttl=600, refresh_on_read=True) as s:
            yield s

    await assert_conformance(factory, "AsyncRedisSaver(ttl=600)")


async def test_conformance_with_a_metadata_index(redis_url: str) -> None:
    async def factory() -> AsyncIterator[AsyncRedisSaver]:
        prefix = f"conf:{uuid.uuid4().hex}"
        async with AsyncRedisSaver(redis_url, prefix=prefix, index_metadata=("source",)) as s:
            await s.areindex()  # marks the index complete (instant: the prefix is empty)
            yield s

    await assert_conformance(factory, "AsyncRedisSaver(index_metadata=('source',))")
