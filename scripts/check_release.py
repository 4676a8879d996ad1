"""Checks that each package's version, CHANGELOG.md and release tags agree.

Usage:
    python scripts/check_release.py [--root DIR]
    python scripts/check_release.py --tag DIST-vVERSION [--root DIR]

For every package under `packages/` (a `pyproject.toml` with a static `[project] version`):

- the version equals `__version__` in `src/<module>/__init__.py`;
- CHANGELOG.md has a `## <version>` entry for the current version and for every tagged one;
- when what ships (`src/` and `pyproject.toml`) changed since the package's last tag
  `<dist>-v<version>` reachable from HEAD (committed or not, untracked files too), the version
  is higher than the tag's. Changes to tests, README or CHANGELOG need no release.

With `--tag`, it checks the tag about to be released instead: it names a package, its version
is the one in that package's `pyproject.toml`, and the checks above pass for that package;
on success it prints `dist=`, `version=` and `path=` lines (for `$GITHUB_OUTPUT`).

Standard library only. Exits 1 and says what to do when a check fails.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SHIPPED = ("src/", "pyproject.toml")
_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?$")


class CheckError(Exception):
    """A check failed; the message says what to do."""


def version_key(version: str) -> tuple[tuple[int, ...], tuple[int, int]]:
    """Orders `X.Y.Z` and `X.Y.ZaN`/`bN`/`rcN` versions (the forms this repository uses)."""
    found = _VERSION.match(version)
    if not found:
        raise CheckError(f"version {version!r} is not X.Y.Z or X.Y.Z(a|b|rc)N")
    release = tuple(int(part) for part in found.group(1).split("."))
    release += (0,) * (4 - len(release))
    phase = {"a": 0, "b": 1, "rc": 2}.get(found.group(2) or "", 3)
    return release, (phase, int(found.group(3) or 0))


def project_field(pyproject: str, name: str) -> str | None:
    """A string field of the `[project]` table (regex, so Python 3.10 needs no tomli)."""
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", pyproject, re.M | re.S)
    if not table:
        return None
    found = re.search(rf'^{name}\s*=\s*"([^"]*)"', table.group(1), re.M)
    return found.group(1) if found else None


@dataclass
class Package:
    root: Path
    folder: Path  # relative to root, e.g. packages/agentstate-reducer
    dist: str
    version: str

    @property
    def tag_glob(self) -> str:
        return f"{self.dist}-v*"

    def tag(self, version: str) -> str:
        return f"{self.dist}-v{version}"


def git(root: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise CheckError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout if done.returncode == 0 else ""


def find_packages(root: Path) -> list[Package]:
    packages = []
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        text = pyproject.read_text()
        dist, version = project_field(text, "name"), project_field(text, "version")
        folder = pyproject.parent.relative_to(root)
        if not dist or not version:
            raise CheckError(f"{folder}/pyproject.toml: needs a static [project] name and version")
        packages.append(Package(root, folder, dist, version))
    if not packages:
        raise CheckError(f"no packages/*/pyproject.toml under {root}")
    return packages


def module_version(package: Package) -> str:
    inits = sorted((package.root / package.folder / "src").glob("*/__init__.py"))
    for init in inits:
        found = re.search(r'^__version__\s*=\s*"([^"]+)"', init.read_text(), re.M)
        if found:
            return found.group(1)
    raise CheckError(f'{package.folder}/src/<module>/__init__.py: no __version__ = "..."')


def changelog_versions(package: Package) -> set[str]:
    path = package.root / package.folder / "CHANGELOG.md"
    if not path.is_file():
        raise CheckError(
            f"{package.folder}/CHANGELOG.md is missing: add one with '## {package.version}'"
        )
    return set(re.findall(r"^##\s+\[?v?([0-9][^\s\]]*)\]?", path.read_text(), re.M))


def tag_versions(package: Package) -> list[str]:
    tags = git(package.root, "tag", "--list", package.tag_glob).split()
    return [tag[len(package.dist) + 2 :] for tag in tags]


def last_tag(package: Package) -> str | None:
    out = git(
        package.root,
        "describe",
        "--tags",
        "--abbrev=0",
        "--match",
        package.tag_glob,
        "HEAD",
        check=False,
    )
    return out.strip() or None


def shipped_changes(package: Package, since: str) -> list[str]:
    """Files that ship and differ between `since` and the work tree, untracked ones too."""
    folder = str(package.folder)
    changed = git(package.root, "diff", "--name-only", since, "--", folder).split()
    changed += git(package.root, "ls-files", "--others", "--exclude-standard", "--", folder).split()
    return sorted({path for path in changed if path[len(folder) + 1 :].startswith(SHIPPED)})


def check_package(package: Package) -> str:
    """Returns what was checked, or raises `CheckError` saying what to do."""
    version, name = package.version, f"{package.dist} {package.version}"
    version_key(version)
    in_module = module_version(package)
    if in_module != version:
        raise CheckError(
            f"{name}: pyproject.toml says {version}, __init__.py says __version__ = "
            f"{in_module!r}: make them equal"
        )
    entries = changelog_versions(package)
    if version not in entries:
        raise CheckError(f"{name}: add a '## {version}' entry to {package.folder}/CHANGELOG.md")
    missing = sorted(set(tag_versions(package)) - entries, key=version_key)
    if missing:
        raise CheckError(
            f"{name}: tagged versions without a CHANGELOG.md entry: {', '.join(missing)}"
        )
    tag = last_tag(package)
    if tag is None:
        return f"{name}: no tag yet; CHANGELOG.md has {version}"
    tagged = tag[len(package.dist) + 2 :]
    at_tag = project_field(
        git(package.root, "show", f"{tag}:{package.folder}/pyproject.toml"), "version"
    )
    if at_tag != tagged:
        raise CheckError(
            f"{name}: tag {tag} is on a commit whose pyproject.toml says {at_tag}: "
            f"delete the tag and tag the commit that releases {tagged}"
        )
    if version_key(version) < version_key(tagged):
        raise CheckError(f"{name}: the version is lower than the last tag {tag}")
    changed = shipped_changes(package, tag)
    if changed and version == tagged:
        shown = ", ".join(changed[:5]) + (
            f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        )
        raise CheckError(
            f"{name}: {shown} changed since {tag}, but the version is still {version}: bump it "
            f"in pyproject.toml and __version__, and add its entry to CHANGELOG.md"
        )
    if version != tagged:
        return f"{name}: ready to release after {tag} (tag {package.tag(version)} once merged)"
    return f"{name}: unchanged since {tag}"


def check_tag(root: Path, tag: str) -> Package:
    found = re.match(r"^(?P<dist>[A-Za-z0-9][A-Za-z0-9._-]*?)-v(?P<version>[0-9].*)$", tag)
    if not found:
        raise CheckError(f"tag {tag!r} is not <dist>-v<version>, e.g. agentstate-reducer-v0.6.1")
    packages = {p.dist: p for p in find_packages(root)}
    package = packages.get(found.group("dist"))
    if package is None:
        raise CheckError(
            f"tag {tag!r}: no package {found.group('dist')!r}; one of {', '.join(packages)}"
        )
    if package.version != found.group("version"):
        raise CheckError(
            f"tag {tag!r}: {package.folder}/pyproject.toml says {package.version}: "
            f"tag the commit that bumped it to {found.group('version')}"
        )
    check_package(package)
    return package


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--tag", help="check this release tag and print dist=, version=, path=")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        if git(root, "rev-parse", "--is-shallow-repository").strip() == "true":
            raise CheckError("shallow clone: tags and history are missing; fetch with full history")
        if args.tag:
            package = check_tag(root, args.tag)
            print(f"dist={package.dist}\nversion={package.version}\npath={package.folder}")
            return 0
        packages = find_packages(root)
    except CheckError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    failed = 0
    for package in packages:
        try:
            print(f"ok    {check_package(package)}")
        except CheckError as error:
            print(f"FAIL  {error}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
