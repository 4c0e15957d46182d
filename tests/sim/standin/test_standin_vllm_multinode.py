"""The stand-in vLLM across two ranks on loopback: the worker prints vLLM's headless join
line and NCCL's transport line, the head boots only once the worker joined, and a rank
that goes away takes the other down (over a real TCP connection)."""

from __future__ import annotations

import time
from typing import Any

from standin_helpers import READY_VLLM, free_port

MODEL = "Qwen/Qwen3.6-35B-A3B-FP8"
JOINED = "headless multiproc executor, with head node address 127.0.0.1:{port} for " \
    "torch.distributed process group."


def _rank(standin: Any, rank: int, api: int, master: int, env: dict[str, str] | None = None,
          ) -> Any:
    args = ["serve", MODEL, "--tensor-parallel-size", "2", "--port", str(api),
            "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", str(rank),
            "--master-addr", "127.0.0.1", "--master-port", str(master)]
    return standin("vllm", args + (["--headless"] if rank else []),
                   env={"STANDIN_GPU_COUNT": "1", **(env or {})})


def _serving_pair(standin: Any) -> tuple[Any, Any]:
    """A head and its worker on fresh ports, once the head serves."""
    api, master = free_port(), free_port()
    head = _rank(standin, 0, api, master)
    worker = _rank(standin, 1, api, master)
    assert head.wait_for(READY_VLLM), head.stdout[-2000:]
    return head, worker


def test_the_head_waits_for_the_worker_then_serves(standin: Any) -> None:
    api, master = free_port(), free_port()
    head = _rank(standin, 0, api, master, {"NCCL_DEBUG": "INFO"})
    time.sleep(2.0)
    assert READY_VLLM not in head.stdout, "the head booted without its worker"
    worker = _rank(standin, 1, api, master, {"NCCL_DEBUG": "INFO"})
    assert worker.wait_for(JOINED.format(port=master)), worker.stdout[-2000:]
    assert worker.wait_for("[send] via NET/Socket/0"), worker.stdout[-2000:]
    assert head.wait_for(READY_VLLM), head.stdout[-2000:]
    assert "Launching vLLM (v0.21.0) headless" in worker.stdout
    assert "Application startup complete" not in worker.stdout  # headless: no API


def test_a_dead_worker_stops_the_head_and_a_dead_head_the_worker(standin: Any) -> None:
    head, worker = _serving_pair(standin)
    worker.proc.kill()
    assert head.wait_exit() == 1
    assert "closed its torch.distributed connection" in head.stdout
    head, worker = _serving_pair(standin)
    head.proc.kill()
    assert worker.wait_exit() == 1
    assert "closed the torch.distributed connection" in worker.stdout


def test_a_worker_fault_ends_both(standin: Any) -> None:
    api, master = free_port(), free_port()
    head = _rank(standin, 0, api, master)
    worker = _rank(standin, 1, api, master, {"STANDIN_FAULT": "crash_after_boot"})
    assert worker.wait_exit() == 1
    assert JOINED.format(port=master) in worker.stdout
    assert head.wait_exit() == 1
