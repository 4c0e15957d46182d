"""The stand-in's multi-node lines have the shape real multi-node vLLM runs printed
(``tests/core/bootlog/data/public-logs``: a headless worker's launch line, NCCL's channel
line), and the boot-log reader takes the worker's version from its launch line."""

from __future__ import annotations

import re
from pathlib import Path

from servefleet.core.bootlog import parse_text
from servefleet.sim.standin.standin_engine.vllm_multinode import JOIN_SITE, _nccl_line

PUBLIC = Path(__file__).resolve().parents[2] / "core" / "bootlog" / "data" / "public-logs"


def _real(name: str, needle: str) -> str:
    return next(line for line in (PUBLIC / name).read_text().splitlines() if needle in line)


def _shape(line: str) -> str:
    """The line with its numbers, hex ids, host names and addresses made generic."""
    line = re.sub(r"0x[0-9a-f]+", "0xH", line)
    line = re.sub(r"[0-9]+", "N", line)
    return re.sub(r"^(\([^)]*\) )*[A-Za-z0-9_.-]+:N:N", "HOST:N:N", line)


def test_the_nccl_channel_line_has_the_real_shape() -> None:
    real = _real("F-vllm-unknown-ray-multinode-nccl-net-ib-fragment.log", "[send] via NET/")
    ours = _nccl_line(1, 0)
    assert _shape(ours).replace("NET/Socket", "NET/IB") == _shape(real)


def test_the_headless_launch_line_has_the_real_shape_and_gives_the_version() -> None:
    real = _real("F-vllm-0.1.dev20051-headless-worker-node-rank1-excerpt.log",
                 "headless multiproc executor")
    ours = (f"INFO 11-26 05:00:00 [{JOIN_SITE}] Launching vLLM (v0.26.0) headless multiproc "
            "executor, with head node address 10.77.1.2:29501 for torch.distributed process "
            "group.")
    generic = re.compile(r"\(v[^)]*\)")
    assert _shape(generic.sub("(vX)", ours)) == _shape(generic.sub("(vX)", real))
    assert parse_text(ours + "\n").engine_version == "0.26.0"


def test_the_launch_line_matches_the_real_gpu_worker_too() -> None:
    real_dir = PUBLIC.parent / "vllm-gpu-real"
    lines = (real_dir / "h200x2-tp2-worker.log").read_text().splitlines()
    launch = next(i for i, line in enumerate(lines) if "headless multiproc executor" in line)
    inferred = next(i for i, line in enumerate(lines) if "Inferred data_parallel_rank" in line)
    assert inferred < launch
    assert lines[inferred].endswith("Inferred data_parallel_rank 0 from node_rank 1")
