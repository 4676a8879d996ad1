from __future__ import annotations

import sys
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from agentstate_testkit.savers import SyncAsAsync
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver, _deflate

# `cli_helpers` importable: the workspace runs pytest with --import-mode=importlib, which
# does not put test directories on sys.path.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own: tests isolate by data, never by FLUSHALL."""
    return f"test:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(redis_url: str, redis_kind: str) -> Iterator[Any]:
    """A plain client for inspecting keys: a `RedisCluster` on cluster kinds."""
    factory = RedisCluster if redis_kind.endswith("-cluster") else redis.Redis
    c = factory.from_url(redis_url, protocol=2)
    yield c
    c.close()


@pytest.fixture
def sync_saver(redis_url: str, prefix: str) -> Iterator[RedisSaver]:
    with RedisSaver(redis_url, prefix=prefix) as saver:
        yield saver


@pytest.fixture
async def async_saver(redis_url: str, prefix: str) -> AsyncIterator[AsyncRedisSaver]:
    async with AsyncRedisSaver(redis_url, prefix=prefix) as saver:
        yield saver


@pytest.fixture(params=["async", "sync"])
async def saver(request: pytest.FixtureRequest, redis_url: str, prefix: str) -> AsyncIterator[Any]:
    """An async-interface saver: AsyncRedisSaver itself, or RedisSaver run in threads."""
    if request.param == "async":
        async with AsyncRedisSaver(redis_url, prefix=prefix) as s:
            yield s
    else:
        with RedisSaver(redis_url, prefix=prefix) as s:
            yield SyncAsAsync(s)


class _CountingInflater:
    """A raw inflater that adds the bytes it is fed to `fed` (its copies too)."""

    def __init__(self, real: Any, fed: list[int]) -> None:
        self.real, self.fed = real, fed

    def decompress(self, data: bytes) -> bytes:
        self.fed.append(len(data))
        out: bytes = self.real.decompress(data)
        return out

    def copy(self) -> _CountingInflater:
        return _CountingInflater(self.real.copy(), self.fed)

    @property
    def eof(self) -> bool:
        return bool(self.real.eof)

    @property
    def unused_data(self) -> bytes:
        return bytes(self.real.unused_data)


@pytest.fixture
def fed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the pieces of deflate data `_deflate.inflate_related` inflates."""
    sizes: list[int] = []

    class Zlib:
        def __getattr__(self, name: str) -> Any:
            return getattr(zlib, name)

        def decompressobj(self, *args: Any) -> _CountingInflater:
            return _CountingInflater(zlib.decompressobj(*args), sizes)

    monkeypatch.setattr(_deflate, "zlib", Zlib())
    return sizes
