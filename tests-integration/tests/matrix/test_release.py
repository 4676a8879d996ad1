"""`scripts/check_release.py`, on throwaway git repositories made here (this one is never
tagged), and on this repository as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "check_release.py"


class Repo:
    """A git repository with packages laid out like this workspace's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        for key, value in (
            ("user.email", "release@example.invalid"),
            ("user.name", "release check"),
            ("commit.gpgsign", "false"),
            ("tag.gpgsign", "false"),
        ):
            self.git("config", key, value)

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"git {args}: {done.stderr}"
        return done.stdout

    def write(self, relative: str, text: str) -> None:
        path = self.path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def package(
        self,
        dist: str,
        version: str,
        *,
        changelog: tuple[str, ...] | None = None,
        module_version: str | None = None,
    ) -> None:
        """Writes (or rewrites) the version, `__version__` and CHANGELOG.md of `dist`."""
        folder, module = f"packages/{dist}", dist.replace("-", "_")
        self.write(
            f"{folder}/pyproject.toml",
            f'[project]\nname = "{dist}"\nversion = "{version}"\ndependencies = []\n\n'
            '[build-system]\nrequires = ["hatchling"]\n',
        )
        init = f"{folder}/src/{module}/__init__.py"
        code = (self.path / init).read_text() if (self.path / init).exists() else '"""Code."""\n'
        code = "".join(line for line in code.splitlines(True) if "__version__" not in line)
        self.write(init, f'{code}__version__ = "{module_version or version}"\n')
        entries = changelog if changelog is not None else (version,)
        self.write(
            f"{folder}/CHANGELOG.md",
            "# Changelog\n\n" + "".join(f"## {v}\n\n- Changes.\n\n" for v in entries),
        )

    def commit(self, message: str = "change") -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    def tag(self, name: str) -> None:
        self.git("tag", "-a", name, "-m", name)

    def check(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), "--root", str(self.path), *args],
            capture_output=True,
            text=True,
            check=False,
        )


