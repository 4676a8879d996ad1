"""The files that provision the project agree: uv's pin, its cache, and CI's servers."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentstate_testkit import servers

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _uv_version() -> str:
    found = re.search(r"^UV_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert found, "the Makefile pins no UV_VERSION"
    return found.group(1)


def test_the_makefile_installs_the_pinned_uv() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", _uv_version())
    assert (
        "install --quiet --disable-pip-version-check uv==$(UV_VERSION)"
        in (ROOT / "Makefile").read_text()
    )


def _make_env(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("UV_CACHE_DIR", "MAKEFLAGS")}
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "-f", "Makefile", "-f", "-", "show"],
        input="show:\n\t@echo $$UV_CACHE_DIR\n",
        cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_uv_caches_under_dot_cache_unless_told_otherwise(tmp_path: Path) -> None:
    assert _make_env() == f"{ROOT}/.cache/uv-cache"
    assert _make_env(UV_CACHE_DIR=str(tmp_path)) == str(tmp_path)


def _jobs() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path.name, name, job)
        for path in WORKFLOWS
        for name, job in yaml.safe_load(path.read_text())["jobs"].items()
    ]


def test_workflows_pin_the_makefiles_uv() -> None:
    for workflow, name, job in _jobs():
        for step in job.get("steps", []):
            if str(step.get("uses", "")).startswith("astral-sh/setup-uv"):
                assert step.get("with", {}).get("version") == _uv_version(), (workflow, name)


def _image_major(image: str) -> str:
    return image.rsplit(":", 1)[1].split(".")[0].split("-")[0]


@pytest.mark.parametrize("workflow", [path.name for path in WORKFLOWS])
def test_service_containers_are_the_versions_their_urls_name(workflow: str) -> None:
    """`AGENTSTATE_POSTGRES_URL` is PostgreSQL 15, `AGENTSTATE_VALKEY_URL` Valkey 9, ..."""
    expected = {
        servers._ENV_URLS[kind]: version.split(".")[0]
        for kind, version in servers._EXPECTED_VERSIONS.items()
    }
    expected["AGENTSTATE_POSTGRES16_URL"] = "16"
    for path, name, job in _jobs():
        if path != workflow:
            continue
        images = {
            port.split(":")[0]: service["image"]
            for service in job.get("services", {}).values()
            for port in service.get("ports", [])
        }
        for variable, url in job.get("env", {}).items():
            port = re.search(r"127\.0\.0\.1:(\d+)", str(url))
            if variable in expected and port and port.group(1) in images:
                image = images[port.group(1)]
                assert _image_major(image) == expected[variable], (name, variable, image)


def test_jobs_that_run_the_suite_have_postgres_15() -> None:
    """Ubuntu has no postgresql-15: a job gives the suite a container or installs it."""
    for workflow, name, job in _jobs():
        runs = "\n".join(str(step.get("run", "")) for step in job.get("steps", []))
        if not re.search(r"pytest|make (test|servers)", runs):
            continue
        assert "AGENTSTATE_POSTGRES_URL" in job.get("env", {}) or re.search(
            r"apt-get install .*postgresql-15", runs
        ), (workflow, name)
