"""One writer per journal: an exclusive lease on each output journal, fenced before every commit.

Two processes appending to one journal (a second identical command; a Ray retry while the old worker
still runs) write the same rows twice. The lease is a file beside the journal (`writer.lock`, per
shard `writer.shard-i-of-N.lock`) holding the holder's host, pid, a random token, the sharded run it
belongs to (`group`) and since when (with the host's boot time, so a step of the wall clock does not
make a live holder look younger than its lease):

- `fcntl.flock` on it excludes a second writer on one host (and across hosts where the file system
  shares flock locks, as NFSv4 does). The kernel drops the lock when its holder dies, so the lease
  of a holder that is gone is free: the next writer takes it over (and says whose it was).
- A second writer is refused at once, naming the holder (LeaseHeldError). A shard attempt of the
  same sharded run (same `group`: a Ray retry while the attempt before it still runs) waits for it
  up to `wait_s` instead, then resumes from the journal it leaves.
- Where the lock is free but the file names a live process of this host (a file system whose flock
  does not exclude), the writer is refused too: that pid is checked, not trusted to be gone.
- The fence: a holder whose lock was lost (a partition on shared storage, the file removed) may still
  run while another writer took over and wrote its own token. Before each commit the holder re-reads
  the file through its open descriptor (one fstat and one pread); another token there, or the file
  unlinked, stops it (LeaseLostError) before anything of the batch is written. The check and the
  write are not one atomic step: a batch already past its check when the takeover lands can still be
  appended (export drops repeated (id, sample) pairs).
- Release empties nothing of another holder: the file is unlinked only while it still holds our
  token. An acquirer checks that the file it locked is still the one at the path (it may have been
  unlinked between its open and its lock) and otherwise locks the new one.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psutil

from fleetgen.errors import LeaseHeldError, LeaseLostError, OutputError
from fleetgen.fleet.process import started
from fleetgen.generate.journal.outdir import make_output_dir, output_error

log = logging.getLogger(__name__)

POLL_S = 0.2  # how often a waiting shard attempt tries the lock again
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)  # file systems without flock


def lease_name(suffix: str = "") -> str:
    """The lease file of one journal ('' suffix: the whole job's; see shard.py)."""
    return f"writer{suffix}.lock"


def describe(holder: dict[str, Any] | None) -> str:
    """A holder as people read it: pid, host, since when."""
    if not holder:
        return "another writer (its lease file is still being written)"
    since = holder.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else "?"
    return f"pid {holder.get('pid')} on host {holder.get('host')} (since {when})"


class Lease:
    """This process's exclusive right to append to one journal; `check` before each commit, `release` at the end."""

    def __init__(self, path: Path, fd: int, token: str, locked: bool) -> None:
        self.path, self.fd, self.token, self.locked = path, fd, token, locked
        self._mark = f'"token":"{token}"'.encode()

    @classmethod
    def acquire(cls, outdir: Path, suffix: str = "", *, group: str | None = None, wait_s: float = 0.0) -> Lease:
        """Take the journal's lease, or raise LeaseHeldError naming its holder (see the module docstring)."""
        outdir = make_output_dir(outdir)
        path = outdir / lease_name(suffix)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError as e:
                raise output_error(path, e) from None
            try:
                locked = _try_lock(fd)
                holder = _read(fd)
                # Held by an earlier attempt of this same sharded run:
                # wait for it to end (the file stays open meanwhile).
                while locked is False and group is not None and (holder or {}).get("group") == group:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(POLL_S)
                    locked = _try_lock(fd)
                    holder = _read(fd)
                if locked is False:  # held by a live writer
                    raise _held(path, holder)
                if not _same_file(fd, path):
                    os.close(fd)  # unlinked by a releasing holder between our open and our lock: lock the new file
                    continue
                if holder and _alive_here(holder):
                    raise _held(path, holder)  # lock free, holder alive: this file system's flock does not exclude
                lease = cls(path, fd, uuid.uuid4().hex, locked is True)
                lease._write(group)
            except BaseException:
                os.close(fd)
                raise
            if holder:
                log.info(
                    f"took over the lease on {path.name} of {describe(holder)}: it is gone "
                    f"({'its lock was released' if locked else 'no such process on this host'})"
                )
            if locked is None:
                log.warning(f"{path.parent} does not support flock; only the lease's token guards it")
            return lease

    def _write(self, group: str | None) -> None:
        me = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "token": self.token,
            "group": group,
            "since": round(time.time(), 3),
            "boot": psutil.boot_time(),
        }
        data = orjson.dumps(me) + b"\n"
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
            os.fsync(self.fd)
        except OSError as e:
            raise output_error(self.path, e) from None

    def check(self) -> None:
        """The fence: raise LeaseLostError unless the lease file still holds this writer's token."""
        try:
            gone = os.fstat(self.fd).st_nlink == 0
            data = b"" if gone else os.pread(self.fd, 4096, 0)
        except OSError:
            gone, data = True, b""
        if gone and not self.path.parent.exists():
            raise OutputError(
                f"{self.path.parent} was deleted during the run (the output directory, its lease with it)",
                hint="run the same command again: samples written since are not counted as done and are redone",
            )
        if gone or self._mark not in data:
            holder = None if gone else _parse(data)
            now = "its lease file was removed" if gone else f"it is now written by {describe(holder)}"
            raise LeaseLostError(
                f"this writer lost its lease on {self.path.parent} ({self.path.name}): {now}; "
                "it stops here, and nothing of its last batch was written",
                hint="let the writer that holds the lease finish; running the same command again afterwards resumes",
            )

    def release(self) -> None:
        """Give the lease up: the file is removed while it still names this writer, then the lock dropped."""
        if self.fd < 0:
            return
        try:
            if os.fstat(self.fd).st_nlink and self._mark in os.pread(self.fd, 4096, 0):
                os.unlink(self.path)  # under our lock: an acquirer that opened it finds it unlinked and retries
        except OSError:
            pass  # the next writer takes a stale lease over: its holder (this process) will be gone
        os.close(self.fd)  # drops the flock
        self.fd = -1


def _try_lock(fd: int) -> bool | None:
    """True: locked; False: another holds it; None: this file system has no flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in _NO_FLOCK:
            return None
        raise


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read(fd: int) -> dict[str, Any] | None:
    try:
        return _parse(os.pread(fd, 4096, 0))
    except OSError:
        return None


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        holder = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return holder if isinstance(holder, dict) else None


def _alive_here(holder: dict[str, Any]) -> bool:
    """The holder is a live process of this host other than this one (its start no later than its lease)."""
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        start, boot_now = started(pid)
    except psutil.Error:
        return False
    since, boot = holder.get("since"), holder.get("boot")
    if not isinstance(since, (int, float)):
        return True
    if isinstance(boot, (int, float)):  # as seconds since boot: a step of the wall clock moves neither side
        return start - boot_now <= since - boot + 1
    return start <= since + 1


def _held(path: Path, holder: dict[str, Any] | None) -> LeaseHeldError:
    return LeaseHeldError(
        f"{path.parent} is being written by {describe(holder)} (lease {path.name}); a second writer would "
        "append the same rows again",
        hint="wait for that run to finish (or stop it), or write to another --output; "
        "a run started after it ends resumes where it stopped",
    )
