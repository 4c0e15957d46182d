"""How a profile's command line changes on a simulated node's CPU engine: every change is
one rule of ``cpu_twin.py``, said in the boot log, and everything else passes unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from servefleet.sim.engines import cpu_twin

TWIN = "/opt/servefleet-models/tiny-qwen3-moe"
FP8 = ["Qwen/Qwen3.6-35B-A3B-FP8", "--served-model-name", "qwen36", "--port", "8000",
       "--gpu-memory-utilization", "0.45", "--kv-cache-dtype", "fp8_e4m3",
       "--attention-backend", "FLASHINFER", "--enable-prefix-caching",
       "--speculative-config", '{"method":"qwen3_next_mtp","num_speculative_tokens":2}']


def test_vllm_gpu_flags_become_cpu_flags() -> None:
    args, notes = cpu_twin.rewrite("vllm", FP8, TWIN, fp8_kv=True)
    assert args == [TWIN, "--served-model-name", "qwen36", "--port", "8000",
                    "--kv-cache-dtype", "fp8_e4m3", "--enable-prefix-caching",
                    "--speculative-config",
                    '{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":4,'
                    '"prompt_lookup_min":2}', "--enforce-eager"]
    # the model, two dropped flags, the speculative method, eager mode
    assert len(notes) == 5
    assert any(n.startswith("--attention-backend FLASHINFER dropped: ") for n in notes)
    assert any("qwen3_next_mtp" in n and "ngram" in n for n in notes)


def test_an_fp8_kv_cache_becomes_the_model_dtype_where_the_cpu_cannot_keep_it() -> None:
    args, notes = cpu_twin.rewrite("vllm", FP8, TWIN, fp8_kv=False)
    assert args[args.index("--kv-cache-dtype") + 1] == "auto"
    assert any(n.startswith("--kv-cache-dtype fp8_e4m3 → auto: vLLM's CPU build keeps an FP8 "
                            "KV cache only on x86 with AVX-512 or AMX") for n in notes)
    other = ["m", "--kv-cache-dtype", "turboquant_4bit_nc"]
    kept = cpu_twin.rewrite("vllm", other, TWIN, fp8_kv=False)[0]
    assert kept[kept.index("--kv-cache-dtype") + 1] == "turboquant_4bit_nc"


def test_fp8_kv_cache_needs_avx512_or_amx_in_the_cpu_flags() -> None:
    assert cpu_twin.fp8_kv_cache_here("flags\t\t: fpu sse2 avx2 avx512f avx512bw\n")
    assert cpu_twin.fp8_kv_cache_here("flags\t\t: fpu avx2 amx_tile amx_bf16\n")
    assert not cpu_twin.fp8_kv_cache_here("flags\t\t: fpu sse2 avx avx2 fma\n")
    assert not cpu_twin.fp8_kv_cache_here("Features\t: fp asimd\n")  # aarch64


def test_served_name_defaults_to_the_profiles_model_id() -> None:
    args, _ = cpu_twin.rewrite("vllm", ["Qwen/Qwen3-8B", "--port=8001"], TWIN)
    assert args == [TWIN, "--served-model-name", "Qwen/Qwen3-8B", "--port=8001",
                    "--enforce-eager"]


def test_inline_values_and_kept_values() -> None:
    args, notes = cpu_twin.rewrite("vllm", ["m", "--served-model-name", "x",
                                            "--hf-overrides", '{"text_config": {}}',
                                            "--quantization=fp8"], TWIN)
    assert args == [TWIN, "--served-model-name", "x", "--enforce-eager"]
    assert [n.split(" ")[0] for n in notes] == ["model", "--hf-overrides", "--quantization",
                                                "--enforce-eager"]


def test_compilation_settings_in_every_spelling_give_way_to_eager() -> None:
    args, notes = cpu_twin.rewrite("vllm", ["m", "-O3", "--compilation-config.cudagraph_mode="
                                            "PIECEWISE", "--optimization-level", "2"], TWIN)
    assert args == [TWIN, "--served-model-name", "m", "--enforce-eager"]
    assert len(notes) == 5


def test_llamacpp_model_becomes_the_twin() -> None:
    gguf = "/opt/servefleet-models/tiny-qwen35moe.gguf"
    args, notes = cpu_twin.rewrite("llama.cpp", ["-m", "/models/Q.gguf", "-c", "65536",
                                                 "-ngl", "99", "-fa", "on"], gguf)
    assert args == ["-m", gguf, "-c", "65536", "-ngl", "99", "-fa", "on",
                    "--override-kv", "qwen35moe.context_length=int:262144"]
    assert len(notes) == 2 and "test-llama-archs" in notes[0]
    assert notes[1].startswith("--override-kv qwen35moe.context_length=int:262144 added: ")


def run_twin(tmp_path: Path, engine: str, args: list[str],
             fault: str | None, **env_added: str) -> subprocess.CompletedProcess[str]:
    """Run cpu_twin.py as the container does, with ``echo`` standing for both engines."""
    control = tmp_path / "control"
    control.mkdir()
    if fault is not None:
        (control / "fault").write_text(fault + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("vllm", "real-engine"):
        script = bin_dir / name
        script.write_text("#!/bin/sh\necho \"$(basename \"$0\") $*\"\n")
        script.chmod(0o755)
    env = {**os.environ, "STANDIN_CONTROL_DIR": str(control),
           "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "SIM_ENGINE_ENTRYPOINT": json.dumps([str(bin_dir / "real-engine")]),
           "SIM_ENGINE_MODEL": TWIN, "SIM_ENGINE_VERSION": "0.32.0", **env_added}
    return subprocess.run([sys.executable, cpu_twin.__file__, engine, *args], env=env,
                          capture_output=True, text=True, check=True)


def test_runs_the_real_engine_and_says_what_it_changed(tmp_path: Path) -> None:
    out = run_twin(tmp_path, "vllm", ["Qwen/X", "--attention-backend", "FLASHINFER"], None)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("servefleet-sim: the real vllm 0.32.0 (CPU build) runs")
    assert any("--attention-backend FLASHINFER dropped" in line for line in lines)
    assert lines[-1] == f"real-engine serve {TWIN} --served-model-name Qwen/X --enforce-eager"


def test_a_fault_marker_runs_the_stand_in(tmp_path: Path) -> None:
    out = run_twin(tmp_path, "vllm", ["Qwen/X", "--port", "8000"], "kv_oom")
    lines = out.stdout.splitlines()
    assert "fault marker(s) kv_oom set" in lines[0]
    assert lines[-1] == "vllm serve Qwen/X --port 8000"


def test_the_node_files_stand_in_runs_the_stand_in(tmp_path: Path) -> None:
    """``SIM_STANDIN=1`` (the override, where the node file lists no real engine): the
    stand-in answers although the real engine is mounted."""
    out = run_twin(tmp_path, "vllm", ["Qwen/X", "--port", "8000"], None,
                   **{cpu_twin.STANDIN_ENV: "1"})
    lines = out.stdout.splitlines()
    assert "the node file lists no real vllm (sim.engines)" in lines[0]
    assert lines[-1] == "vllm serve Qwen/X --port 8000"


def test_an_explicit_kv_budget_sizes_the_pool_instead_of_the_nodes_kv_space(
        tmp_path: Path) -> None:
    # servefleet tune on a simulated node writes --kv-cache-memory-bytes; the node's
    # VLLM_CPU_KVCACHE_SPACE would win over it in vLLM, so the twin unsets it.
    args, notes = cpu_twin.rewrite("vllm", ["Qwen/X", "--kv-cache-memory-bytes=805306368"],
                                   TWIN)
    assert "--kv-cache-memory-bytes=805306368" in args
    assert any(n.startswith("--kv-cache-memory-bytes 805306368 kept, VLLM_CPU_KVCACHE_SPACE "
                            "unset: ") for n in notes)
    control = tmp_path / "control"
    control.mkdir()
    probe = tmp_path / "real-engine"
    probe.write_text("#!/bin/sh\necho \"space=${VLLM_CPU_KVCACHE_SPACE-unset} $*\"\n")
    probe.chmod(0o755)
    env = {**os.environ, "STANDIN_CONTROL_DIR": str(control), "VLLM_CPU_KVCACHE_SPACE": "1",
           "SIM_ENGINE_ENTRYPOINT": json.dumps([str(probe)]), "SIM_ENGINE_MODEL": TWIN}
    for extra, space in ((["--kv-cache-memory-bytes", "805306368"], "unset"), ([], "1")):
        out = subprocess.run([sys.executable, cpu_twin.__file__, "vllm", "Qwen/X", *extra],
                             env=env, capture_output=True, text=True, check=True)
        assert out.stdout.splitlines()[-1].startswith(f"space={space} serve {TWIN}")


def test_the_stand_in_answers_even_with_the_real_engine_first_on_path(tmp_path: Path) -> None:
    """A simulated node's PATH starts with the real engine's commands (a bench needs
    `vllm bench serve`); the stand-in run must not pick the real `vllm` from it."""
    control = tmp_path / "control"
    control.mkdir()
    (control / "fault").write_text("kv_oom\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text('#!/bin/sh\necho "stand-in on PATH=$PATH"\n')
    (bin_dir / "vllm").chmod(0o755)
    env = {**os.environ, "STANDIN_CONTROL_DIR": str(control),
           "PATH": f"{cpu_twin.ENGINE_MOUNT}/bin:{bin_dir}:{os.environ['PATH']}",
           "SIM_ENGINE_ENTRYPOINT": "[]", "SIM_ENGINE_MODEL": TWIN}
    out = subprocess.run([sys.executable, cpu_twin.__file__, "vllm", "Qwen/X"], env=env,
                         capture_output=True, text=True, check=True)
    last = out.stdout.splitlines()[-1]
    assert last.startswith("stand-in on PATH=") and cpu_twin.ENGINE_MOUNT not in last
