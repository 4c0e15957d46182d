"""``servefleet history``'s read, against records written by real rollouts: the fake node
runs servefleet's own remote scripts (audit append, prune, manifests) in a throw-away
folder, the gate reports the facts of real llama-server boot logs, and the baselines file is
written by the health checks' own recorder. Then the one history command is run there."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest
from fake_node import FakeGateRollout, FakeNodeTransport, fake_runtime

from servefleet.adapters.health_gate import HealthReport, headline_facts
from servefleet.adapters.history import parse_history, read_history, read_history_command
from servefleet.adapters.rollout import Abort, DeploymentResult, NodeResult, Target, render_for
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.baselines import BASELINE_FILE, BaselineBook, record
from servefleet.core.bootlog import BootFacts, BootLogParser
from servefleet.core.errors import RemoteError
from servefleet.core.models import Deployment
from servefleet.core.project import Project, load_project, profile_identity
from tests.reference_project import REPO_ROOT

LOGS = REPO_ROOT / "tests/core/bootlog/data/llamacpp-real-gpu"
NODE = "rtx5090"
PROFILE = "qwen36-q4-llamacpp"
SECRETS = {"HF_TOKEN": "hf_history_test_secret"}


def facts_of(name: str) -> BootFacts:
    parser = BootLogParser("llama.cpp")
    parser.feed((LOGS / name).read_bytes())
    return parser.facts()


class LoggedGateRollout(FakeGateRollout):
    """The fake gate, reporting the facts of a real boot log."""

    facts: BootFacts

    def gate(self, result: DeploymentResult, target: Target, since: str,
             deadline: float) -> HealthReport:
        report = super().gate(result, target, since, deadline)
        return dataclasses.replace(report, facts=headline_facts(self.facts))


def project_at(base: Path, port: int) -> Project:
    project = load_project(REPO_ROOT, "reference")
    node = project.nodes[NODE].model_copy(update={"base_dir": str(base),
                                                  "ports": [port, port + 1, port + 2]})
    stack = project.stack.model_copy(update={"deployments": [
        Deployment(node=NODE, name="main", profile=PROFILE, port=port)]})
    return dataclasses.replace(project, nodes={**project.nodes, NODE: node}, stack=stack)


def deploy(project: Project, transport: FakeNodeTransport, log: str,
           failing: bool = False) -> tuple[NodeResult, LoggedGateRollout]:
    abort = Abort()
    transport.abort = abort
    rollout = LoggedGateRollout(project, transport.node, fake_runtime(transport),
                                secrets=SECRETS, abort=abort)
    rollout.facts = facts_of(log)
    [rendered] = render_for(project, [NODE], SECRETS)
    if failing:
        rollout.failing = frozenset({rendered.release_id})
    return rollout.deploy([rendered], {"main": project.stack.deployments[0]}), rollout


@pytest.fixture
def root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="servefleet-history-") as folder:
        yield Path(folder)


def test_history_of_three_real_rollouts(root: Path) -> None:
    a = project_at(root / "srv", 18200)
    transport = FakeNodeTransport(a.nodes[NODE], root / "node", SECRETS)
    first, _ = deploy(a, transport, "gpu-lv4.log")
    assert first.status == "deployed", first.to_json()
    b = project_at(root / "srv", 18201)
    second, _ = deploy(b, transport, "gpu-lv4-fa-q8.log")
    assert second.status == "deployed", second.to_json()
    c = project_at(root / "srv", 18202)
    third, _ = deploy(c, transport, "gpu-lv4.log", failing=True)
    assert third.status == "rolled_back", third.to_json()

    history = read_history(cast(SshTransport, transport), "main")
    rows = history.rows
    assert [r.release_id for r in rows] == [first.deployments[0].release_id,
                                            second.deployments[0].release_id,
                                            third.deployments[0].release_id]
    assert [r.verdict_text for r in rows] == ["passed", "passed",
                                              "rolled back (engine_unhealthy)"]
    assert [r.profile for r in rows] == [PROFILE] * 3
    # The pools the real llama-server logs printed: 0.25 MiB, then 0.13 MiB with q8 KV.
    assert [(r.kv_pool, r.kv_unit) for r in rows[:2]] == [(0.25, "MiB"), (0.13, "MiB")]
    assert all(r.boot_seconds is not None and r.boot_seconds >= 0 for r in rows)
    assert all(r.on_node for r in rows)
    assert transport.labels[-1] == "read the history"


def test_older_audit_lines_take_the_pool_from_the_baselines(root: Path) -> None:
    """A line written before the gate record (``previous -; healthy``, the rollout's own
    formatting) gets its profile from the manifest and its pool from the baseline."""
    a = project_at(root / "srv", 18210)
    transport = FakeNodeTransport(a.nodes[NODE], root / "node", SECRETS)
    first, rollout = deploy(a, transport, "gpu-lv4.log")
    release = first.deployments[0].release_id
    audit = root / "srv" / "main" / "audit.log"
    old = rollout.audit_line("deploy", "main", release, "ok", "previous -; healthy")
    audit.write_text(old + "\n")
    profile = a.profiles[PROFILE]
    book = record(BaselineBook(), profile, profile_identity(profile), facts_of("gpu-lv4.log"),
                  now=datetime(2026, 11, 20, 9, 0, tzinfo=UTC), release_id=release,
                  deployment="main")
    assert book is not None
    (root / "srv" / BASELINE_FILE).write_text(book.to_text())

    [row] = read_history(cast(SshTransport, transport), "main").rows
    assert (row.profile, row.kv_pool, row.kv_unit) == (PROFILE, 0.25, "MiB")
    assert (row.boot_seconds, row.cudagraph, row.verdict) == (None, None, "passed")


def test_a_deployment_never_deployed_has_no_history(root: Path) -> None:
    a = project_at(root / "srv", 18220)
    transport = FakeNodeTransport(a.nodes[NODE], root / "node", SECRETS)
    history = read_history(cast(SshTransport, transport), "nothing")
    assert history.rows == [] and history.book_problem is None


def test_the_command_is_one_read_only_shell() -> None:
    argv = read_history_command("/srv/servefleet", "main")
    assert argv[:2] == ["sh", "-c"]
    assert argv[4:6] == ["/srv/servefleet", "/srv/servefleet/main"]
    assert ">" not in argv[2].replace("2>/dev/null", "")


def test_cut_output_is_an_error() -> None:
    with pytest.raises(ValueError, match="incomplete"):
        parse_history("@@servefleet-history 1\n@@audit\n", "n", "main")
    assert issubclass(RemoteError, Exception)
