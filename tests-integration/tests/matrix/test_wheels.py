"""Release discipline, proved on the built artifacts.

Each package builds alone (`uv build --package X --no-sources`); each wheel installs alone into
a fresh venv, from `dist/` plus the registry, and passes `scripts/smoke_install.py`;
`agentstate-reducer` installs with no dependency and its extras resolve; and the ranges
between packages are honest: a package's own tests pass in a venv holding the lowest version
of every dependency it declares (`lowest`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from agentstate_testkit.servers import ServerError, ServerPool, cache_dir

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "scripts" / "smoke_install.py"
PACKAGES = {
    "langgraph-checkpoint-plainredis": "langgraph_checkpoint_plainredis",
    "agentstate-reducer": "agentstate_reducer",
    "agentstate-reducer-langgraph": "agentstate_reducer_langgraph",
}
TESTKIT = "agentstate-testkit"
# What the packages' own tests import besides the package: taken, with their ranges, from
# the workspace's dev group, so the lowest-version venvs test with the same tools.
TEST_TOOLS = {
    "pytest",
    "pytest-asyncio",
    "hypothesis",
    "langgraph",
    "langchain-core",
    "langgraph-checkpoint-conformance",
    "langgraph-checkpoint-sqlite",
    "aiosqlite",
}


def uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".cache/uv/bin/uv")
    assert Path(found).exists(), "uv not found: run the tests through `make test` or `uv run`"
    return found


def run(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def pyproject(path: Path) -> dict:
    with open(path / "pyproject.toml", "rb") as file:
        return tomllib.load(file)


def package_dir(dist: str) -> Path:
    return ROOT / ("tests-integration" if dist == TESTKIT else f"packages/{dist}")


def version_of(dist: str) -> Version:
    return Version(pyproject(package_dir(dist))["project"]["version"])


def wheel(dist_dir: Path, dist: str) -> Path:
    (found,) = dist_dir.glob(f"{dist.replace('-', '_')}-*.whl")
    return found


def venv(tmp_path: Path) -> Path:
    run(uv(), "venv", "--quiet", "--python", sys.executable, tmp_path / "venv")
    return tmp_path / "venv" / "bin" / "python"


def install(python: Path, *requirements: str | Path, find_links: Path | None = None) -> None:
    links = ["--find-links", str(find_links)] if find_links else []
    run(uv(), "pip", "install", "--quiet", "--python", python, *links, *requirements)


def installed(python: Path) -> dict[str, str]:
    """Name to version of everything in the venv (a wheel file freezes as `name @ file:`)."""
    lines = run(uv(), "pip", "list", "--format=freeze", "--python", python).splitlines()
    return {canonicalize_name(n): v for n, _, v in (line.partition("==") for line in lines)}


def smoke(python: Path, dist: str, *extras: str, redis_url: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    if redis_url:
        env["REDIS_URL"] = redis_url
    args = [arg for extra in extras for arg in ("--extra", extra)]
    # From a folder outside the repository, so nothing imports from the source tree.
    return run(python, SMOKE, dist, *args, cwd=python.parents[2], env=env)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every package built alone, as CI and the release workflow build it, plus the testkit."""
    out = tmp_path_factory.mktemp("dist")
    for package in (*PACKAGES, TESTKIT):
        run(uv(), "build", "--quiet", "--package", package, "--no-sources", "--out-dir", out)
    return out


@pytest.fixture(scope="module")
def redis5(server_pool: ServerPool) -> str:
    try:
        return server_pool.get("redis-5")
    except ServerError as error:
        pytest.fail(str(error), pytrace=False)


def test_each_package_builds_alone_into_one_wheel_and_one_sdist(dist: Path) -> None:
    for package in PACKAGES:
        stem = f"{package.replace('-', '_')}-{version_of(package)}"
        assert (dist / f"{stem}-py3-none-any.whl").is_file(), sorted(dist.iterdir())
        assert (dist / f"{stem}.tar.gz").is_file(), sorted(dist.iterdir())


@pytest.mark.parametrize("package", list(PACKAGES))
def test_each_wheel_installs_alone_and_passes_the_smoke_script(
    dist: Path, tmp_path: Path, package: str, redis5: str
) -> None:
    python = venv(tmp_path)
    # Sibling packages come from dist/ (they may not be on the registry yet), the rest from it.
    install(python, wheel(dist, package), find_links=dist)
    out = smoke(python, package, redis_url=redis5)
    assert f"smoke: {package} {version_of(package)} ok" in out
    if package == "agentstate-reducer":
        assert list(installed(python)) == ["agentstate-reducer"], "it has no dependency"


@pytest.mark.parametrize("extra", ["langgraph", "tokens"])
def test_the_reducer_extras_resolve_and_bring_what_they_promise(
    dist: Path, tmp_path: Path, extra: str
) -> None:
    python = venv(tmp_path)
    install(python, f"{wheel(dist, 'agentstate-reducer')}[{extra}]", find_links=dist)
    wanted = {"langgraph": "agentstate-reducer-langgraph", "tokens": "tiktoken"}[extra]
    assert wanted in installed(python)
    assert "smoke: agentstate-reducer" in smoke(python, "agentstate-reducer", extra)


# -- the lowest versions the ranges allow --------------------------------------------------


