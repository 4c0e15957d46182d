"""Health expectations derived from the shipped profiles on the shipped nodes."""

from __future__ import annotations

from typing import Any

import pytest

from servefleet.core.expectations import derive_expectations
from servefleet.core.models import Node, Profile
from servefleet.core.project import Project, load_project, profile_identity
from tests.reference_project import REPO_ROOT


@pytest.fixture(scope="module")
def shipped() -> Project:
    return load_project(REPO_ROOT, "reference")


def vary(profile: Profile, **vllm: Any) -> Profile:
    """The profile with some vLLM settings changed (validated again)."""
    assert profile.vllm is not None
    data = profile.model_dump()
    data["vllm"].update(vllm)
    return Profile.model_validate(data)


def with_cc(node: Node, cc: str) -> Node:
    """The node with another compute capability."""
    data = node.model_dump()
    data["gpus"][0]["compute_capability"] = cc
    return Node.model_validate(data)


def test_mtp_on_gb10_falls_back_to_piecewise(shipped: Project):
    spark = shipped.nodes["dgx-spark-1"]
    plain = derive_expectations(shipped.profiles["qwen36-fp8"], spark)
    mtp = derive_expectations(shipped.profiles["qwen36-fp8-mtp"], spark)
    assert plain.cudagraph_mode == "FULL_AND_PIECEWISE" and plain.kv_smaller_than is None
    assert mtp.cudagraph_mode == "PIECEWISE" and not mtp.cudagraph_mode_explicit
    assert mtp.attention_backend == "FLASHINFER" and mtp.spec_decode
    assert any("speculative decoding (qwen3_next_mtp) on FlashInfer off SM100" in n
               and "resolve_cudagraph_mode_and_sizes" in n for n in mtp.notes)
    # The pool is expected below that of the same profile without MTP: qwen36-fp8 itself.
    assert mtp.kv_smaller_than == profile_identity(shipped.profiles["qwen36-fp8"])
    assert mtp.min_kv_cache_tokens == 300000 and not mtp.deterministic


def test_sm100_keeps_full_graphs(shipped: Project):
    b200 = with_cc(shipped.nodes["dgx-spark-1"], "10.0")
    assert derive_expectations(shipped.profiles["qwen36-fp8-mtp"], b200).cudagraph_mode == (
        "FULL_AND_PIECEWISE")


@pytest.mark.parametrize(("version", "mode"), [
    ("0.9.2", None), ("0.10.2", "PIECEWISE"), ("0.11.0", "FULL_AND_PIECEWISE"),
    ("0.33.0", "FULL_AND_PIECEWISE"),
])
def test_version_default_modes(shipped: Project, version: str, mode: str | None):
    profile = shipped.profiles["qwen36-fp8"].model_copy(update={"engine_version": version})
    assert derive_expectations(profile, shipped.nodes["dgx-spark-1"]).cudagraph_mode == mode


def test_forced_modes(shipped: Project):
    spark = shipped.nodes["dgx-spark-1"]
    base = shipped.profiles["qwen36-fp8-mtp"]
    eager = derive_expectations(vary(base, enforce_eager=True), spark)
    assert eager.cudagraph_mode == "NONE" and any("enforce_eager" in n for n in eager.notes)
    o1 = derive_expectations(vary(shipped.profiles["qwen36-fp8"],
                                  extra_args=["--optimization-level=1"]), spark)
    assert o1.cudagraph_mode == "PIECEWISE"
    cc = derive_expectations(vary(shipped.profiles["qwen36-fp8"], extra_args=[
        "--compilation-config.cudagraph_mode=FULL_DECODE_ONLY"]), spark)
    assert cc.cudagraph_mode == "FULL_DECODE_ONLY"
    explicit = base.model_copy(update={"health": base.health.model_copy(
        update={"cudagraph_mode": "FULL_AND_PIECEWISE"})})
    result = derive_expectations(explicit, spark)
    assert result.cudagraph_mode == "FULL_AND_PIECEWISE" and result.cudagraph_mode_explicit
    assert any("overrides the derived PIECEWISE" in n for n in result.notes)


def test_flash_attention_does_not_downgrade(shipped: Project):
    profile = vary(shipped.profiles["qwen36-fp8-mtp"], attention_backend="FLASH_ATTN")
    expected = derive_expectations(profile, shipped.nodes["dgx-spark-1"])
    assert expected.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert expected.kv_smaller_than is not None  # the draft still costs KV memory


def test_llamacpp_determinism(shipped: Project):
    rtx = shipped.nodes["rtx5090"]
    llama = shipped.profiles["qwen36-q4-llamacpp"]
    expected = derive_expectations(llama, rtx)
    assert expected.deterministic and expected.cudagraph_mode is None
    assert expected.attention_backend is None and not expected.spec_decode
    data = llama.model_dump()
    data["llamacpp"]["parallel"] = 4
    busy = derive_expectations(Profile.model_validate(data), rtx)
    assert not busy.deterministic and any("parallel 1" in n for n in busy.notes)


def simulated(node: Node, **engines: Any) -> Node:
    """The node as a simulated node whose ``engines`` run as CPU builds."""
    data = node.model_dump()
    data.update(simulated=True, sim={"control_dir": "/var/lib/sim/control",
                                     "engines": engines})
    return Node.model_validate(data)


CPU_VLLM = {"version": "0.32.0", "unshown": ["cudagraph_mode", "attention_backend",
                                             "kv_cache_dtype", "kv_smaller_than"],
            "why": "the real vllm 0.32.0 (CPU build) serves a tiny twin"}


def test_sim_cpu_engine_expects_its_own_version_and_no_gpu_facts(shipped: Project):
    spark = simulated(shipped.nodes["dgx-spark-1"], vllm=CPU_VLLM)
    mtp = derive_expectations(shipped.profiles["qwen36-fp8-mtp"], spark)
    assert mtp.engine_version == "0.32.0"
    assert mtp.cudagraph_mode is None and mtp.attention_backend is None
    assert mtp.kv_smaller_than is None
    # Everything else a real node expects is still expected.
    assert mtp.spec_decode and mtp.min_kv_cache_tokens == 300000 and not mtp.deterministic
    assert "simulated node: the real vllm 0.32.0 (CPU build) serves a tiny twin" in mtp.notes
    assert "simulated node: cudagraph_mode not checked (a CPU build does not show it)" in (
        mtp.notes)


def test_sim_node_without_that_engine_and_overlay_builds_keep_the_profile(shipped: Project):
    spark = simulated(shipped.nodes["dgx-spark-1"], vllm=CPU_VLLM)
    llama = derive_expectations(shipped.profiles["qwen36-q4-llamacpp"], spark)
    assert llama.engine_version == shipped.profiles["qwen36-q4-llamacpp"].engine_version
    patched = shipped.profiles["qwen36-nvfp4-tq"]
    assert patched.builds_image
    assert derive_expectations(patched, spark).engine_version == patched.engine_version


def test_real_node_expects_the_pinned_version(shipped: Project):
    profile = shipped.profiles["qwen36-fp8"]
    assert derive_expectations(profile, shipped.nodes["dgx-spark-1"]).engine_version == (
        profile.engine_version)
