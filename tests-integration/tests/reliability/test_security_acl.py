"""Least privilege: the saver works as a Redis user confined to its prefix.

The ACL line is read from ``docs/security.md`` (so the documented line is the tested
one), applied with a fresh user name, password and key pattern per saver, and the full
conformance suite runs as that user on Redis 6, 7, 8 and Valkey. The commands it grants
are exactly those the saver can send: the Lua scripts' ``redis.call``/``redis.pcall``
commands, the plain commands the core plans, and EVALSHA/EVAL. Redis 6.2+ checks every
command a script runs, and its keys, against the user calling the script, so the key
pattern holds inside the scripts too. Redis 5 has no ACL: there, ``requirepass``.
"""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from redis.backoff import NoBackoff
from redis.retry import Retry
from reliability_support import cfg, keys_under

import langgraph_checkpoint_plainredis._core as core
from agentstate_testkit import start
from agentstate_testkit.savers import SyncAsAsync, assert_conformance
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver
from langgraph_checkpoint_plainredis._scripts import SCRIPTS

DOCS = Path(__file__).resolve().parents[3] / "docs"
DOC = DOCS / "security.md"
# The minimal line of this suite's page, and the broader one of the operations guide.
DOCUMENTED = ["security.md", "operations/access.md"]
ACL_KINDS = ["redis-6", "redis-7", "redis-8", "valkey"]
# How each server words a refusal inside a script (6.2: "can't access", 7+: "ACL failure").
DENIED = r"(?i)permission|acl failure|can't (access|run)"


def documented_acl(page: str = "security.md") -> tuple[str, list[str]]:
    """The user name and rules of the ``ACL SETUSER`` line on a docs page."""
    path = DOCS / page
    found = re.findall(r"^ACL SETUSER (\S+) (.+)$", path.read_text(), re.MULTILINE)
    assert len(found) == 1, f"{path} must hold exactly one ACL SETUSER line, found {found}"
    user, rules = found[0]
    return user, rules.split()


def commands_the_saver_sends() -> set[str]:
    """Every command in the saver's scripts and plans, plus EVALSHA and EVAL."""
    scripted = {
        name.lower()
        for script in SCRIPTS.values()
        for name in re.findall(r"redis\.p?call\('([A-Z]+)'", script.source)
    }
    planned = {name.lower() for name in re.findall(r'\(\s*"([A-Z]+)",', inspect.getsource(core))}
    return scripted | planned | {"evalsha", "eval"}


def rules_for(prefix: str, password: str, page: str = "security.md") -> list[str]:
    """The documented rules with this test's password and key pattern."""
    _, rules = documented_acl(page)
    out = []
    for rule in rules:
        if rule.startswith(">"):
            rule = f">{password}"
        elif rule.startswith("~"):
            assert rule == "~lg:*", f"the documented key pattern should be ~lg:*, not {rule}"
            rule = f"~{prefix}:*"
        out.append(rule)
    return out


def test_the_documented_acl_grants_exactly_what_the_saver_sends() -> None:
    _, rules = documented_acl()
    granted = {r[1:] for r in rules if r.startswith("+")}
    assert granted == commands_the_saver_sends()
    assert rules[:2] == ["reset", "on"], "start from nothing: reset, then on"
    assert [r for r in rules if r.startswith("~")] == ["~lg:*"]
    assert not [r for r in rules if r.startswith(("+@", "allkeys", "allcommands", "%", "&"))]


class AclUsers:
    """Creates users from the documented line on one server and removes them after."""

    def __init__(self, admin: redis.Redis, page: str = "security.md") -> None:
        self.admin = admin
        self.page = page
        kwargs = admin.connection_pool.connection_kwargs
        self.host, self.port = kwargs["host"], kwargs["port"]
        self.users: list[str] = []
        self.prefixes: list[str] = []

    def url_for(self, prefix: str) -> str:
        user, password = f"agent-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
        rules = rules_for(prefix, password, self.page)
        self.admin.execute_command("ACL", "SETUSER", user, *rules)
        self.users.append(user)
        self.prefixes.append(prefix)
        return f"redis://{user}:{password}@{self.host}:{self.port}/0"

    def close(self) -> None:
        for prefix in self.prefixes:
            keys = keys_under(self.admin, prefix)
            if keys:
                self.admin.delete(*keys)
        if self.users:
            self.admin.execute_command("ACL", "DELUSER", *self.users)
        self.admin.close()


@pytest.fixture
def acl(redis_url: str, request: pytest.FixtureRequest) -> Iterator[AclUsers]:
    page = getattr(request, "param", "security.md")
    users = AclUsers(redis.Redis.from_url(redis_url, protocol=2), page)
    yield users
    users.close()


@pytest.mark.parametrize("redis_kind", ACL_KINDS, scope="session")
@pytest.mark.parametrize("acl", DOCUMENTED, indirect=True)
@pytest.mark.parametrize("style", ["async", "sync"])
async def test_conformance_as_an_acl_user_confined_to_the_prefix(acl: AclUsers, style: str) -> None:
    async def factory() -> AsyncIterator[Any]:
        prefix = f"acl{uuid.uuid4().hex[:12]}"
        url = acl.url_for(prefix)
        if style == "async":
            async with AsyncRedisSaver(url, prefix=prefix) as saver:
                yield saver
        else:
            with RedisSaver(url, prefix=prefix) as saver:
                yield SyncAsAsync(saver)

    await assert_conformance(factory, f"{style} saver as an ACL user ({acl.page})")


