"""Run the GPU probe script on a node (or here) and parse what it prints.

The script is sent as ``python3 -`` on stdin, so nothing needs installing on the node beyond
python3; it reads NVML through pynvml when present and falls back to nvidia-smi. It is kept
in two parts, joined into one program when sent (:data:`PROBE_PARTS`): the pure parsing
(:mod:`servefleet.core.gpu.probe_parse`, which describes the program; the controller parses
with it too) and the reads with the entry point (:mod:`.probe_script`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

from servefleet.adapters.node_script import assemble
from servefleet.core.errors import RemoteError
from servefleet.core.gpu import GpuProbeResult, parse_probe_json

RunRemote = Callable[[list[str], bytes], tuple[int, bytes | str, bytes | str]]
"""``run_remote(argv, stdin) -> (exit_status, stdout, stderr)``, as the SSH transport
provides it: runs ``argv`` on the node with ``stdin`` fed to it."""

PROBE_TIMEOUT_SECONDS = 120
"""Local runs only: the script's own nvidia-smi calls give up after 30 s each."""
PROBE_PARTS = ("servefleet.core.gpu:probe_parse.py", "probe_script.py")
"""The probe script's parts, in the order they are joined (see
:mod:`servefleet.adapters.node_script`)."""


def probe_script_source() -> bytes:
    """The probe script's source, as sent to the node: its parts joined into one program."""
    return assemble(__name__, PROBE_PARTS)


def _text(data: bytes | str) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def run_probe(run_remote: RunRemote, *, node: str = "node",
              python: str = "python3", cuda: bool = False) -> GpuProbeResult:
    """Run the probe through ``run_remote`` and return what it read; ``cuda``: also the
    memory CUDA reports (opens a CUDA context on each GPU: ``servefleet probe`` only).

    Raises :class:`RemoteError` when the node has no ``python``, the script failed, or it
    printed something other than a probe result.
    """
    argv = [python, "-", "--cuda"] if cuda else [python, "-"]
    status, stdout, stderr = run_remote(argv, probe_script_source())
    if status == 127:
        raise RemoteError(node, f"GPU probe needs {python} on the node, which was not found",
                          status, _text(stderr)[-500:])
    if status != 0:
        raise RemoteError(node, "GPU probe failed", status, _text(stderr)[-500:])
    try:
        return parse_probe_json(_text(stdout))
    except ValueError as error:
        raise RemoteError(node, f"GPU probe printed no valid result ({error})"[:500],
                          status, _text(stderr)[-500:]) from error


def run_probe_locally(*, python: str = sys.executable, python_args: Sequence[str] = (),
                      env: Mapping[str, str] | None = None,
                      cuda: bool = False) -> GpuProbeResult:
    """Run the probe on this machine in a child interpreter (tests, and the real-GPU run).

    ``python_args`` go before ``-`` (``["-S"]`` hides site-packages, and with them pynvml);
    ``env`` replaces the environment (a ``PATH`` holding another ``nvidia-smi``).
    """
    def run_here(argv: list[str], stdin: bytes) -> tuple[int, bytes, bytes]:
        done = subprocess.run([argv[0], *python_args, *argv[1:]], input=stdin,
                              capture_output=True, env=None if env is None else dict(env),
                              timeout=PROBE_TIMEOUT_SECONDS, check=False)
        return done.returncode, done.stdout, done.stderr

    return run_probe(run_here, node="localhost", python=python, cuda=cuda)


__all__ = ["PROBE_PARTS", "RunRemote", "probe_script_source", "run_probe", "run_probe_locally"]
