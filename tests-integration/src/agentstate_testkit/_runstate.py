"""On disk, which harness process started which server, so a later run stops what a dead one left.

`atexit` and the SIGTERM handler stop a process's servers when it ends, but not when it is
killed outright (SIGKILL, the OOM killer, a crash): its servers then run on with parent pid 1.
So each server has a record in the run-state folder (`<cache>/.run/`) from before it starts
until it is stopped: its owner (pid and start time), its temp dir, and its own pid and start
time once launched. `sweep`, run whenever the harness starts a server or provisions, stops
the servers of owners that are gone and removes their temp dirs and records.

A start time (field 22 of `/proc/<pid>/stat`) with the boot id tells a process from a later
one that got the same pid. Servers run in a session of their own, so their process group is
theirs: PostgreSQL's backends go with the postmaster.

`PR_SET_PDEATHSIG` is not used: it fires when the *thread* that forked the server exits, and
pools start servers from worker threads, so a server would die with a finished thread; the
kernel clears it when the child changes user (PostgreSQL run as `postgres`); it needs a
`preexec_fn`, unsafe with threads; and it would leave the temp dir behind anyway.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Record", "process_start", "sweep"]

_LOCK_NAME = ".lock"
_STOP_WAIT = 5.0
_DIR_PREFIX = "agentstate-"


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """The start time of live process `pid` in clock ticks since boot; None if gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces: the fields follow its last `)`.
    fields = text[text.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass
class Record:
    """One server's entry in the run-state folder.

    Attributes:
        directory: The server's temp dir; the record's file is named after it.
        owner_pid: The harness process that started the server.
        owner_start: That process's start time (`process_start`).
        boot_id: The boot the record was made in.
        pid: The server process, once launched; it leads its own process group.
        pid_start: Its start time.
        stop_signal: The signal that stops it gracefully (SIGINT for PostgreSQL).
    """

    directory: str
    owner_pid: int
    owner_start: int
    boot_id: str
    pid: int | None = None
    pid_start: int | None = None
    stop_signal: int = signal.SIGTERM

    @classmethod
    def for_this_process(cls, directory: Path, stop_signal: int) -> Record:
        pid = os.getpid()
        return cls(
            str(directory), pid, process_start(pid) or 0, _boot_id(), None, None, stop_signal
        )

    def path(self, run_dir: Path) -> Path:
        return run_dir / f"{Path(self.directory).name}.json"

    def save(self, run_dir: Path) -> None:
        """Writes the record atomically (a reader sees the old one or the new one)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(prefix=".record-", dir=run_dir)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(asdict(self), out)
            os.replace(staging, self.path(run_dir))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(staging)
            raise

    def delete(self, run_dir: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(run_dir).unlink()

    def owner_alive(self) -> bool:
        return self.boot_id == _boot_id() and process_start(self.owner_pid) == self.owner_start

    def server_alive(self) -> bool:
        """Whether `pid` is still the server this record launched (not a reused pid)."""
        if self.pid is None or self.boot_id != _boot_id():
            return False
        if process_start(self.pid) != self.pid_start:
            return False
        # A record is only trusted to name our server: its working folder is the temp dir.
        # Another user's process may not be looked into: PermissionError, for the caller.
        try:
            cwd = os.readlink(f"/proc/{self.pid}/cwd")
        except PermissionError:
            raise
        except OSError:
            return False
        return cwd == self.directory or cwd.startswith(self.directory + "/")


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    fd = os.open(run_dir / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _load(path: Path) -> Record | None:
    try:
        data = json.loads(path.read_text())
        return Record(**data)
    except (OSError, ValueError, TypeError):
        return None


def _stop(record: Record) -> None:
    assert record.pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pid, record.stop_signal)
    deadline = time.monotonic() + _STOP_WAIT
    while record.server_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if record.server_alive():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)


def _remove_dir(directory: str) -> None:
    # Only what the harness makes: a real folder named agentstate-*, never a symlink.
    folder = Path(directory)
    if folder.name.startswith(_DIR_PREFIX) and folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def sweep(run_dir: Path) -> list[str]:
    """Stops the servers whose owner is gone and removes their temp dirs and records.

    Records of live owners, in this process or others, are left alone, and so are servers
    this process may not signal (another user's). Returns one line per record swept.
    """
    if not run_dir.is_dir():
        return []
    swept: list[str] = []
    with _locked(run_dir):
        # A staging file of a process killed while it saved a record: never renamed.
        for path in run_dir.glob(".record-*"):
            with contextlib.suppress(FileNotFoundError):
                if time.time() - path.stat().st_mtime > 3600:
                    path.unlink()
        for path in sorted(run_dir.glob("*.json")):
            # A server that stops deletes its record without the lock: gone meanwhile, skip.
            with contextlib.suppress(FileNotFoundError):
                line = _sweep_one(path)
                if line is not None:
                    swept.append(line)
    return swept


def _sweep_one(path: Path) -> str | None:
    """Sweeps the record at `path` if its owner is gone; what it did, or None."""
    record = _load(path)
    if record is None:
        # Unreadable: written by a newer harness, or torn; only a stale one goes.
        if time.time() - path.stat().st_mtime > 3600:
            path.unlink()
        return None
    if record.owner_alive():
        return None
    line = f"owner {record.owner_pid} is gone:"
    try:
        if record.server_alive():
            _stop(record)
            line += f" stopped server pid {record.pid},"
    except PermissionError:
        return None  # another user's server: theirs to sweep, its record kept for them
    _remove_dir(record.directory)
    path.unlink()
    return f"{line} removed {record.directory}"
