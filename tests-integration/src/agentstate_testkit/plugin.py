"""Pytest plugin: fixtures that hand tests real, throwaway Redis, Valkey and PostgreSQL servers.

Registered through the `pytest11` entry point `agentstate_servers`, so every pytest run in the
workspace has these fixtures:

- `redis_url`: parametrized over `--redis-kinds` (ids like `[redis-5]`); `redis_kind` names
  the kind of the current parameter.
- `postgres_url`: a PostgreSQL 15 server.
- `server_pool`: the session's `ServerPool`, e.g. `server_pool.get("redis-7")`.

Servers start on first use and stop at the end of the session. A server that cannot be
provisioned or started fails the tests that need it; it never skips them.
"""

from __future__ import annotations

import os

import pytest

from agentstate_testkit.servers import (
    CLUSTER_KINDS,
    CLUSTER_SUFFIX,
    DEFAULT_REDIS_KINDS,
    EXTERNAL,
    REDIS_KINDS,
    ServerError,
    ServerPool,
    cache_dir,
    external_url,
)

__all__ = [
    "postgres_url",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_report_header",
    "pytest_unconfigure",
    "redis_kind",
    "redis_url",
    "server_pool",
]

_KINDS = pytest.StashKey[tuple[str, ...]]()
_POOL = pytest.StashKey[ServerPool]()
_MARKERS = {
    "redis": "needs a real Redis server from the harness",
    "postgres": "needs a real PostgreSQL server from the harness",
    "standalone": "runs `redis_url` on the selected standalone kinds only, not on clusters",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds `--redis-kinds`."""
    group = parser.getgroup("agentstate-servers", "throwaway servers (agentstate_testkit)")
    group.addoption(
        "--redis-kinds",
        metavar="KINDS",
        default=None,
        help=(
            "comma-separated Redis kinds that `redis_url` runs against, from "
            f"{', '.join((*REDIS_KINDS, *CLUSTER_KINDS, EXTERNAL))}. "
            "Default: $AGENTSTATE_REDIS_KINDS, else "
            f"`{EXTERNAL}` when $PLAINREDIS_TEST_URL is set, else {','.join(DEFAULT_REDIS_KINDS)}."
        ),
    )


def _selected_kinds(config: pytest.Config) -> tuple[str, ...]:
    option: str | None = config.getoption("--redis-kinds")
    text = option or os.environ.get("AGENTSTATE_REDIS_KINDS")
    if not text:
        return (EXTERNAL,) if external_url(EXTERNAL) else DEFAULT_REDIS_KINDS
    kinds = tuple(dict.fromkeys(kind.strip() for kind in text.split(",") if kind.strip()))
    unknown = [kind for kind in kinds if kind not in (*REDIS_KINDS, *CLUSTER_KINDS, EXTERNAL)]
    source = "--redis-kinds" if option else "AGENTSTATE_REDIS_KINDS"
    if unknown or not kinds:
        raise pytest.UsageError(
            f"{source}={text!r}: unknown kind {', '.join(unknown) or '(none)'}; "
            f"use a comma list of {', '.join((*REDIS_KINDS, *CLUSTER_KINDS, EXTERNAL))}"
        )
    return kinds


def pytest_configure(config: pytest.Config) -> None:
    """Reads the selected kinds and registers the `redis` and `postgres` markers."""
    config.stash[_KINDS] = _selected_kinds(config)
    known = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name, text in _MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {text}")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stops the session's servers, also after Ctrl-C or an internal error."""
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        pool.close()


def pytest_report_header(config: pytest.Config) -> str:
    """Shows the Redis kinds and the binary cache in the run header."""
    kinds: tuple[str, ...] = config.stash[_KINDS]
    return f"agentstate servers: redis kinds {','.join(kinds)}; cache {cache_dir()}"


def _parametrized_by_test(metafunc: pytest.Metafunc, name: str) -> bool:
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [part.strip() for part in names.split(",")]
        if name in names:
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrizes `redis_kind` (and so `redis_url`) over the selected kinds.

    A test that parametrizes `redis_kind` itself keeps its own values; one marked
    `standalone` gets the selected kinds that are not clusters.
    """
    if "redis_kind" in metafunc.fixturenames and not _parametrized_by_test(metafunc, "redis_kind"):
        kinds = metafunc.config.stash[_KINDS]
        if metafunc.definition.get_closest_marker("standalone"):
            kinds = tuple(k for k in kinds if not k.endswith(CLUSTER_SUFFIX))
        metafunc.parametrize("redis_kind", kinds, ids=kinds, scope="session")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks tests that use `redis_url` with `redis`, and `postgres_url` with `postgres`."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "redis_url" in names:
            item.add_marker("redis")
        if "postgres_url" in names:
            item.add_marker("postgres")


def _url(pool: ServerPool, kind: str) -> str:
    try:
        return pool.get(kind)
    except ServerError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def server_pool(pytestconfig: pytest.Config) -> ServerPool:
    """The session's `ServerPool`; it starts servers on first use and stops them at the end."""
    pool = pytestconfig.stash.get(_POOL, None)
    if pool is None:
        pool = pytestconfig.stash[_POOL] = ServerPool()
    return pool


@pytest.fixture(scope="session")
def redis_kind() -> str:
    """The Redis kind of the current `redis_url` parameter, e.g. `redis-5`."""
    pytest.fail(
        "redis_kind is set by parametrization: name `redis_url` or `redis_kind` as a test "
        "argument, or use server_pool.get(kind)",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def redis_url(redis_kind: str, server_pool: ServerPool) -> str:
    """The URL of a throwaway server of `redis_kind`; connect with `protocol=2` for Redis 5."""
    return _url(server_pool, redis_kind)


@pytest.fixture(scope="session")
def postgres_url(server_pool: ServerPool) -> str:
    """The URL of a throwaway PostgreSQL 15 server (or `AGENTSTATE_POSTGRES_URL`)."""
    return _url(server_pool, "postgres-15")
