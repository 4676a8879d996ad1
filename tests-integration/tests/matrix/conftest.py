"""The integration matrix: every saver, unwrapped and inside `ReducingSaver`, on every server.

A combination is a saver-factory id, a wrapping and a server, and its test id names all three:
`[plainredis-async-wrapped-redis-5]`, `[postgres-sync-unwrapped-pg15]`, `[sqlite-async-wrapped]`
(in-process savers have no server). A test that takes the `combo` fixture runs once per
combination; `-k redis-5` or `-k "postgres and wrapped"` selects a slice. `combos.py` lists
the saver factories and the servers.

Servers come from the harness (`server_pool`: one per kind per session, or the kind's
`AGENTSTATE_*_URL`). `AGENTSTATE_MATRIX_SERVERS`, a comma list of server labels, picks the
servers; by default every server the harness can start. `pg16` exists only as the URL in
`AGENTSTATE_POSTGRES16_URL` (GitHub's service container), so a label always names the server
a combination ran on.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

# The workspace runs pytest with --import-mode=importlib, which does not put test folders on
# sys.path; the matrix tests import `combos` from here.
sys.path.insert(0, str(Path(__file__).parent))

from combos import Combo, Place, all_combos, curve_combos, server_url  # noqa: E402

from agentstate_testkit.servers import ServerPool  # noqa: E402

MARKERS = {
    "matrix": "one saver x wrapping x server combination of the integration matrix",
    "packaging": "builds the packages and installs them into fresh venvs (uv and the registry)",
    "lowest": "runs a package against the lowest versions its dependency ranges allow",
}


def pytest_configure(config: pytest.Config) -> None:
    """Registers the matrix markers (the suite runs with `--strict-markers`)."""
    known = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name, text in MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {text}")


COMBO_PARAMETERS = ("combo", "wrapped_combo", "curve_combo")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrizes `combo` over every combination, `wrapped_combo` over the wrapped ones and
    `curve_combo` over `CURVE_COMBOS` (without the wrapping in the id: it runs all three)."""
    names = set(metafunc.fixturenames)
    if "combo" in names:
        combos = all_combos()
        metafunc.parametrize("combo", combos, ids=[c.id for c in combos])
    if "wrapped_combo" in names:
        combos = [c for c in all_combos() if c.wrapped]
        metafunc.parametrize("wrapped_combo", combos, ids=[c.id for c in combos])
    if "curve_combo" in names:
        combos = curve_combos()
        metafunc.parametrize("curve_combo", combos, ids=[c.server_id for c in combos])


def _combo_of(item: pytest.Item) -> Combo | None:
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec else {}
    found = [params[name] for name in COMBO_PARAMETERS if name in params]
    return found[0] if found and isinstance(found[0], Combo) else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every combination `matrix`, and `redis` or `postgres` by its server."""
    for item in items:
        combo = _combo_of(item)
        if combo is not None:
            item.add_marker("matrix")
            if combo.server is not None:
                item.add_marker(combo.server.family)


@pytest.fixture
def place(
    request: pytest.FixtureRequest, server_pool: ServerPool, tmp_path: Path
) -> Iterator[Place]:
    """This test's own place: its own PostgreSQL database, a Redis URL, or only a folder."""
    combo = _combo_of(request.node)
    assert combo is not None, f"`place` needs one of the parameters {COMBO_PARAMETERS}"
    if combo.server is None:
        yield Place(None, tmp_path)
        return
    url = server_url(combo.server, server_pool)
    if combo.server.family == "redis":
        yield Place(url, tmp_path)
        return
    name = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield Place(url.rsplit("/", 1)[0] + f"/{name}", tmp_path)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
