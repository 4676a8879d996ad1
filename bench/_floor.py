"""The floor of the saver benchmarks: InMemorySaver plus one `PING` round trip per call.

`bench_savers.py` and `bench_turn.py` time it beside the savers. It imports only what a
saver benchmark imports anyway, so the process it runs in stays as small as theirs.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

__all__ = ["PingingMemorySaver"]


class _RedisPing:
    """One redis-py `PING` to `url`, blocking or asyncio."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, protocol=2)
        self.aclient = redis.asyncio.Redis.from_url(url, protocol=2)

    def ping(self) -> None:
        self.client.ping()

    async def aping(self) -> None:
        await self.aclient.ping()

    async def aclose(self) -> None:
        self.client.close()
        await self.aclient.aclose()


class _RawPing:
    """One `PING` to `url` on a plain socket: no client library, the round trip alone.

    Calls take a free connection from a list and put it back, as a pool does: LangGraph
    saves from fresh worker threads on every `invoke`, and concurrent saves need more than
    one connection (list `pop` and `append` are atomic, in threads and in asyncio alike).
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.sockets: list[socket.socket] = []
        self.free: list[socket.socket] = []
        self.streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    def ping(self) -> None:
        try:
            sock = self.free.pop()
        except IndexError:
            sock = socket.create_connection(self.address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sockets.append(sock)
        sock.sendall(b"PING\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(64)
            if not chunk:
                raise ConnectionError(f"{self.address} closed the connection")
            reply += chunk
        self.free.append(sock)

    async def aping(self) -> None:
        if self.idle:
            stream = self.idle.pop()
        else:
            stream = await asyncio.open_connection(*self.address)
            self.streams.append(stream)
        reader, writer = stream
        writer.write(b"PING\r\n")
        await reader.readline()
        self.idle.append(stream)

    async def aclose(self) -> None:
        for sock in self.sockets:
            sock.close()
        for _, writer in self.streams:
            writer.close()
            await writer.wait_closed()


class PingingMemorySaver(InMemorySaver):
    """InMemorySaver plus one `PING` per call: the round trips alone.

    Each put, put_writes, get_tuple, list and delete_thread first pings `url` (blocking or
    asyncio, as called), so a chat turn pays the round trips of a saver that makes one per
    call, and nothing else: no payload travels and the server runs no script. With `raw`,
    the ping goes over a plain socket instead of redis-py: no client library could make a
    round trip cheaper, so no saver making one per call can be faster on the same machine.
    """

    def __init__(self, url: str, *, raw: bool = False) -> None:
        super().__init__()
        self.pinger: _RedisPing | _RawPing = _RawPing(url) if raw else _RedisPing(url)

    def put(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        self.pinger.ping()
        return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        self.pinger.ping()
        super().put_writes(*args, **kwargs)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.pinger.ping()
        return super().get_tuple(config)

    def list(self, *args: Any, **kwargs: Any) -> Iterator[CheckpointTuple]:
        self.pinger.ping()
        yield from super().list(*args, **kwargs)

    def delete_thread(self, thread_id: str) -> None:
        self.pinger.ping()
        super().delete_thread(thread_id)

    # InMemorySaver's async methods call the blocking ones: these ping once, asynchronously.
    async def aput(self, *args: Any, **kwargs: Any) -> RunnableConfig:
        await self.pinger.aping()
        return InMemorySaver.put(self, *args, **kwargs)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await self.pinger.aping()
        InMemorySaver.put_writes(self, *args, **kwargs)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        await self.pinger.aping()
        return InMemorySaver.get_tuple(self, config)

    async def alist(self, *args: Any, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        await self.pinger.aping()
        for item in InMemorySaver.list(self, *args, **kwargs):
            yield item

    async def adelete_thread(self, thread_id: str) -> None:
        await self.pinger.aping()
        InMemorySaver.delete_thread(self, thread_id)

    async def aclose(self) -> None:
        await self.pinger.aclose()
