"""Release discipline: each package builds alone and installs alone from its wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "langgraph-checkpoint-plainredis": "langgraph_checkpoint_plainredis",
    "agentstate-reducer": "agentstate_reducer",
    "agentstate-reducer-langgraph": "agentstate_reducer_langgraph",
}


def uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".cache/uv/bin/uv")
    assert Path(found).exists(), "uv not found: run the tests through `make test` or `uv run`"
    return found


def run(*args: str | Path, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{args}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    for package in PACKAGES:
        run(uv(), "build", "--package", package, "--no-sources", "--out-dir", out)
    return out


def test_each_package_builds_one_wheel_and_one_sdist(dist: Path) -> None:
    for package in PACKAGES:
        stem = package.replace("-", "_")
        assert len(list(dist.glob(f"{stem}-*.whl"))) == 1, package
        assert len(list(dist.glob(f"{stem}-*.tar.gz"))) == 1, package


@pytest.mark.parametrize("package", list(PACKAGES))
def test_each_wheel_installs_alone_and_imports(dist: Path, tmp_path: Path, package: str) -> None:
    stem = package.replace("-", "_")
    (wheel,) = dist.glob(f"{stem}-*.whl")
    venv = tmp_path / "venv"
    run(uv(), "venv", "--quiet", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    # Sibling packages come from dist/ (they may not be on the registry yet), the rest from it.
    run(uv(), "pip", "install", "--quiet", "--python", python, "--find-links", dist, wheel)
    module = PACKAGES[package]
    out = run(python, "-c", f"import {module} as m; print(sorted(m.__all__))", cwd=tmp_path)
    assert out.strip().startswith("[")
    assert (
        Path(
            run(python, "-c", f"import {module}; print({module}.__file__)", cwd=tmp_path).strip()
        ).parent
        / "py.typed"
    ).exists()
    if package == "agentstate-reducer":
        installed = run(uv(), "pip", "freeze", "--python", python).splitlines()
        # A wheel install freezes as "name @ file://..."; only the name matters here.
        names = [line.replace(" @ ", "==").split("==")[0] for line in installed if line]
        assert names == ["agentstate-reducer"], installed


def test_reducer_langgraph_extra_brings_reducing_saver(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("agentstate_reducer-*.whl")
    venv = tmp_path / "venv"
    run(uv(), "venv", "--quiet", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    run(
        uv(),
        "pip",
        "install",
        "--quiet",
        "--python",
        python,
        "--find-links",
        dist,
        f"{wheel}[langgraph]",
    )
    run(python, "-c", "from agentstate_reducer.langgraph import ReducingSaver", cwd=tmp_path)
