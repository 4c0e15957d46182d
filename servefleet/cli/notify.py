"""``--notify CMD``: hand a JSON document to the operator's own command (drift and watch).

The command is split like a shell would split it and run without one, so nothing in a
report can become shell syntax; the document goes on stdin, never on the command line.
"""

from __future__ import annotations

import shlex
import subprocess

NOTIFY_TIMEOUT_SECONDS = 120
"""A notifier that hangs (a mail relay down) must not hold the next check back forever."""


def run_notify(command: str, document: str) -> str | None:
    """Run ``command`` with ``document`` on stdin; None when it succeeded, else one line
    saying why not (the caller prints it and goes on: a failed notifier is not drift)."""
    argv = shlex.split(command)
    if not argv:
        return "--notify: empty command"
    try:
        done = subprocess.run(argv, input=document.encode(), capture_output=True,
                              timeout=NOTIFY_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"--notify {argv[0]}: {error}"
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip()[-300:]
        return f"--notify {argv[0]} exited {done.returncode}" + (f": {tail}" if tail else "")
    return None
