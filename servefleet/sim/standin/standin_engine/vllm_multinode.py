"""``vllm serve … --nnodes N --node-rank R --master-addr A --master-port P [--headless]``.

A real multi-node vLLM (multiprocessing executor, vLLM PR #23691) joins every rank into
one torch.distributed group rendezvousing on the head's ``--master-port``; a rank whose
peer dies fails too. The stand-in keeps exactly that visible, over real TCP:

* the **worker** (``--headless``, rank > 0) prints vLLM's own line (``run_headless`` in
  ``vllm/entrypoints/cli/serve.py``, 0.32.0: ``Launching vLLM (v%s) headless multiproc
  executor, with head node address %s for torch.distributed process group.``), connects
  to the head's master port (retrying until the head listens), prints NCCL's channel line
  when ``NCCL_DEBUG=INFO`` (``… [send] via NET/Socket/0``: the sim's link is a veth, no
  RDMA; format as in NVIDIA/nccl#952), then serves nothing and exits 1 when the head
  goes away;
* the **head** (rank 0) listens on the master port and waits for every worker before its
  boot goes on (KV pool, graphs, API); a worker that goes away afterwards stops it.

Faults on a worker's node: ``crash_after_boot`` or ``kv_oom`` make the worker exit 1
after it joined (the head then stops too); ``hang_loading`` makes it never join.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from collections.abc import Callable

from .faults import Faults
from .vllm_log import VllmLog

JOIN_SITE = "serve.py:224"
"""Where vLLM 0.32.0 logs the headless launch line."""
CONNECT_RETRY_SECONDS = 0.2
PEER_GONE_EXIT = 1


def _nccl_line(rank: int, peer: int, nranks: int = 2) -> str:
    """NCCL 2.2x's channel line, as a real multi-node vLLM printed it (``toolbox:22126:22126
    [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/0 comm 0x2035d540 nRanks
    02``, tests/core/bootlog/data/public-logs), over a socket instead of RDMA."""
    host = socket.gethostname()
    return (f"{host}:{os.getpid()}:{os.getpid()} [0] NCCL INFO Channel 00/0 : {rank}[0] -> "
            f"{peer}[0] [send] via NET/Socket/0 comm 0x{id(host) & 0xffffffff:x} "
            f"nRanks {nranks:02d}")


def run_worker(args: argparse.Namespace, version: str, log: VllmLog, faults: Faults,
               env: dict[str, str]) -> int:
    """The headless rank: join line, connect to the head, wait until it goes away."""
    addr = str(args.master_addr)
    port = int(args.master_port)
    rank = int(args.node_rank)
    if faults.has("hang_loading"):
        while True:
            time.sleep(3600)
    # Logged by the headless main process itself: no (APIServer)/(EngineCore) prefix.
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
    # A real 0.26.0 worker prints this first (tests/core/bootlog/data/vllm-gpu-real).
    log.write_raw(f"INFO {stamp} [arg_utils.py:2056] Inferred data_parallel_rank 0 from "
                  f"node_rank {rank}\n")
    log.write_raw(f"INFO {stamp} [{JOIN_SITE}] Launching vLLM (v{version}) headless "
                  f"multiproc executor, with head node address {addr}:{port} for "
                  "torch.distributed process group.\n")
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            time.sleep(CONNECT_RETRY_SECONDS)
    conn.sendall(f"rank {rank}\n".encode())
    if env.get("NCCL_DEBUG", "").upper() == "INFO":
        log.write_raw(_nccl_line(rank, 0) + "\n")
    for fault in ("crash_after_boot", "kv_oom"):
        if faults.has(fault):
            time.sleep(1.0)
            log.write_raw(f"stand-in fault {fault}: the headless rank exits\n")
            return PEER_GONE_EXIT
    conn.settimeout(None)
    while conn.recv(1024):
        pass
    log.write_raw(f"the head {addr}:{port} closed the torch.distributed connection\n")
    return PEER_GONE_EXIT


def wait_for_workers(args: argparse.Namespace, log: VllmLog, env: dict[str, str],
                     on_lost: Callable[[str], None]) -> socket.socket:
    """The head: listen on the master port, wait for every other rank, then watch them."""
    nnodes = int(args.nnodes)
    port = int(args.master_port)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("", port))
    server.listen(nnodes)
    peers: list[socket.socket] = []
    while len(peers) < nnodes - 1:
        conn, _ = server.accept()
        conn.recv(64)
        peers.append(conn)
        if env.get("NCCL_DEBUG", "").upper() == "INFO":
            log.write_raw(_nccl_line(0, len(peers)) + "\n")

    def watch(conn: socket.socket) -> None:
        try:
            while conn.recv(1024):
                pass
        except OSError:
            pass
        on_lost(f"a headless rank closed its torch.distributed connection to port {port}")

    for conn in peers:
        threading.Thread(target=watch, args=(conn,), daemon=True).start()
    return server


def lost_peer(log: VllmLog) -> Callable[[str], None]:
    """What the head does when a rank goes away: say so and exit (as its engine core dies
    with its peer)."""
    def lost(why: str) -> None:
        log.write_raw(why + "\n")
        sys.stdout.flush()
        os._exit(PEER_GONE_EXIT)
    return lost
