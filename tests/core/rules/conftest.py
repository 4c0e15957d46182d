"""A small kit for rule tests: profiles, nodes and projects built in memory.

Profiles start from a Qwen3.6-35B-A3B-FP8-like vLLM profile that no rule objects to; a test
changes only the fields its rule looks at. Rules run through :func:`validate`, so the
registry and the scopes are exercised too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servefleet.core.models import Deployment, Node, Profile, StackConfig
from servefleet.core.project import Project
from servefleet.core.project import _deep_merge as merge  # overrides merge as ``extends`` does
from servefleet.core.rules import Finding, Severity, rule_by_id, validate

DIGEST = "sha256:" + "ab" * 32
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGt0ZXN0a2V5dGVzdGtleXRlc3RrZXl0ZXN0a2V5"
STACK_FILE = "Pulumi.test.yaml"

BASE_VLLM: dict[str, Any] = {
    "engine": "vllm",
    "engine_version": "0.21.0",
    "image": {"ref": "vllm/vllm-openai:v0.21.0", "digest": DIGEST},
    "model": {
        "id": "Qwen/Qwen3.6-35B-A3B-FP8", "served_name": "qwen36", "hybrid_gdn": True,
        "native_context": 262144, "weights_gib": 34.9, "quant_format": "fp8",
        "kv_bytes_per_token": 20480,
    },
    "vllm": {
        "gpu_memory_utilization": 0.45, "max_model_len": 131072, "max_num_seqs": 32,
        "max_num_batched_tokens": 16384, "kv_cache_dtype": "fp8_e4m3",
        "enable_chunked_prefill": True,
    },
}

BASE_LLAMACPP: dict[str, Any] = {
    "engine": "llama.cpp",
    "engine_version": "b8680",
    "image": {"ref": "ghcr.io/ggml-org/llama.cpp:server-cuda", "digest": DIGEST},
    "model": {"id": "unsloth/Qwen3.6-35B-A3B-GGUF", "served_name": "qwen36-q4",
              "hybrid_gdn": True, "native_context": 262144, "weights_gib": 20.6,
              "quant_format": "gguf"},
    "llamacpp": {"gguf": "/models/Qwen3.6-35B-A3B-Q4_K_M.gguf", "ctx_size": 65536,
                 "parallel": 1, "cache_prompt": False},
}

# The kit's arithmetic is in the round figures it states (CUDA's own figure set to the
# box's): the known-GPU table that fills a missing one is tested on its own
# (tests/cli/test_known_gpu_memory.py, and the gpu-memory-from-table rule here).
NODE_KINDS: dict[str, dict[str, Any]] = {
    "gb10": {"arch": "aarch64", "host_memory_gib": 128, "gpus": [
        {"name": "NVIDIA GB10", "memory_gib": 128, "cuda_memory_gib": 128,
         "unified_memory": True, "compute_capability": "12.1"}]},
    "rtx5090": {"arch": "x86_64", "gpus": [
        {"name": "NVIDIA GeForce RTX 5090", "memory_gib": 32, "cuda_memory_gib": 32,
         "compute_capability": "12.0"}]},
    "a100": {"arch": "x86_64", "gpus": [
        {"name": "NVIDIA A100-SXM4-80GB", "memory_gib": 80, "compute_capability": "8.0"}]},
    "h100": {"arch": "x86_64", "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "memory_gib": 80, "compute_capability": "9.0"}]},
    "b200": {"arch": "x86_64", "gpus": [
        {"name": "NVIDIA B200", "memory_gib": 180, "compute_capability": "10.0"}]},
}


class Kit:
    """Builders and assertions shared by the rule tests."""

    def profile(self, name: str = "p", **overrides: Any) -> Profile:
        """A vLLM profile: the base with ``overrides`` merged in."""
        return Profile.model_validate(merge({**BASE_VLLM, "name": name}, overrides))

    def llamacpp(self, name: str = "q", **overrides: Any) -> Profile:
        """A llama.cpp profile."""
        return Profile.model_validate(merge({**BASE_LLAMACPP, "name": name}, overrides))

    def node(self, kind: str = "gb10", name: str | None = None, **overrides: Any) -> Node:
        """A node of a known kind (gb10, rtx5090, a100, h100, b200) with a pinned host key."""
        data = {"name": name or kind, "address": f"{name or kind}.lan",
                "ssh": {"agent": True, "host_keys": [HOST_KEY]}, "ports": [8000, 8001],
                **NODE_KINDS[kind]}
        return Node.model_validate(merge(data, overrides))

    def project(self, profiles: list[Profile], nodes: list[Node],
                deployments: list[dict[str, Any]]) -> Project:
        """A project held in memory; deployments are ``{node, profile, name?, port?}``."""
        return Project(
            root=Path("/nonexistent"),
            nodes={n.name: n for n in nodes},
            node_files={n.name: f"nodes/{n.name}.yaml" for n in nodes},
            profiles={p.name: p for p in profiles},
            profile_files={p.name: f"profiles/{p.name}.yaml" for p in profiles},
            stack=StackConfig(stack="test",
                              deployments=[Deployment.model_validate(d) for d in deployments]),
            stack_file=STACK_FILE,
        )

    def alone(self, profile: Profile) -> Project:
        """The profile in a project that places it nowhere (profile-scope rules only)."""
        return self.project([profile], [], [])

    def place(self, profile: Profile, node: Node, port: int | None = None) -> Project:
        """The profile as the one deployment on ``node``."""
        return self.project([profile], [node],
                            [{"node": node.name, "profile": profile.name, "port": port}])

    def run(self, rule_id: str, project: Project) -> list[Finding]:
        """Findings of one rule after a full :func:`validate`."""
        rule_by_id(rule_id)  # a typo in a test must not pass silently
        return [f for f in validate(project, render=False) if f.rule == rule_id]

    def only(self, rule_id: str, project: Project) -> Finding:
        """The single finding of ``rule_id``."""
        found = self.run(rule_id, project)
        assert len(found) == 1, [str(f) for f in found]
        return found[0]

    def assert_message(self, finding: Finding, *, file: str, field: str, value: str,
                       why: str, fix: str) -> None:
        """The one-line message names the file, the field, the value, why and the fix."""
        text = str(finding)
        assert "\n" not in text
        assert finding.severity is rule_by_id(finding.rule).severity
        assert finding.file == file and finding.field == field, text
        assert text == f"{file}: {field}: {finding.message} ({finding.why}); fix: {finding.fix}"
        assert value in finding.message, text
        assert why in finding.why, text
        assert fix in finding.fix, text

    def severities(self, project: Project) -> set[Severity]:
        """Severities of every finding of a project."""
        return {f.severity for f in validate(project, render=False)}


@pytest.fixture()
def kit() -> Kit:
    """The rule-test kit."""
    return Kit()
