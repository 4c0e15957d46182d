"""The stack entry of an imported engine, added as text: comments kept, the node's other
deployments never replaced."""

from __future__ import annotations

import pytest

from servefleet.core.adopt import add_deployment
from servefleet.core.adopt.stack_entry import deployment_line
from servefleet.core.errors import ConfigError
from servefleet.core.yamlfile import parse_yaml

STACK = """\
# yaml-language-server: $schema=schemas/stack.schema.json
# My fleet. Keep this comment.
config:
  # rolling: one at a time
  servefleet:strategy: rolling
  servefleet:profiles:
    rtx5090: qwen36-q4-llamacpp  # the desk box
encryptionsalt: v1:abc
"""


def test_entry_added_with_comments_kept() -> None:
    line = deployment_line("main", "gpu-box-main", 8000, "vllm-qwen")
    new = add_deployment(STACK, "Pulumi.home.yaml", "gpu-box", [line], "Imported")
    for kept in ("# My fleet. Keep this comment.", "# rolling: one at a time",
                 "# the desk box", "encryptionsalt: v1:abc"):
        assert kept in new
    config = parse_yaml(new, "x")["config"]
    assert config["servefleet:profiles.gpu-box"] == {
        "main": {"profile": "gpu-box-main", "port": 8000, "adopt": "vllm-qwen"}}
    assert config["servefleet:profiles"] == {"rtx5090": "qwen36-q4-llamacpp"}


def test_node_already_placed_is_refused() -> None:
    line = deployment_line("main", "x", 8000, "c")
    with pytest.raises(ConfigError, match="already has an entry"):
        add_deployment(STACK, "Pulumi.home.yaml", "rtx5090", [line], "Imported")


def test_flow_config_is_refused() -> None:
    with pytest.raises(ConfigError, match="add the entry by hand"):
        add_deployment("config: {servefleet:strategy: rolling}\n", "P.yaml", "n",
                       [deployment_line("main", "x", 1, "c")], "c")
