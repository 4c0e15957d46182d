"""Boot real vLLM on this machine's GPU once per model of :mod:`truth_models`; keep each log.

Runs where a CUDA GPU and vLLM are (``python3 -m vllm.entrypoints.cli.main`` must import);
standard library only. For each model named (default: every one of ``MODELS``, in boot
order; ``VARIANTS`` name the same models with other settings) it writes
``WORK/<name>/config.json``, starts ``vllm serve`` with ``--load-format dummy`` (full-size
weights, randomly initialised: no checkpoint is read) and ``--skip-tokenizer-init``, waits
until ``/health`` answers 200, the server exits, or ``--timeout`` passes, then stops it with
SIGTERM and writes ``OUT/<name>.log`` (stdout and stderr, as written) and
``OUT/<name>.json`` (argv, seconds to ready, exit status).

    python3 bench/gpu/boot_vllm_truth.py --out "$OUT" qwen36-text-next llama31-8b

``--config-dir DIR`` boots ``DIR/<name>.config.json`` instead (a set kept outside the
project, scored by ``bench/bench_kvplan.py --held-out``). On a machine with several GPUs, one
runner per GPU boots a share of the list side by side:
``CUDA_VISIBLE_DEVICES=1 python3 bench/gpu/boot_vllm_truth.py --port 18201 …``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from processor_files import write_processor_files
from truth_models import MAX_MODEL_LEN, MODELS, VARIANTS

PORT = 18200
ENV = {
    "PYTHONUNBUFFERED": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
    "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
"""Added to the machine's environment: offline, no usage report, FlashInfer's sampler off
(FlashInfer is not installed), NVLink multicast off."""


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL after 30 s."""
    if server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def boot(name: str, work: Path, out: Path, timeout: float, port: int = PORT,
         config_dir: Path | None = None) -> dict[str, object]:
    """Boot ``name`` once; its record."""
    model, extra = VARIANTS.get(name, (name, ()))
    folder = work / model
    folder.mkdir(parents=True, exist_ok=True)
    config = ((config_dir / f"{name}.config.json").read_text() if config_dir is not None
              else json.dumps(MODELS[model](), indent=1) + "\n")
    (folder / "config.json").write_text(config)
    # A vision-language model's encoder is profiled with an item its processor builds: it
    # gets a processor and a tokenizer; every other model boots without a tokenizer.
    multimodal = "vision_config" in json.loads(config)
    if multimodal:
        write_processor_files(folder)
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(folder),
            "--served-model-name", name, "--load-format", "dummy",
            *(() if multimodal else ("--skip-tokenizer-init",)),
            "--max-model-len", str(MAX_MODEL_LEN), *extra,
            "--host", "127.0.0.1", "--port", str(port)]
    started = time.monotonic()
    record: dict[str, object] = {"model": name, "argv": argv[1:], "env": ENV}
    with (out / f"{name}.log").open("wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, **ENV}, start_new_session=True)
        try:
            ready = None
            while time.monotonic() - started < timeout and server.poll() is None:
                if healthy(port):
                    ready = time.monotonic() - started
                    break
                time.sleep(0.5)
            record["ready_s"] = round(ready, 1) if ready is not None else None
            record["exited_before_ready"] = server.poll()
        finally:
            # The server has a session of its own: on Ctrl-C or SIGTERM to this runner it
            # would keep the GPU, so it is stopped here whatever ended the wait.
            stop(server)
        record["exit"] = server.returncode
        record["seconds"] = round(time.monotonic() - started, 1)
    (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record), flush=True)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS),
                        help=f"among {', '.join([*MODELS, *VARIANTS])}, or the configs of "
                             "--config-dir")
    parser.add_argument("--config-dir", type=Path, default=None,
                        help="boot DIR/<name>.config.json for each name instead")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/sf-truth"))
    parser.add_argument("--port", type=int, default=PORT,
                        help="the servers' port (one per runner on a shared machine)")
    parser.add_argument("--timeout", type=float, default=240.0,
                        help="seconds one boot may take before it is stopped")
    args = parser.parse_args()
    # SIGTERM ends the run like Ctrl-C: through ``boot``'s clean-up, which stops the server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.out.mkdir(parents=True, exist_ok=True)
    known = [*MODELS, *VARIANTS]
    unknown = [n for n in args.models if (args.config_dir is None and n not in known)
               or (args.config_dir is not None
               and not (args.config_dir / f"{n}.config.json").is_file())]
    if unknown:
        parser.error(f"no config for {', '.join(unknown)}")
    records = [boot(name, args.work, args.out, args.timeout, args.port, args.config_dir)
               for name in args.models]
    return 0 if all(r["ready_s"] is not None for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
