"""The stand-in's vLLM HTTP API: health, models, version, chat, metrics, API key."""

from __future__ import annotations

import json
import socket

from prometheus_client.parser import text_string_to_metric_families
from standin_helpers import READY_VLLM, chat, free_port, http

MODEL = "Qwen/Qwen3.6-35B-A3B-FP8"
MTP = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']


def serve(standin, extra: list[str], env: dict[str, str] | None = None):
    port = free_port()
    proc = standin("vllm", ["serve", MODEL, "--served-model-name", "qwen36", "--max-model-len",
                            "65536", "--gpu-memory-utilization", "0.5", *extra, "--port",
                            str(port)], env=env or {})
    assert proc.wait_for(READY_VLLM), proc.stdout[-2000:]
    return proc, port


def metrics(port: int) -> dict[str, list]:
    status, raw = http(port, "/metrics")
    assert status == 200
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(raw.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def test_the_port_only_listens_once_the_engine_is_up(standin) -> None:
    port = free_port()
    proc = standin("vllm", ["serve", MODEL, "--port", str(port)],
                   env={"STANDIN_TIME_SCALE": "0.003"})
    proc.wait_for("Starting to load model")
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0  # bound, not listening: refused
    proc.wait_for(READY_VLLM)
    assert http(port, "/health") == (200, b"")


def test_models_version_and_health(standin) -> None:
    _, port = serve(standin, [], {"STANDIN_ENGINE_VERSION": "0.21.0"})
    assert http(port, "/health") == (200, b"")
    status, raw = http(port, "/version")
    assert (status, json.loads(raw)) == (200, {"version": "0.21.0"})
    status, raw = http(port, "/v1/models")
    listing = json.loads(raw)
    assert status == 200 and listing["object"] == "list"
    card = listing["data"][0]
    assert card["id"] == "qwen36"
    assert (card["object"], card["owned_by"], card["root"], card["parent"]) == \
        ("model", "vllm", MODEL, None)
    assert card["max_model_len"] == 65536
    assert http(port, "/nope")[0] == 404


def test_chat_is_deterministic_without_speculative_decoding(standin) -> None:
    proc, port = serve(standin, ["--reasoning-parser", "qwen3"])
    answers = {chat(port, "What is 6*7?", temperature=0)["choices"][0]["message"]["content"]
               for _ in range(4)}
    assert len(answers) == 1
    assert "6 * 7 = 42" in answers.pop()
    reply = chat(port, "What is 6*7?")
    message = reply["choices"][0]["message"]
    assert message["reasoning"]  # Qwen3.6 thinks by default
    assert reply["usage"]["completion_tokens"] > 0
    off = chat(port, "What is 6*7?", chat_template_kwargs={"enable_thinking": False})
    assert off["choices"][0]["message"]["reasoning"] is None
    assert '"POST /v1/chat/completions HTTP/1.1" 200 OK' in proc.stdout


def test_default_chat_template_kwargs_apply_and_requests_override_them(standin) -> None:
    _, port = serve(standin, ["--reasoning-parser", "qwen3", "--default-chat-template-kwargs",
                              '{"enable_thinking": false}'])
    assert chat(port, "hello")["choices"][0]["message"]["reasoning"] is None
    on = chat(port, "hello", chat_template_kwargs={"enable_thinking": True})
    assert on["choices"][0]["message"]["reasoning"]


def test_without_a_reasoning_parser_thinking_stays_in_the_content(standin) -> None:
    _, port = serve(standin, [])
    content = chat(port, "hello")["choices"][0]["message"]["content"]
    assert content.startswith("<think>\n") and "</think>" in content


def test_mtp_makes_identical_greedy_requests_differ_sometimes(standin) -> None:
    _, port = serve(standin, MTP)
    answers = [chat(port, "Name a colour.", temperature=0)["choices"][0]["message"]["content"]
               for _ in range(6)]
    assert len(set(answers)) > 1


def test_metrics_use_vllm_names_and_count_spec_decoding(standin) -> None:
    _, port = serve(standin, MTP)
    for _ in range(5):
        chat(port, "Tell me about the ocean, please, in some detail.")
    found = metrics(port)
    for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                 "vllm:num_requests_waiting", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:cache_config_info",
                 "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_per_pos_total"):
        assert name in found, name
        for sample in found[name]:
            assert sample.labels["model_name"] == "qwen36"
            assert sample.labels["engine"] == "0"
    info = found["vllm:cache_config_info"][0].labels
    assert info["cache_dtype"] == "auto" and int(info["num_gpu_blocks"]) > 0
    drafts = found["vllm:spec_decode_num_drafts_total"][0].value
    draft_tokens = found["vllm:spec_decode_num_draft_tokens_total"][0].value
    accepted = found["vllm:spec_decode_num_accepted_tokens_total"][0].value
    per_pos = {s.labels["position"]: s.value
               for s in found["vllm:spec_decode_num_accepted_tokens_per_pos_total"]}
    assert draft_tokens == 2 * drafts
    assert 0.65 < accepted / draft_tokens < 0.80  # ~72 % like the reference fleet
    assert per_pos["0"] > per_pos["1"]
    assert found["vllm:generation_tokens_total"][0].value > 0


def test_no_spec_decode_metrics_without_speculative_decoding(standin) -> None:
    _, port = serve(standin, [])
    chat(port, "hi")
    assert "vllm:spec_decode_num_drafts_total" not in metrics(port)


def test_periodic_stats_lines(standin) -> None:
    proc, port = serve(standin, MTP, {"STANDIN_STATS_INTERVAL": "0.5"})
    chat(port, "hello there")
    proc.wait_for("SpecDecoding metrics: Mean acceptance length:")
    assert "Engine 000: Avg prompt throughput:" in proc.stdout


def test_api_key_protects_v1_only(standin) -> None:
    _, port = serve(standin, ["--api-key", "sekret"])
    assert http(port, "/v1/models")[0] == 401
    assert json.loads(http(port, "/v1/models")[1]) == {"error": "Unauthorized"}
    assert http(port, "/v1/models", headers={"Authorization": "Bearer sekret"})[0] == 200
    assert http(port, "/health")[0] == 200
    assert http(port, "/metrics")[0] == 200
    assert http(port, "/version")[0] == 200
