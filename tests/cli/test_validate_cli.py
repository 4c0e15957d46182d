"""``servefleet validate`` through click, on real project folders."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

Run = Callable[..., Result]
"""The real ``servefleet`` bound to this module's project copy and stack."""



def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}



def break_profile(root: Path) -> None:
    """qwen36-fp8: quantization turboquant (error) in a profile the stack uses."""
    path = root / "profiles" / "qwen36-fp8.yaml"
    path.write_text(path.read_text().replace("  kv_cache_dtype: fp8_e4m3\n",
                                             "  kv_cache_dtype: fp8_e4m3\n"
                                             "  quantization: turboquant\n"))


def test_shipped_project_is_green(run: Run, project: Path):
    result = run("validate")
    assert result.exit_code == 0, result.output
    assert "stack reference: 0 error(s)" in result.output
    assert "nodes/dgx-spark-1.yaml" in result.output  # warnings are shown, grouped by file
    assert "ssh.host_keys" in result.output


def test_errors_exit_1_and_are_grouped(run: Run, project: Path):
    break_profile(project)
    before = tree(project)
    result = run("validate")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    header = lines.index("profiles/qwen36-fp8.yaml")
    assert any(line.strip().startswith("error   vllm.quantization: turboquant is not")
               for line in lines[header:])
    assert "vLLM #41560" in result.output and "[quantization-turboquant]" in result.output
    # qwen36-fp8-mtp and qwen36-fp8-tp2 inherit the mistake through extends.
    assert "stack reference: 3 error(s)" in result.output
    assert "profiles/qwen36-fp8-mtp.yaml" in lines
    assert "profiles/qwen36-fp8-tp2.yaml" in lines
    assert tree(project) == before


def test_json(run: Run, project: Path):
    break_profile(project)
    result = run("validate", "--json")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["ok"] is False and data["counts"]["error"] == 3
    errors = [f for f in data["findings"] if f["severity"] == "error"]
    assert {e["rule"] for e in errors} == {"quantization-turboquant"}
    assert {e["file"] for e in errors} == {"profiles/qwen36-fp8.yaml",
                                           "profiles/qwen36-fp8-mtp.yaml",
                                           "profiles/qwen36-fp8-tp2.yaml"}
    assert errors[0]["field"] == "vllm.quantization" and errors[0]["value"] == "turboquant"
    assert {"message", "why", "fix"} <= set(errors[0])


def test_json_green(run: Run, project: Path):
    result = run("validate", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["ok"] is True and data["counts"]["warning"] >= 3


def test_load_errors_one_line_each_and_nothing_written(run: Run, project: Path):
    (project / "profiles" / "evil.yaml").write_text(
        "extends: qwen36-fp8\nmodel:\n  served_name: '$(reboot)'\nvllm:\n  bogus: 1\n")
    before = tree(project)
    result = run("validate")
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert any("profiles/evil.yaml: model.served_name: '$(reboot)'" in e for e in errors)
    assert any("profiles/evil.yaml: vllm.bogus: unknown field" in e for e in errors)
    assert "Traceback" not in result.output
    assert tree(project) == before
    as_json = json.loads(run("validate", "--json").output)
    assert as_json["ok"] is False and len(as_json["load_errors"]) == 2


def test_a_gateway_route_the_stack_does_not_serve_is_an_error(run: Run, project: Path):
    stack = project / "Pulumi.reference.yaml"
    stack.write_text(stack.read_text() + (
        "  servefleet:gateway:\n    node: rtx5090\n    routes:\n"
        "      - {model: qwen36, to: [rtx5090]}\n"))
    result = run("validate")
    assert result.exit_code != 0
    assert "servefleet:gateway.routes[0].to: 'rtx5090' serves no 'qwen36'" in result.output
    data = json.loads(run("validate", "--json").output)
    assert data["ok"] is False and "serves no 'qwen36'" in data["load_errors"][0]


def test_a_wrong_config_pin_is_refused_by_validate_not_only_by_plan(run: Run, project: Path):
    path = project / "profiles" / "qwen36-fp8.yaml"
    real = "3ac357d5a0e00f3c87e4b008c4ac1d38d062f7c286558a9d7eba4cb1618b90db"
    path.write_text(path.read_text().replace(real, "ab" * 32))
    data = json.loads(run("validate", "--json").output)
    assert data["ok"] is False
    pins = [f for f in data["findings"] if f["rule"] == "model-config-pin"]
    # qwen36-fp8 and the two profiles that extend it
    assert {f["file"] for f in pins} == {"profiles/qwen36-fp8.yaml",
                                         "profiles/qwen36-fp8-mtp.yaml",
                                         "profiles/qwen36-fp8-tp2.yaml"}
    assert all(f["field"] == "model.config.sha256" and real in f["message"]
               and f"set model.config.sha256: {real}" in f["fix"] for f in pins)


def test_extends_with_another_model_is_refused_until_it_restates_the_facts(run: Run,
                                                                           project: Path):
    (project / "profiles" / "llama8b.yaml").write_text(
        "extends: qwen36-fp8\nmodel:\n  id: meta-llama/Llama-3.1-8B-Instruct\n"
        "  served_name: llama\n")
    result = run("validate")
    assert result.exit_code == 1, result.output
    assert ("model.id: meta-llama/Llama-3.1-8B-Instruct replaces qwen36-fp8's "
            "Qwen/Qwen3.6-35B-A3B-FP8 but inherits its model facts model.architecture, "
            "model.hybrid_gdn, model.native_context, model.weights_gib, model.quant_format, "
            "model.config, vllm.reasoning_parser, vllm.tool_call_parser") in result.output
    assert "[extends-keeps-model-facts]" in result.output
    (project / "profiles" / "llama8b.yaml").write_text(
        "extends: qwen36-fp8\nmodel:\n  id: meta-llama/Llama-3.1-8B-Instruct\n"
        "  served_name: llama\n  architecture: LlamaForCausalLM\n  hybrid_gdn: false\n"
        "  native_context: 131072\n  weights_gib: 14.99\n  config: null\n"
        "  quant_format: bf16\nvllm:\n  reasoning_parser: null\n"
        "  tool_call_parser: llama3_json\n")
    result = run("validate")
    assert result.exit_code == 0, result.output
