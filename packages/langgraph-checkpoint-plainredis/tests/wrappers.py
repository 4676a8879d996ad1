"""Wrappers of a redis-py client, as instrumentation builds them: the savers and the
migration must judge a client by what it wraps."""

from __future__ import annotations

from typing import Any


class Forwarding:
    """Hands every attribute on to the client it wraps."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Transparent(Forwarding):
    """Also reports the wrapped client's class, as wrapt's proxies do."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return type(self._real)
