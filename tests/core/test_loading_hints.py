"""Load errors that teach: did-you-mean for fields, profiles, nodes and stacks; an error in
an inherited setting reported once, at the file that has it, with no follow-on errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servefleet.core.errors import ConfigError
from servefleet.core.project import load_project
from servefleet.core.suggest import closest, unknown_name
from tests.reference_project import copy_reference

KNOWN_PROFILES = ("qwen36-fp8, qwen36-fp8-mtp, qwen36-fp8-tp2, qwen36-nvfp4-tq, "
                  "qwen36-q4-llamacpp, qwen36-w8a16, qwen36-w8a16-1m")


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return copy_reference(tmp_path)


def _problems(root: Path, stack: str = "reference") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_project(root, stack)
    return caught.value.problems


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_typo_in_an_inherited_field_is_reported_once_at_its_file(root: Path) -> None:
    _edit(root / "profiles/qwen36-fp8.yaml", "gpu_memory_utilization:", "gpu_memory_utilisation:")
    # qwen36-fp8-mtp extends qwen36-fp8 and the stack uses both: still one line, no
    # "no profile 'qwen36-fp8'" after it.
    assert _problems(root) == [
        "profiles/qwen36-fp8.yaml: vllm.gpu_memory_utilisation: unknown field (did you mean "
        "'gpu_memory_utilization'?; `servefleet schema profile` lists the fields)"]


def test_an_error_in_the_child_stays_the_childs(root: Path) -> None:
    _edit(root / "profiles/qwen36-fp8-mtp.yaml", "num_speculative_tokens:",
          "num_speculativ_tokens:")
    assert _problems(root) == [
        "profiles/qwen36-fp8-mtp.yaml: vllm.speculative.num_speculative_tokens: required field "
        "is missing",
        "profiles/qwen36-fp8-mtp.yaml: vllm.speculative.num_speculativ_tokens: unknown field "
        "(did you mean 'num_speculative_tokens'?; `servefleet schema profile` lists the "
        "fields)"]


def test_unknown_node_field_names_the_closest(root: Path) -> None:
    _edit(root / "nodes/rtx5090.yaml", "address:", "adress:")
    assert ("nodes/rtx5090.yaml: adress: unknown field (did you mean 'address'?; "
            "`servefleet schema node` lists the fields)") in _problems(root)


def test_typo_in_a_stack_profile_name(root: Path) -> None:
    _edit(root / "Pulumi.reference.yaml", "rtx5090: qwen36-q4-llamacpp",
          "rtx5090: qwen36-q4-llamacp")
    assert _problems(root) == [
        "Pulumi.reference.yaml: servefleet:profiles.rtx5090: no profile 'qwen36-q4-llamacp' in "
        f"profiles/ (did you mean 'qwen36-q4-llamacpp'?; known: {KNOWN_PROFILES})"]


def test_typo_in_a_stack_node_name(root: Path) -> None:
    _edit(root / "Pulumi.reference.yaml", "rtx5090: qwen36", "rtx5900: qwen36")
    assert _problems(root) == [
        "Pulumi.reference.yaml: servefleet:profiles.rtx5900: no node 'rtx5900' in nodes/ "
        "(did you mean 'rtx5090'?; known: dgx-spark-1, dgx-spark-2, rtx5090)"]


def test_typo_in_extends(root: Path) -> None:
    _edit(root / "profiles/qwen36-fp8-mtp.yaml", "extends: qwen36-fp8", "extends: qwen36-fp")
    assert _problems(root) == [
        "profiles/qwen36-fp8-mtp.yaml: extends: no profile named 'qwen36-fp' in profiles/ "
        f"(did you mean 'qwen36-fp8'?; known: {KNOWN_PROFILES})"]


def test_typo_in_the_stack_name(root: Path) -> None:
    assert _problems(root, "referense") == [
        f"Pulumi.referense.yaml: no such stack file in {root} (did you mean 'reference'?; "
        "stacks here: reference); pick one with --stack reference (or export "
        "SERVEFLEET_STACK=reference)"]


def test_missing_stack_file_names_the_stacks_there_and_how_to_pick(root: Path) -> None:
    shutil.copy(root / "Pulumi.reference.yaml", root / "Pulumi.home.yaml")
    assert _problems(root, "sim") == [
        f"Pulumi.sim.yaml: no such stack file in {root} (stacks here: home, reference); "
        "pick one with --stack NAME (or export SERVEFLEET_STACK=NAME)"]
    for stack in root.glob("Pulumi.*.yaml"):
        stack.unlink()
    assert _problems(root, "sim") == [
        f"Pulumi.sim.yaml: no such stack file, and no stack files at all in {root}: run "
        "servefleet inside your config repo (the folder with Pulumi.yaml and "
        "Pulumi.<stack>.yaml), or pass --project DIR"]


def test_typo_in_an_enum_value_suggests_the_closest(root: Path) -> None:
    _edit(root / "profiles/qwen36-fp8.yaml", "kv_cache_dtype: fp8_e4m3", "kv_cache_dtype: fp8_e4m4")
    problems = _problems(root)
    assert problems[0] == (
        "profiles/qwen36-fp8.yaml: vllm.kv_cache_dtype: unknown value 'fp8_e4m4' (did you "
        "mean 'fp8_e4m3'?; allowed: 'auto', 'float16', 'bfloat16', 'fp8', 'fp8_e4m3', "
        "'fp8_e5m2', 'fp8_inc', 'fp8_ds_mla', 'nvfp4_ds_mla', 'turboquant_k8v4', "
        "'turboquant_4bit_nc', 'turboquant_k3v4_nc', 'turboquant_3bit_nc', 'octave_k3v4', "
        "'octave_k3v3', 'octave_k3v3_compact', 'ultraquant_4bit', 'int4_per_token_head', "
        "'int8_per_token_head', 'fp8_per_token_head', 'nvfp4' or 'nvfp4_4over6')")


def test_enum_value_in_the_wrong_case_and_in_the_stack(root: Path) -> None:
    _edit(root / "Pulumi.reference.yaml", "strategy: rolling", "strategy: Rolling")
    assert _problems(root) == [
        "Pulumi.reference.yaml: servefleet:strategy: unknown value 'Rolling' (did you mean "
        "'rolling'?; allowed: 'parallel' or 'rolling')"]


def test_enum_value_far_from_every_allowed_one_keeps_pydantic_s_message(root: Path) -> None:
    _edit(root / "Pulumi.reference.yaml", "strategy: rolling", "strategy: yolo")
    assert _problems(root) == [
        "Pulumi.reference.yaml: servefleet:strategy: Input should be 'parallel' or 'rolling' "
        "(got 'yolo')"]


def test_typo_in_a_stack_setting(root: Path) -> None:
    _edit(root / "Pulumi.reference.yaml", "servefleet:strategy:", "servefleet:stratgy:")
    problems = _problems(root)
    assert len(problems) == 1
    assert problems[0].startswith("Pulumi.reference.yaml: servefleet:stratgy: unknown setting "
                                  "(did you mean 'servefleet:strategy'?; known: ")


def test_no_suggestion_when_nothing_is_close() -> None:
    assert closest("zzz", ["qwen36-fp8"]) is None
    assert unknown_name("profile", "zzz", ["b", "a"], "profiles/") == \
        "no profile 'zzz' in profiles/ (known: a, b)"
