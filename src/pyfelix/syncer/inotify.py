"""Minimal inotify for Trio: the kernel fd, read when ``trio.lowlevel.wait_readable`` says so.

Only what the file datastore needs: watch directories (recursively, as they appear) and report
which paths changed and whether a write to them has finished.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from pathlib import Path

import attrs
import trio

from pyfelix.errors import PyfelixError

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

WATCH_MASK = (
    IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
_EVENT = struct.Struct("iIII")
_READ_SIZE = 64 * 1024


class InotifyUnavailable(PyfelixError, OSError):
    """The kernel or libc offers no inotify; callers fall back to polling."""


@attrs.frozen
class Event:
    path: Path
    mask: int

    @property
    def write_finished(self) -> bool:
        """The file's content is complete: closed after writing, or renamed into place."""
        return bool(self.mask & (IN_CLOSE_WRITE | IN_MOVED_TO))

    @property
    def removed(self) -> bool:
        """The path went (deleted, or renamed away): something may be about to replace it."""
        return bool(self.mask & (IN_DELETE | IN_MOVED_FROM))

    @property
    def write_started(self) -> bool:
        return bool(self.mask & (IN_MODIFY | IN_CREATE)) and not self.is_dir

    @property
    def is_dir(self) -> bool:
        return bool(self.mask & IN_ISDIR)

    @property
    def overflow(self) -> bool:
        return bool(self.mask & IN_Q_OVERFLOW)


class Inotify:
    """An inotify instance watching a directory tree; close it when done."""

    def __init__(self) -> None:
        # The C library the interpreter is linked with (find_library would run ldconfig in a
        # child, a fork of the whole agent, for the same answer).
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "inotify_init1"):
            raise InotifyUnavailable(errno.ENOSYS, "inotify is not available")
        self._libc = libc
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise InotifyUnavailable(err, os.strerror(err))
        self.fd: int = fd
        self._dirs: dict[int, Path] = {}

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def watch_tree(self, root: Path) -> None:
        """Watch ``root`` and every directory below it (hidden ones excluded)."""
        self._add(root)
        for dirpath, dirnames, _ in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for dirname in dirnames:
                self._add(Path(dirpath) / dirname)

    def _add(self, directory: Path) -> None:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(directory), WATCH_MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR):
                return
            raise OSError(err, f"inotify_add_watch({directory}): {os.strerror(err)}")
        self._dirs[wd] = directory

    async def read(self) -> list[Event]:
        """Wait for, then return, the next events (new subdirectories get watched)."""
        while True:
            await trio.lowlevel.wait_readable(self.fd)
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                continue
            return self._parse(data)

    def read_ready(self) -> list[Event]:
        """The events already queued, without waiting (none: an empty list)."""
        try:
            data = os.read(self.fd, _READ_SIZE)
        except BlockingIOError:
            return []
        return self._parse(data)

    def _parse(self, data: bytes) -> list[Event]:
        events = []
        offset = 0
        while offset < len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            offset += _EVENT.size
            name = data[offset : offset + length].rstrip(b"\0")
            offset += length
            if mask & IN_IGNORED:
                self._dirs.pop(wd, None)
                continue
            directory = self._dirs.get(wd)
            if directory is None and not mask & IN_Q_OVERFLOW:
                continue
            path = directory / os.fsdecode(name) if directory and name else directory or Path()
            event = Event(path, mask)
            if event.is_dir and mask & (IN_CREATE | IN_MOVED_TO) and not path.name.startswith("."):
                self.watch_tree(path)
            events.append(event)
        return events
