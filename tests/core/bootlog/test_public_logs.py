"""The reader on real public logs it was not built against (``data/public-logs``, each with
its source in the README there): served-but-no-ready-line, an operator's stop before and
after ready, architectures stated outside vLLM's weight-load line, command-line errors,
and a headless worker's version line."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet.core.bootlog import parse_file

DATA = Path(__file__).parent / "data" / "public-logs"

# file: (outcome, engine, engine_version, architecture, failure_class)
EXPECTED: dict[str, tuple[str, str | None, str | None, str | None, str | None]] = {
    # A: served 2xx responses, no "Application startup complete" / listening line needed
    "A-llamacpp-b8179-qwen2-served-windows-vulkan.log":
        ("ready", "llama.cpp", "8179 (ecbcb7ea9)", "qwen2", None),
    "A-llamacpp-unknown-qwen35moe-served-no-build-line.log":
        ("ready", "llama.cpp", None, "qwen35moe", None),
    # B: an operator's stop after ready stays ready, whatever the teardown prints
    "B-vllm-0.25.1-gemma4-int4-sigterm-after-serving.log":
        ("ready", "vllm", "0.25.1", "Gemma4ForConditionalGeneration", None),
    "B-vllm-0.7.2-keyboardinterrupt-after-serving.log": ("ready", "vllm", "0.7.2", None, None),
    "B-sglang-unknown-laguna-int4-sigterm-after-serving.log":
        ("ready", "sglang", None, "LagunaForCausalLM", None),
    "B-llamacpp-b6050-cleanup-after-serving.log":
        ("ready", "llama.cpp", "6050 (78452405)", "llama", None),
    "B-llamacpp-b4807-ctrl-c-then-abort-after-serving.log":
        ("ready", "llama.cpp", None, None, None),
    "B-llamacpp-unknown-idle-stop-new-log-format.log": ("ready", "llama.cpp", None, None, None),
    # C: an operator's stop before ready is incomplete, not failed
    "C-vllm-0.10.0-sigterm-during-boot.log": ("incomplete", "vllm", "0.10.0", None, None),
    "C-vllm-0.21.0-sigterm-while-loading-tokenizer.log":
        ("incomplete", "vllm", "0.21.0", "Qwen2ForCausalLM", None),
    "C-vllm-0.8.5.post1-sigterm-waiting-for-ray-gpus.log":
        ("incomplete", "vllm", "0.8.5.post1", None, None),
    # The process tree vanished before ready and the log shows no stop (its source says it
    # was aborted; the log cannot): a silent death, as the reader states it.
    "C-sglang-unknown-aborted-during-weight-load.log":
        ("failed", "sglang", None, "LagunaForCausalLM", "engine_core_died"),
    # D: architectures stated on other lines
    "D-sglang-unknown-load-weight-end-without-elapsed-docker.log":
        ("ready", "sglang", None, "Qwen2ForCausalLM", None),
    "D-sglang-unknown-qwq32b-tp4-load-weight-end-without-elapsed.log":
        ("ready", "sglang", None, "Qwen2ForCausalLM", None),
    "D-llamacpp-b4400-general-architecture-llama.log":
        ("ready", "llama.cpp", "4400 (6e1531ac)", "llama", None),
    # E: the command line refused
    "E-vllm-unknown-guided-decoding-backend-invalid-choice.log":
        ("failed", "vllm", None, None, "invalid_arguments"),
    "E-vllm-unknown-api-server-unrecognized-arguments-wrapper.log":
        ("failed", "vllm", None, None, "invalid_arguments"),
    "E-vllm-0.17.1-top-level-unrecognized-arguments.log":
        ("failed", "vllm", None, None, "invalid_arguments"),
    "E-vllm-unknown-renamed-cli-unrecognized-arguments.log":
        ("failed", "vllm", None, None, "invalid_arguments"),
    "E-sglang-0.5.5-unrecognized-arguments.log":
        ("failed", "sglang", None, None, "invalid_arguments"),
    "E-llamacpp-unknown-invalid-argument-hf.log":
        ("failed", "llama.cpp", None, None, "invalid_arguments"),
    # F: a headless worker prints no ready line, and its version only on its launch line
    "F-vllm-0.1.dev20051-headless-worker-node-rank1-excerpt.log":
        ("incomplete", "vllm", "0.1.dev20051+g487ecf187", "Glm5NextForConditionalGeneration",
         None),
    "F-vllm-unknown-ray-multinode-nccl-net-ib-fragment.log":
        ("incomplete", "vllm", None, None, None),
}


def test_every_public_log_has_an_expectation() -> None:
    assert sorted(p.name for p in DATA.glob("*.log")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_public_log(name: str) -> None:
    facts = parse_file(DATA / name)
    outcome, engine, version, arch, failure = EXPECTED[name]
    got = (facts.outcome, facts.engine, facts.engine_version, facts.architecture,
           facts.failure_class.value if facts.failure_class else None)
    assert got == (outcome, engine, version, arch, failure)
    assert facts.evidence.get("outcome") or outcome == "incomplete"


def test_a_stop_before_ready_is_proven_by_its_line() -> None:
    facts = parse_file(DATA / "C-vllm-0.10.0-sigterm-during-boot.log")
    (proof,) = facts.evidence["outcome"]
    assert proof.text == "KeyboardInterrupt: terminated"
    assert facts.failure_reason is None
