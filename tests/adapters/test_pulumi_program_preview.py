"""The engine-terms line the Pulumi program logs under each changed node in a preview: the
same line ``servefleet plan`` prints, from the same observation (here a planner that
returns what a node would have answered; the program never connects in these tests)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi.runtime
import pytest

from servefleet.adapters import pulumi_program
from servefleet.adapters.rollout import NodeResult
from servefleet.core.errors import UnreachableNode
from servefleet.core.kvplan.preview import plan_item_preview
from servefleet.core.plan import PlanItem
from servefleet.core.project import Project, load_project
from tests.reference_project import REPO_ROOT

MTP_ON = ("main: MTP on: KV pool ≈ 1.08M tokens (−20%; blocks −14%), CUDA graphs "
          "FULL_AND_PIECEWISE → PIECEWISE (FlashInfer off SM100), concurrency at 131,072 ≈ "
          "8.2× (modelled cold)")


class EchoMocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


def mtp_switch(project: Project) -> list[PlanItem]:
    return [PlanItem(node="dgx-spark-1", deployment="main", action="update", release_id="n",
                     current_release="o", profile="qwen36-fp8-mtp",
                     previous_profile="qwen36-fp8"),
            PlanItem(node="dgx-spark-1", deployment="nomtp", action="unchanged",
                     release_id="n2", current_release="n2", profile="qwen36-fp8",
                     previous_profile="qwen36-fp8")]


def test_messages_are_the_plans_lines_per_deployment() -> None:
    project = load_project(REPO_ROOT, "reference")
    items = mtp_switch(project)
    unreachable = NodeResult("rtx5090", error=UnreachableNode("rtx5090", "connection refused"))
    messages = pulumi_program.engine_preview_messages(project, items, [unreachable])
    assert messages[0] == ("dgx-spark-1", MTP_ON)
    assert messages[0][1] == f"main: {plan_item_preview(project, items[0])}"
    assert len(messages) == 2  # the unchanged deployment says nothing
    assert messages[1][0] == "rtx5090"
    assert messages[1][1].startswith("engine preview: node not read (")


@pytest.mark.parametrize("preview,switch,reads", [(True, None, True), (False, None, False),
                                                  (True, False, False)])
def test_a_preview_logs_the_line_under_the_node(monkeypatch: pytest.MonkeyPatch,
                                                preview: bool, switch: bool | None,
                                                reads: bool) -> None:
    logged: list[tuple[str, Any]] = []
    monkeypatch.setattr(pulumi.log, "info", lambda msg, resource=None, **_: logged.append(
        (msg, resource)))
    calls: list[Sequence[str] | None] = []

    def planner(project: Project, nodes: Sequence[str] | None,
                secrets: Mapping[str, str]) -> tuple[list[PlanItem], list[NodeResult]]:
        calls.append(nodes)
        return mtp_switch(project), []

    pulumi.runtime.set_mocks(EchoMocks(), project="servefleet", stack="reference",
                             preview=preview)
    config = {"servefleet:hfToken": "hf_preview-test-1"}
    if switch is not None:
        config["servefleet:enginePreview"] = "false"
    pulumi.runtime.set_all_config(config, secret_keys=["servefleet:hfToken"])
    try:
        resources = pulumi_program.declare_fleet(REPO_ROOT, "reference",
                                                 pulumi.Config("servefleet"), planner)
    finally:
        pulumi.runtime.set_all_config({})
    if not reads:
        assert calls == [] and logged == []
        return
    assert calls == [["dgx-spark-1", "dgx-spark-2", "rtx5090"]]
    assert logged == [(MTP_ON, resources["dgx-spark-1"])]
