"""The stand-in in llama.cpp mode: llama-server's command line, load log and endpoints."""

from __future__ import annotations

import json
import re
import time

from prometheus_client.parser import text_string_to_metric_families
from standin_helpers import READY_LLAMA, chat, free_port, http

from servefleet.core.bootlog import parse_text

GGUF = "/models/Qwen3.6-35B-A3B-Q4_K_M.gguf"
RTX5090 = {"STANDIN_GPU_NAME": "NVIDIA GeForce RTX 5090", "STANDIN_ENGINE_VERSION": "b8680"}


def serve(standin, extra: list[str], env: dict[str, str] | None = None):
    port = free_port()
    proc = standin("llama-server", ["-m", GGUF, "--host", "127.0.0.1", "--port", str(port), *extra],
                   env={**RTX5090, **(env or {})})
    return proc, port


def test_load_log_in_llama_cpp_format(standin) -> None:
    proc, _ = serve(standin, ["-c", "65536", "-np", "1", "-fa", "on", "-ngl", "99", "--jinja"])
    assert proc.wait_for(READY_LLAMA)
    proc.wait_for("srv  update_slots: all slots are idle")
    out = proc.stdout
    assert "ggml_cuda_init: found 1 CUDA devices (Total VRAM: 32112 MiB):" in out
    assert "  Device 0: NVIDIA GeForce RTX 5090, compute capability 12.0, VMM: yes" in out
    assert "build_info: b8680-15f786e65" in out
    assert "load_tensors: offloaded 41/41 layers to GPU" in out
    assert re.search(r"^llama_context: n_ctx\s+= 65536$", out, re.MULTILINE)
    assert re.search(r"^llama_context: flash_attn\s+= enabled$", out, re.MULTILINE)
    # K = 65536 cells x 10 attention layers x 2 KV heads x 256 x 2 bytes = 640 MiB.
    assert re.search(r"^llama_kv_cache: size = 1280\.00 MiB \(\s*65536 cells,\s+10 layers,\s+"
                     r"1/1 seqs\), K \(f16\):\s+640\.00 MiB, V \(f16\):\s+640\.00 MiB$", out,
                     re.MULTILINE)
    assert re.search(r"^main: server is listening on http://127\.0\.0\.1:\d+$", out, re.MULTILINE)
    facts = parse_text(out)
    assert facts.engine == "llama.cpp"
    assert facts.outcome == "ready"
    assert facts.n_ctx == 65536
    assert facts.n_parallel == 1
    assert facts.kv_cache_mib == 1280.0
    assert facts.gpu_layers_offloaded == "41/41"
    assert facts.flash_attn is True
    assert facts.device_name and "RTX 5090" in facts.device_name


def test_quantized_kv_and_auto_parallel(standin) -> None:
    proc, _ = serve(standin, ["-c", "32768", "-ctk", "q8_0", "-ctv", "q8_0"])
    assert proc.wait_for(READY_LLAMA)
    out = proc.stdout
    assert "main: n_parallel is set to auto, using n_parallel = 4 and kv_unified = true" in out
    assert "K (q8_0):  170.00 MiB, V (q8_0):  170.00 MiB" in out
    assert re.search(r"^llama_context: flash_attn\s+= auto$", out, re.MULTILINE)
    assert "sched_reserve: Flash Attention was auto, set to enabled" in out


def test_health_answers_503_while_loading_then_200(standin) -> None:
    proc, port = serve(standin, ["-c", "8192"], {"STANDIN_TIME_SCALE": "0.05"})
    codes = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and READY_LLAMA not in proc.stdout:
        try:
            status, body = http(port, "/health", timeout=2)
        except OSError:
            time.sleep(0.05)
            continue
        codes.add(status)
        if status == 503:
            assert json.loads(body) == {"error": {"code": 503, "message": "Loading model",
                                                  "type": "unavailable_error"}}
        time.sleep(0.05)
    assert 503 in codes
    proc.wait_for(READY_LLAMA)
    assert http(port, "/health") == (200, b'{"status":"ok"}')


def test_props_slots_models_and_chat(standin) -> None:
    proc, port = serve(standin, ["-c", "16384", "-np", "2", "-a", "qwen36-q4"])
    assert proc.wait_for(READY_LLAMA)
    props = json.loads(http(port, "/props")[1])
    assert props["total_slots"] == 2
    assert props["build_info"] == "b8680-15f786e65"
    assert props["model_path"] == GGUF
    slots = json.loads(http(port, "/slots")[1])
    assert [s["id"] for s in slots] == [0, 1] and slots[0]["n_ctx"] == 8192
    models = json.loads(http(port, "/v1/models")[1])
    assert models["data"][0]["id"] == "qwen36-q4"
    first = chat(port, "What is 2+3?", temperature=0)
    again = chat(port, "What is 2+3?", temperature=0)
    content = first["choices"][0]["message"]["content"]
    assert content == again["choices"][0]["message"]["content"]  # stable, unlike vLLM + MTP
    assert "2 + 3 = 5" in content
    assert first["choices"][0]["message"]["reasoning_content"]
    assert "srv  log_server_r: done request: POST /v1/chat/completions 127.0.0.1 200" in proc.stdout
    assert http(port, "/metrics")[0] == 501  # only with --metrics


def test_reasoning_budget_zero_turns_thinking_off(standin) -> None:
    proc, port = serve(standin, ["-c", "8192", "--reasoning-budget", "0"])
    assert proc.wait_for(READY_LLAMA)
    assert "reasoning_content" not in chat(port, "hi")["choices"][0]["message"]


def test_metrics_with_llama_cpp_names(standin) -> None:
    proc, port = serve(standin, ["-c", "8192", "--metrics"])
    assert proc.wait_for(READY_LLAMA)
    chat(port, "hello")
    status, raw = http(port, "/metrics")
    assert status == 200
    names = {s.name for f in text_string_to_metric_families(raw.decode()) for s in f.samples}
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total",
                 "llamacpp:requests_processing", "llamacpp:n_decode_total"):
        assert name in names


def test_api_key(standin) -> None:
    proc, port = serve(standin, ["-c", "8192", "--api-key", "k1,k2"])
    assert proc.wait_for(READY_LLAMA)
    assert http(port, "/health")[0] == 200
    assert http(port, "/props")[0] == 401
    assert http(port, "/props", headers={"Authorization": "Bearer k2"})[0] == 200


def test_unknown_flag_and_bad_values(standin) -> None:
    proc, _ = serve(standin, ["--foo"])
    assert proc.wait_exit() == 1
    assert proc.stderr.strip() == "error: invalid argument: --foo"
    proc, _ = serve(standin, ["-c", "lots"])
    assert proc.wait_exit() == 1
    assert proc.stderr.startswith('error while handling argument "-c": stoi')


def test_kv_oom_fault(standin, control_dir) -> None:
    (control_dir / "fault").write_text("kv_oom\n")
    proc, _ = serve(standin, ["-c", "65536"], {"STANDIN_CONTROL_DIR": str(control_dir)})
    assert proc.wait_exit() == 1
    assert "cudaMalloc failed: out of memory" in proc.stdout
    assert proc.stdout.rstrip().endswith("main: exiting due to model loading error")
    assert parse_text(proc.stdout).outcome == "failed"


def test_context_too_big_for_the_card_fails(standin) -> None:
    proc, _ = serve(standin, ["-c", "262144", "-np", "1", "-ctk", "f32", "-ctv", "f32",
                              "--fit", "off"], {"STANDIN_GPU_MEMORY_GIB": "24"})
    assert proc.wait_exit() == 1
    assert "failed to allocate buffer for kv cache" in proc.stdout