def passes(repo: Repo, *args: str) -> str:
    done = repo.check(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def fails(repo: Repo, *args: str) -> str:
    done = repo.check(*args)
    assert done.returncode == 1, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    """Two packages whose names share a prefix (`alpha`, `alpha-tools`), both at 0.1.0."""
    made = Repo(tmp_path / "repo")
    made.package("alpha", "0.1.0")
    made.package("alpha-tools", "0.1.0")
    made.write("packages/alpha/tests/test_alpha.py", "def test_it():\n    pass\n")
    made.write("packages/alpha/README.md", "# alpha\n")
    made.commit("first")
    return made


@pytest.fixture
def tagged(repo: Repo) -> Repo:
    """`repo` with both packages released as 0.1.0."""
    repo.tag("alpha-v0.1.0")
    repo.tag("alpha-tools-v0.1.0")
    return repo


def test_without_tags_a_package_needs_a_changelog_entry_and_one_version(repo: Repo) -> None:
    out = passes(repo)
    assert "ok    alpha 0.1.0: no tag yet" in out
    assert "ok    alpha-tools 0.1.0: no tag yet" in out
    repo.package("alpha", "0.1.0", changelog=())
    assert "add a '## 0.1.0' entry to packages/alpha/CHANGELOG.md" in fails(repo)
    repo.package("alpha", "0.1.0", module_version="0.0.9")
    assert "__version__ = '0.0.9'" in fails(repo)


def test_shipped_code_changed_since_the_tag_without_a_bump_fails(tagged: Repo) -> None:
    assert "alpha 0.1.0: unchanged since alpha-v0.1.0" in passes(tagged)
    tagged.write("packages/alpha/src/alpha/core.py", "VALUE = 1\n")
    tagged.commit()
    out = fails(tagged)
    assert (
        "FAIL  alpha 0.1.0: packages/alpha/src/alpha/core.py changed since alpha-v0.1.0, "
        "but the version is still 0.1.0"
    ) in out
    assert "ok    alpha-tools 0.1.0: unchanged" in out


@pytest.mark.parametrize("state", ["staged", "unstaged", "untracked"])
def test_changes_not_yet_committed_count_too(tagged: Repo, state: str) -> None:
    path = (
        "packages/alpha/src/alpha/__init__.py"
        if state != "untracked"
        else "packages/alpha/src/alpha/new.py"
    )
    target = tagged.path / path
    target.write_text((target.read_text() if target.exists() else "") + "EXTRA = 2\n")
    if state == "staged":
        tagged.git("add", path)
    assert f"{path} changed since alpha-v0.1.0" in fails(tagged)


def test_a_bump_with_its_changelog_entry_passes_and_one_without_fails(tagged: Repo) -> None:
    tagged.write("packages/alpha/src/alpha/core.py", "VALUE = 1\n")
    tagged.package("alpha", "0.2.0", changelog=("0.2.0", "0.1.0"))
    tagged.commit()
    assert "alpha 0.2.0: ready to release after alpha-v0.1.0 (tag alpha-v0.2.0" in passes(tagged)
    tagged.package("alpha", "0.2.0", changelog=("0.1.0",))
    assert "add a '## 0.2.0' entry" in fails(tagged)


def test_dependency_changes_ship_but_tests_readme_and_changelog_do_not(tagged: Repo) -> None:
    tagged.write("packages/alpha/tests/test_alpha.py", "def test_more():\n    pass\n")
    tagged.write("packages/alpha/README.md", "# alpha, better explained\n")
    changelog = tagged.path / "packages/alpha/CHANGELOG.md"
    changelog.write_text(changelog.read_text() + "Unreleased notes.\n")
    tagged.commit()
    assert "alpha 0.1.0: unchanged since alpha-v0.1.0" in passes(tagged)
    pyproject = tagged.path / "packages/alpha/pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("[]", '["redis>=5"]'))
    assert "packages/alpha/pyproject.toml changed since alpha-v0.1.0" in fails(tagged)


def test_another_packages_tag_does_not_count_for_a_package_with_a_shared_prefix(
    repo: Repo,
) -> None:
    repo.tag("alpha-tools-v0.1.0")
    repo.write("packages/alpha/src/alpha/core.py", "VALUE = 1\n")
    repo.commit()
    out = passes(repo)
    assert "ok    alpha 0.1.0: no tag yet" in out
    assert "ok    alpha-tools 0.1.0: unchanged since alpha-tools-v0.1.0" in out


def test_every_tagged_version_needs_its_changelog_entry(tagged: Repo) -> None:
    tagged.package("alpha", "0.2.0", changelog=("0.2.0",))
    tagged.commit()
    assert "alpha 0.2.0: tagged versions without a CHANGELOG.md entry: 0.1.0" in fails(tagged)


def test_a_tag_must_sit_on_the_commit_with_its_version(repo: Repo) -> None:
    repo.package("alpha", "0.1.0", changelog=("0.2.0", "0.1.0"))
    repo.commit()
    repo.tag("alpha-v0.2.0")
    assert "tag alpha-v0.2.0 is on a commit whose pyproject.toml says 0.1.0" in fails(repo)


def test_a_version_below_the_last_tag_fails(tagged: Repo) -> None:
    tagged.package("alpha", "0.0.9", changelog=("0.1.0", "0.0.9"))
    tagged.commit()
    assert "alpha 0.0.9: the version is lower than the last tag alpha-v0.1.0" in fails(tagged)


def test_tag_mode_names_the_package_to_release(tagged: Repo) -> None:
    assert passes(tagged, "--tag", "alpha-tools-v0.1.0").splitlines() == [
        "dist=alpha-tools",
        "version=0.1.0",
        "path=packages/alpha-tools",
    ]
    assert "packages/alpha/pyproject.toml says 0.1.0" in fails(tagged, "--tag", "alpha-v0.2.0")
    assert "no package 'beta'" in fails(tagged, "--tag", "beta-v1.0.0")
    assert "is not <dist>-v<version>" in fails(tagged, "--tag", "v1.0.0")


def test_tag_mode_runs_the_package_checks(tagged: Repo) -> None:
    tagged.write("packages/alpha/src/alpha/core.py", "VALUE = 1\n")
    tagged.commit()
    assert "changed since alpha-v0.1.0" in fails(tagged, "--tag", "alpha-v0.1.0")


def test_a_shallow_clone_is_refused(tagged: Repo, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{tagged.path}", str(shallow)], check=True
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(shallow)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "shallow clone" in done.stderr


def test_this_repository_passes() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok    ") == len(list((ROOT / "packages").glob("*/pyproject.toml")))
