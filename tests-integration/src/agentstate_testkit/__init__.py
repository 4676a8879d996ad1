"""Private test infrastructure: throwaway Redis, Valkey and PostgreSQL servers for tests.

`agentstate_testkit.servers` provisions and runs the servers; `agentstate_testkit.plugin` is
the pytest plugin with the `redis_url`, `postgres_url` and `server_pool` fixtures; and
`python -m agentstate_testkit` provisions or runs servers from the shell.
"""

from agentstate_testkit.servers import (
    DEFAULT_REDIS_KINDS,
    EXTERNAL,
    KINDS,
    POSTGRES_KINDS,
    REDIS_KINDS,
    Server,
    ServerError,
    ServerPool,
    cache_dir,
    cli_path,
    external_url,
    provision,
    start,
)

__all__ = [
    "DEFAULT_REDIS_KINDS",
    "EXTERNAL",
    "KINDS",
    "POSTGRES_KINDS",
    "REDIS_KINDS",
    "Server",
    "ServerError",
    "ServerPool",
    "cache_dir",
    "cli_path",
    "external_url",
    "provision",
    "start",
]
