"""The drift collector's child processes (:class:`Child`, started with
``os.posix_spawnp``, run side by side) and the deadline's alarm: the second part of the
program sent to a node, after :mod:`servefleet.adapters.drift_collect.collector_pure`, whose
docstring describes the program."""

from __future__ import annotations

from typing import Any, ClassVar

# isort: split
# ---- node script part: the node gets the lines below, those above stay here ----
import os

READ_BYTES = 65536


# --------------------------------------------------------------------------- children


class Deadline(Exception):
    """The request's deadline passed (raised by the alarm in the main thread)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise Deadline()


def _spawn(argv: list[str], out_fd: int, err_fd: int) -> int:
    """Start ``argv`` (looked up on PATH) with stdin from /dev/null; its pid."""
    if hasattr(os, "posix_spawnp"):  # Python 3.8+
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_DUP2, out_fd, 1), (os.POSIX_SPAWN_DUP2, err_fd, 2)]
        return os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)
    import subprocess

    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_fd,
                            stderr=err_fd).pid


class Child:
    """A command started with its stdout (and stderr) on pipes; runs until :meth:`finish`."""

    live: ClassVar[dict[int, Child]] = {}
    """Children started and not yet reaped, by pid."""

    def __init__(self, argv: list[str], *, merge_stderr: bool = False) -> None:
        self.argv = argv
        self.pid = 0
        self.error = ""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self.pid = _spawn(argv, out_w, out_w if merge_stderr else err_w)
        except FileNotFoundError:
            self.error = f"{argv[0]}: command not found"
        except OSError as error:
            self.error = f"{argv[0]}: {error.strerror or error}"
        finally:
            os.close(out_w)
            os.close(err_w)
        self.out_fd, self.err_fd = out_r, err_r
        if self.pid:
            Child.live[self.pid] = self

    def finish(self, stop: list[bytes] | None = None,
               limit: int | None = None) -> tuple[int, bytes, str]:
        """``(status, stdout, last stderr line)``; 127 when it could not start. With
        ``stop``/``limit`` the child is killed once a marker was read or ``limit`` bytes."""
        chunks: list[bytes] = []
        size = 0
        cut = False
        try:
            if not self.pid:
                return 127, b"", self.error
            tail = b""
            while True:
                data = os.read(self.out_fd, READ_BYTES)
                if not data:
                    break
                chunks.append(data)
                size += len(data)
                window = tail + data
                if stop and any(marker in window for marker in stop):
                    cut = True
                    break
                if limit is not None and size >= limit:
                    cut = True
                    break
                tail = window[-256:]
            if cut:
                self.kill()
            err = b"" if cut else os.read(self.err_fd, READ_BYTES)
            _, status = os.waitpid(self.pid, 0)
            Child.live.pop(self.pid, None)
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            lines = err.decode("utf-8", "replace").strip().splitlines()
            return (0 if cut else code), b"".join(chunks), lines[-1] if lines else ""
        finally:
            os.close(self.out_fd)
            os.close(self.err_fd)

    def kill(self) -> None:
        """Stop the child (it is reaped by :meth:`finish`)."""
        try:
            os.kill(self.pid, 9)
        except OSError:
            return  # already gone

    @classmethod
    def kill_all(cls) -> None:
        """Stop every child still running (the deadline passed)."""
        for child in list(cls.live.values()):
            child.kill()


def run(argv: list[str]) -> tuple[int, bytes, str]:
    """Run a command to its end; ``(status, stdout, last stderr line)``."""
    return Child(argv).finish()

