"""Reading a file named by a project, bounded by the bytes actually read.

A size check on ``stat()`` is not enough: ``/dev/zero``, ``/proc`` files and FIFOs report
a size of 0 and never end, and a file can grow between the check and the read. So the file
is opened without blocking (a FIFO would otherwise hang the open), refused unless it is a
regular file, and read up to ``limit + 1`` bytes: one byte more than the limit proves it is
too large without reading the rest.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class FileRefused(Exception):
    """The file cannot be used; ``str()`` is the reason, without the path."""


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` (symlinks followed), at most ``limit`` of them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as error:
        raise FileRefused(f"cannot read ({error.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a device" if
                    stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a FIFO" if
                    stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
                    "not a regular file")
            raise FileRefused(f"is {kind}, not a regular file; point it at a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise FileRefused(f"cannot read ({error.strerror})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused(f"file is larger than the {_shown(limit)} limit; refusing to read it")
    return b"".join(chunks)


def _shown(limit: int) -> str:
    if limit >= 1 << 20 and limit % (1 << 20) == 0:
        return f"{limit >> 20} MiB"
    return f"{limit // 1024} KiB"
