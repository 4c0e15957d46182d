"""servefleet tune: a profile overlay reaching a KV or concurrency target on a node."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from servefleet.cli.main import build_cli

ROOT = Path(__file__).resolve().parents[2]


def _tune(*args: str):
    # The reference stack by name: the default one can be the simulated fleet's, whose
    # nodes exist only while `sim up` has run.
    return CliRunner().invoke(build_cli(), ["--project", str(ROOT), "--stack", "reference",
                                            "tune", *args])


def test_tune_prints_an_overlay_reaching_the_target():
    result = _tune("qwen36-fp8", "--node", "dgx-spark-1", "--target-kv-tokens", "600000")
    assert result.exit_code == 0, result.output
    body = yaml.safe_load("\n".join(line for line in result.output.splitlines()
                                    if not line.startswith("#")))
    assert body["extends"] == "qwen36-fp8"
    util = body["vllm"]["gpu_memory_utilization"]
    assert 0.05 <= util < 0.45
    assert "modelled cold (no measured run" in result.output and "unified memory" in result.output


def test_tune_refuses_unreachable_targets_and_profiles_without_a_config():
    far = _tune("qwen36-fp8", "--node", "rtx5090", "--target-kv-tokens", "100000000")
    assert far.exit_code == 1 and "no gpu_memory_utilization below 1.0" in far.output
    bare = _tune("qwen36-w8a16", "--node", "dgx-spark-1", "--target-concurrency", "2")
    assert bare.exit_code == 1 and "model.config is not set" in bare.output


def test_tune_answers_the_seeds_utilization_for_the_gb10_mtp_run():
    # Seed 001: util 0.45 on a GB10 printed "Maximum concurrency for 131,072 tokens per
    # request: 8.24x" with MTP 2; cold (no baseline on the node) the planner must land there.
    result = CliRunner().invoke(build_cli(), [
        "--project", str(ROOT), "--stack", "reference", "tune", "qwen36-fp8-mtp",
        "--node", "dgx-spark-1", "--target-concurrency", "8.24"])
    assert result.exit_code == 0, result.output
    body = yaml.safe_load("\n".join(line for line in result.output.splitlines()
                                    if not line.startswith("#")))
    assert body["vllm"]["gpu_memory_utilization"] == pytest.approx(0.45, abs=0.01)
    assert "121.69 GiB as CUDA reports it" in result.output
    assert "'GPU KV cache size' in vLLM 0.21.0's meaning: int(max_concurrency × max_model_len)" \
        in result.output


def test_target_kv_tokens_warns_when_older_versions_count_the_pool_differently():
    result = CliRunner().invoke(build_cli(), [
        "--project", str(ROOT), "tune", "qwen36-fp8-mtp", "--node", "dgx-spark-1",
        "--target-kv-tokens", "323456"])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(
        "warning: --target-kv-tokens 323,456 is read as vLLM 0.21.0 prints 'GPU KV cache "
        "size' (int(max_concurrency × max_model_len)); vLLM before 0.21 prints the same pool "
        "as ")
    assert "(num_blocks // groups × block_size). If your figure came from such a log, " \
        "convert it first." in result.stderr


def test_tune_refuses_a_utilization_the_node_cannot_free_at_boot():
    result = _tune("qwen36-fp8", "--node", "dgx-spark-1", "--target-kv-tokens", "7000000")
    assert result.exit_code == 1
    assert "frees at most 102.2 GiB at boot, so the largest utilization that boots is 0.83" \
        in result.output


def test_tune_says_what_the_reserve_base_was_fitted_on():
    result = _tune("qwen36-fp8", "--node", "dgx-spark-1", "--target-kv-tokens", "600000")
    assert result.exit_code == 0, result.output
    assert ("3.65 GiB base (unified memory; fitted on 3 Qwen3.6-35B-A3B GB10 boots (seed 001 "
            "MTP on/off, the 0.25.1 fixture), an assumption for other models and cards; real "
            "GB10 boots have reserved 3.0 to 5.8 GiB in all") in " ".join(result.output.split())


def test_measure_refuses_bad_input_before_it_reads_any_node():
    """``--measure``'s arguments are checked before a node is asked anything: the SLO's
    form, a knob the profile does not have, a profile the stack does not place there, and
    the planned mode's targets."""
    both = _tune("qwen36-fp8", "--node", "dgx-spark-1", "--measure", "--target-kv-tokens", "1")
    assert both.exit_code == 2 and "leave out --target-*" in both.output
    slo = _tune("qwen36-fp8", "--node", "dgx-spark-1", "--measure", "--slo", "ttft<2s")
    assert slo.exit_code == 2 and "METRIC_STAT<=LIMIT" in slo.output, slo.output
    knob = _tune("qwen36-fp8", "--node", "dgx-spark-1", "--measure", "--knobs",
               "num_speculative_tokens")
    assert knob.exit_code == 2 and "not a knob of this profile" in knob.output, knob.output
    values = _tune("qwen36-fp8", "--node", "dgx-spark-1", "--measure", "--values", "max_num_seqs")
    assert values.exit_code == 2 and "KNOB=V1,V2" in values.output, values.output
    elsewhere = CliRunner().invoke(build_cli(), [
        "--project", str(ROOT), "--stack", "reference", "tune", "qwen36-fp8", "--node",
        "rtx5090", "--measure"])
    assert elsewhere.exit_code == 1, elsewhere.output
    assert "places qwen36-fp8 on rtx5090 0 time(s)" in elsewhere.output, elsewhere.output