def lower_bound(requirement: Requirement) -> Version | None:
    bounds = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def member_wheel(member: str, version: Version, dist: Path, tmp_path: Path) -> Path:
    """A wheel of workspace package `member` at `version`: today's, or built from its tag."""
    if version_of(member) == version:
        return wheel(dist, member)
    tag = f"{member}-v{version}"
    tags = run("git", "tag", "--list", tag).split()
    assert tags, (
        f"the lowest {member} a range allows is {version}, which is neither the workspace's "
        f"{member} ({version_of(member)}) nor a tag {tag}: tag the release, or raise the bound"
    )
    archive = tmp_path / f"{tag}.tar"
    run("git", "archive", "--output", archive, tag, f"packages/{member}")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / tag, filter="data")
    out = tmp_path / f"{tag}-dist"
    run(uv(), "build", "--quiet", "--wheel", "--out-dir", out, tmp_path / tag / "packages" / member)
    return wheel(out, member)


def lowest_venv(package: str, dist: Path, tmp_path: Path) -> tuple[Path, dict[str, Version]]:
    """A venv with `package`, every dependency at the lowest version its range allows, the
    testkit and the test tools (newest that fit). Returns its Python and those lowest pins."""
    lowest: dict[str, Version] = {}
    sources: list[str | Path] = [wheel(dist, package), wheel(dist, TESTKIT)]
    for text in pyproject(package_dir(package))["project"]["dependencies"]:
        requirement = Requirement(text)
        bound = lower_bound(requirement)
        assert bound is not None, f"{package}: {text} has no lower bound to test"
        name = canonicalize_name(requirement.name)
        lowest[name] = bound
        if name in PACKAGES:
            sources.append(member_wheel(name, bound, dist, tmp_path))
        else:
            sources.append(f"{name}=={bound}")
    dev = pyproject(ROOT)["dependency-groups"]["dev"]
    sources += [t for t in dev if canonicalize_name(Requirement(t).name) in TEST_TOOLS]
    python = venv(tmp_path)
    install(python, *sources)
    got = installed(python)
    for name, version in lowest.items():
        assert Version(got[name]) == version, f"{name}: {got[name]} installed, {version} wanted"
    return python, lowest


def package_tests(python: Path, package: str, *args: str, env: dict[str, str]) -> str:
    """Runs the package's own tests (all, or those `args` name) with the venv's Python, from
    outside the repository, so the package is imported from the venv."""
    module = PACKAGES[package]
    where = run(python, "-c", f"import {module}; print({module}.__file__)", cwd=python.parents[2])
    assert str(python.parents[1]) in where, f"{module} imported from {where}, not the venv"
    selected = [a for a in args if not a.startswith("-")]
    return run(
        python,
        "-m",
        "pytest",
        f"--rootdir={ROOT}",
        f"--config-file={ROOT / 'pyproject.toml'}",
        "-p",
        "no:cacheprovider",
        "-q",
        *([] if selected else [str(ROOT / "packages" / package / "tests")]),
        *args,
        cwd=python.parents[2],
        env=env,
    )


def child_env(server_pool: ServerPool) -> dict[str, str]:
    """The servers of this session for the child pytest, so it starts none of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["AGENTSTATE_CACHE_DIR"] = str(cache_dir())
    try:
        env["AGENTSTATE_REDIS5_URL"] = server_pool.get("redis-5")
    except ServerError as error:
        pytest.fail(str(error), pytrace=False)
    return env


@pytest.mark.lowest
def test_reducer_langgraph_passes_its_tests_on_the_lowest_reducer_and_checkpoint(
    dist: Path, tmp_path: Path, server_pool: ServerPool
) -> None:
    package = "agentstate-reducer-langgraph"
    python, lowest = lowest_venv(package, dist, tmp_path)
    assert set(lowest) == {"agentstate-reducer", "langgraph-checkpoint"}
    out = package_tests(python, package, env=child_env(server_pool))
    assert " passed" in out and " failed" not in out


# plainredis's own tests that exercise redis-py and LangGraph's checkpoint API. Left out:
# test_parity.py compares against the installed InMemorySaver, whose pending-write order
# changed in langgraph-checkpoint 4.3, and test_cluster.py needs cluster kinds.
PLAINREDIS_SMOKE = (
    "test_conformance.py",
    "test_graph.py",
    "test_saver.py",
    "test_cost.py",
    "test_storage.py",
    "test_codec.py",
    "test_migrate.py",
    "test_wire.py",
)
# Tests that cannot run on the lowest versions for a reason of their own, not the package's.
PLAINREDIS_DESELECT: set[str] = set()
if sys.version_info < (3, 11):
    # Uses `interrupt()` in an async graph, which LangGraph supports from Python 3.11 on; it
    # fails on 3.10 whatever the versions (the packages' own CI jobs show it).
    PLAINREDIS_DESELECT.add(
        "test_graph.py::test_async_graph_interrupt_resume_history_and_time_travel"
    )


@pytest.mark.lowest
def test_plainredis_passes_its_tests_on_the_lowest_redis_py_and_checkpoint(
    dist: Path, tmp_path: Path, server_pool: ServerPool
) -> None:
    package = "langgraph-checkpoint-plainredis"
    python, lowest = lowest_venv(package, dist, tmp_path)
    assert set(lowest) == {"redis", "langgraph-checkpoint"}
    tests = ROOT / "packages" / package / "tests"
    out = package_tests(
        python,
        package,
        *(str(tests / name) for name in PLAINREDIS_SMOKE),
        # Node ids are relative to the rootdir; --deselect takes a prefix of one.
        *(f"--deselect={tests.relative_to(ROOT) / node}" for node in sorted(PLAINREDIS_DESELECT)),
        "--redis-kinds=redis-5",
        env=child_env(server_pool),
    )
    assert " passed" in out and " failed" not in out
