"""The demo's report folder, replaced whole or not at all, by one demo at a time.

Why written aside: a demo writes its archive while it runs and its report at the end. Written in
place, a demo stopped half-way left `demo-report/` half old, half new (a later `gpuaas audit
resubmit` then re-ran against the old snapshot without a word), and two demos on one folder deleted
each other's archive (`sqlite3.OperationalError: attempt to write a readonly database`). So a run
writes into a hidden folder beside the report (`.demo-report.new-XXXX`, same file system) and, once
the report is complete, swaps it in with one rename(2) (renameat2 RENAME_EXCHANGE when a report is
there: the path never lacks a complete report); a stopped run removes its folder and the previous
report is untouched. A lock file beside it (`.demo-report.lock`, flock, removed at the end) refuses a
second demo on the same folder while the first runs.

Files in the old report that no demo writes (an admin's notes, an `audit report --html` folder inside
it) are moved into the new one: the swap replaces the demo's files, not the admin's. A folder that holds
other things and no report (the current folder, a home folder) is refused before anything runs.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

from gpuaas.stops import signals_deferred

DEMO_FILES = frozenset({"index.html", "gpu-allocation.png", "quota-advice.png", "summary.json", "runs.db",
                        "runs.db-journal", "runs.db-wal", "runs.db-shm", "cluster-snapshot.json", "runs.json"})
"""What `gpuaas demo` writes (either stack): replaced by the new report; anything else is carried over."""
REPORT_MARKERS = ("summary.json", "runs.db", "runs.json")
"""A folder holding one of these is an earlier demo's report (or an interrupted one's), which a new one replaces."""
RENAME_EXCHANGE = 2  # linux/fs.h


class ReportFolderError(ValueError):
    """The folder cannot take a report (what was expected, what was found, what to do)."""


class ReportBusy(ReportFolderError):
    """Another demo is writing this report now."""


def _umask() -> int:
    """This process's umask (what a plain mkdir applies), read without changing it for long."""
    current = os.umask(0o022)
    os.umask(current)
    return current


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where the system has no such call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL):  # an old kernel or a file system without it
        return False
    raise OSError(code, os.strerror(code), str(second))


class ReportFolder:
    """`with ReportFolder(path) as folder:` write into `folder.staging`, then `folder.commit()`."""

    def __init__(self, target: Path, option: str = "--output-dir") -> None:
        self.target = target
        self.option = option
        self.staging: Path | None = None
        self.committed = False
        self._keep_old = False
        self._lock_fd: int | None = None
        self._lock_path: Path | None = None

    # -- checks --------------------------------------------------------------------------------------
    def check(self) -> None:
        """Refuse, before any work, a path that is no report folder (ReportFolderError)."""
        target, option = self.target, self.option
        if str(target) in ("", "."):
            raise ReportFolderError(f"{option} {str(target)!r}: expected a folder for the report, found the current "
                                    "folder; pass a folder name such as demo-report")
        if target.exists() and not target.is_dir():
            raise ReportFolderError(f"{option} {target}: expected a folder for the report, found a file; "
                                    "pass another path (default: demo-report)")
        resolved = target.resolve()
        cwd = Path.cwd().resolve()
        if resolved == cwd or resolved in cwd.parents:
            raise ReportFolderError(f"{option} {target}: expected a folder for the report, found the current folder "
                                    "or one that holds it; pass a folder name such as demo-report")
        if target.is_dir():
            try:
                entries = sorted(entry.name for entry in target.iterdir())
            except OSError as error:
                raise ReportFolderError(f"{option} {target}: expected a folder this user can read, found "
                                        f"{(error.strerror or str(error)).lower()}; pass another path") from None
            if entries and not any(name in entries for name in REPORT_MARKERS):
                shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
                raise ReportFolderError(f"{option} {target}: expected a new or empty folder or an earlier demo report, "
                                        f"found {len(entries)} entries that are no demo report ({shown}); the demo "
                                        "replaces its folder whole: pass another path")

    # -- lock, staging, swap ----------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self.check()
        parent = self.target.resolve().parent
        name = self.target.resolve().name
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self._lock(parent / f".{name}.lock")
            for stale in [*parent.glob(f".{name}.new-*"), *parent.glob(f".{name}.old-*")]:
                # only the lock's holder makes these: with the lock held, they are a killed run's (SIGKILL, power)
                shutil.rmtree(stale, ignore_errors=True)
            self.staging = Path(tempfile.mkdtemp(prefix=f".{name}.new-", dir=parent))
            self.staging.chmod(0o777 & ~_umask())  # mkdtemp's 0700 would become the report's mode
        except OSError as error:
            self._unlock()
            raise ReportFolderError(f"{self.option} {self.target}: expected a folder this user can write (the report "
                                    f"is written beside it, then swapped in), found "
                                    f"{(error.strerror or str(error)).lower()} in {parent}; pass another path") from None
        return self

    def _lock(self, path: Path) -> None:
        """An exclusive flock on `path`, refusing (ReportBusy) while another demo holds it. The file is removed
        by its holder at the end; a lock taken on a file removed meanwhile is retaken on the new one."""
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise ReportBusy(f"{self.option} {self.target}: expected no other demo writing this report, found "
                                 f"one running (pid {holder}); wait for it to end, or pass another {self.option}") \
                    from None
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self._lock_fd, self._lock_path = fd, path
                return
            os.close(fd)  # its holder removed it as we opened it: lock the one that is there now

    def _unlock(self) -> None:
        if self._lock_fd is None:
            return
        if self._lock_path is not None:
            self._lock_path.unlink(missing_ok=True)  # while still holding it (see _lock)
        os.close(self._lock_fd)
        self._lock_fd = self._lock_path = None

    def commit(self) -> None:
        """Put the complete report in place of the old one, then carry the old one's other files over."""
        assert self.staging is not None and not self.committed
        with signals_deferred():
            if not self.target.is_dir():
                self.staging.rename(self.target)
                self.staging, self.committed = None, True
                return
            if not _exchange(self.staging, self.target):
                old = self.staging.with_name(self.staging.name.replace(".new-", ".old-"))
                self.target.rename(old)
                self.staging.rename(self.target)
                self.staging = old
            self.committed = True  # from here, self.staging holds the old report
            try:
                for entry in self.staging.iterdir():
                    if entry.name not in DEMO_FILES and not (self.target / entry.name).exists():
                        entry.rename(self.target / entry.name)
            except OSError:
                self._keep_old = True  # never remove what could not be carried over
                raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        with signals_deferred():
            if self.staging is not None and not self._keep_old:  # an unfinished report, or (committed) the old one
                shutil.rmtree(self.staging, ignore_errors=True)
                self.staging = None
            self._unlock()