@pytest.mark.parametrize("redis_kind", ACL_KINDS, scope="session")
def test_the_acl_user_cannot_touch_keys_outside_its_prefix(acl: AclUsers) -> None:
    prefix = f"acl{uuid.uuid4().hex[:12]}"
    secret, other_prefix = f"other{uuid.uuid4().hex[:8]}:secret", f"oth{uuid.uuid4().hex[:8]}"
    acl.admin.set(secret, "s3cret")
    acl.prefixes += [secret.split(":")[0], other_prefix]
    url = acl.url_for(prefix)
    with redis.Redis.from_url(url, protocol=2) as agent:
        agent.set(f"{prefix}:mine", "ok")  # inside: allowed
        for attempt in (
            lambda: agent.get(secret),
            lambda: agent.set(secret, "overwritten"),
            lambda: agent.eval("return redis.call('GET', KEYS[1])", 1, secret),
            lambda: agent.keys("*"),
            lambda: agent.scan(0),
            lambda: agent.flushall(),
            lambda: agent.config_get("*"),
            lambda: agent.execute_command("SCRIPT", "FLUSH"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt()
        # A script may name no key and still reach for one: the server checks it too.
        with pytest.raises(redis.exceptions.ResponseError, match=DENIED):
            agent.eval(f"return redis.call('GET', '{secret}')", 0)
        agent.delete(f"{prefix}:mine")
    assert acl.admin.get(secret) == b"s3cret"
    # The saver itself, pointed at another prefix with these credentials, is refused.
    with RedisSaver(url, prefix=other_prefix) as outside:
        with pytest.raises(redis.exceptions.ResponseError, match=DENIED):
            outside.put(cfg("t"), empty_checkpoint(), {}, {})
    assert keys_under(acl.admin, other_prefix) == set()
    # ...while at its own prefix it works, in RESP3 too (HELLO needs no grant).
    with RedisSaver(url, prefix=prefix, protocol=3) as inside:
        stored = inside.put(cfg("t"), empty_checkpoint(), {}, {})
        assert inside.get_tuple(stored) is not None
        inside.delete_thread("t")
    assert keys_under(acl.admin, prefix) == set()


def refused_auths(acl: AclUsers, user: str) -> int:
    """How many AUTHs of `user` the server refused, by ACL LOG."""
    entries = [
        dict(zip(entry[::2], entry[1::2], strict=True))
        for entry in acl.admin.execute_command("ACL", "LOG")
    ]
    refused = [e for e in entries if e[b"username"] == user.encode() and e[b"reason"] == b"auth"]
    return sum(int(e[b"count"]) for e in refused)


def wrong_password_url(acl: AclUsers, prefix: str) -> tuple[str, str]:
    url = urlsplit(acl.url_for(prefix))
    return url.geturl().replace(f":{url.password}@", ":not-the-password@"), url.username or ""


@pytest.mark.parametrize("redis_kind", ["redis-7"], scope="session")
def test_wrong_credentials_are_not_retried(acl: AclUsers) -> None:
    """Counted on the server: the default retry would otherwise repeat, for seconds, a
    refusal that cannot succeed."""
    prefix = f"acl{uuid.uuid4().hex[:12]}"
    wrong, user = wrong_password_url(acl, prefix)
    with RedisSaver(wrong, prefix=prefix) as saver:
        with pytest.raises(redis.exceptions.AuthenticationError):
            saver.get_tuple(cfg("t"))
        assert refused_auths(acl, user) == 1
        # The saver stays usable: the next call tries again, once.
        with pytest.raises(redis.exceptions.AuthenticationError):
            saver.put(cfg("t"), empty_checkpoint(), {}, {})
    assert refused_auths(acl, user) == 2


@pytest.mark.parametrize("redis_kind", ["redis-7"], scope="session")
async def test_wrong_credentials_are_not_retried_async(acl: AclUsers) -> None:
    prefix = f"acl{uuid.uuid4().hex[:12]}"
    wrong, user = wrong_password_url(acl, prefix)
    async with AsyncRedisSaver(wrong, prefix=prefix) as saver:
        with pytest.raises(redis.exceptions.AuthenticationError):
            await saver.aget_tuple(cfg("t"))
    assert refused_auths(acl, user) == 1


# -- Redis 5: requirepass --------------------------------------------------------------------


async def test_conformance_with_requirepass_on_redis_5() -> None:
    password = uuid.uuid4().hex
    with start("redis-5", extra_args=["--requirepass", password]) as server:
        url = f"redis://:{password}@127.0.0.1:{server.port}/0"

        async def factory() -> AsyncIterator[AsyncRedisSaver]:
            async with AsyncRedisSaver(url, prefix=f"pw{uuid.uuid4().hex[:12]}") as saver:
                yield saver

        await assert_conformance(factory, "AsyncRedisSaver with requirepass")
        # No retries: the savers' default retry would repeat the refusal for seconds first.
        once = {"retry": Retry(NoBackoff(), 0)}
        with RedisSaver(server.url, prefix="nopass", **once) as anonymous:
            with pytest.raises(redis.exceptions.AuthenticationError, match="NOAUTH|uthentication"):
                anonymous.get_tuple(cfg("t"))
        wrong_url = f"redis://:wrong@127.0.0.1:{server.port}/0"
        with RedisSaver(wrong_url, prefix="x", **once) as wrong:
            with pytest.raises(redis.exceptions.AuthenticationError):
                wrong.get_tuple(cfg("t"))
