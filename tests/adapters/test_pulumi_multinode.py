"""``pulumi up`` of an engine spanning two nodes, without the fleet.

The program runs under Pulumi's mocks (what it declares, the ordering against the node
resources, secrets). The provider's methods are called directly, with properties shaped as
Pulumi hands them over, against two fake nodes (servefleet's real remote scripts over
throw-away folders, a stand-in ``docker``; see ``fake_node.py``): the rollout is the real
:class:`~servefleet.adapters.multinode.MultiNodeRollout` with only the head's gate and the
worker's join line replaced, as in ``test_multinode_rollout.py``.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pulumi
import pulumi.runtime
import pytest
import yaml
from fake_node import FakeGateRollout, FakeNodeTransport
from loopback_sshd import free_port
from pulumi_helpers import as_pulumi_sends, ensure_event_loop, mocked_runtime
from test_multinode_rollout import FakeWorkers, ShowsBig
from test_pulumi_program import RecordingMocks, plaintext_paths

from servefleet.adapters import compose_commands, multinode, pulumi_program, remote
from servefleet.adapters.health_gate import HealthReport
from servefleet.adapters.pulumi_multinode import (
    HEALTHY,
    MULTINODE_PROVIDER_VERSION,
    MULTINODE_RESOURCE_TYPE,
    MultiNodeDeploymentProvider,
    describe_changes,
    multinode_args,
)
from servefleet.adapters.rollout import DeploymentResult, Target
from servefleet.adapters.runtime.ssh.compose import ComposeSshRuntime
from servefleet.adapters.runtime.ssh.transport import SshTransport
from servefleet.core.errors import HealthGateFailed, ServefleetError
from servefleet.core.models import Node
from servefleet.core.project import Project, load_project
from servefleet.core.render.ranks import render_multinode
from servefleet.core.secrets import SecretMask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
from multinode_pair import build

NODES = ("dgx-spark-1", "dgx-spark-2")
TOKEN = "hf_multinode-provider-secret-5151"
SECRETS = {"HF_TOKEN": TOKEN}
FACTS = {"kv_cache_tokens": 412336, "cudagraph_mode": "FULL_AND_PIECEWISE",
         "max_concurrency": 3.15}


class GateWithFacts(FakeGateRollout):
    """The fake gate, reporting the boot facts a real head's gate reads from its log (so
    the audit line carries a gate record, as on a node)."""

    def gate(self, result: DeploymentResult, target: Target, since: str,
             deadline: float) -> HealthReport:
        report = super().gate(result, target, since, deadline)
        return HealthReport(report.url, report.checks, report.failure_class,
                            facts=dict(FACTS) if report.ok else {})


@dataclass
class Pair(ShowsBig):
    """Two fake nodes and a project on disk whose inventory points at them."""

    root: Path
    ports: tuple[int, int]
    transports: dict[str, FakeNodeTransport]
    calls: list[dict[str, Any]]
    failing_workers: frozenset[str] = frozenset()

    @property
    def project_dir(self) -> Path:
        return self.root / "project"

    def project(self) -> Project:
        return load_project(self.project_dir, "pair")

    def set_port(self, port: int) -> None:
        """Change the engine's API port in the stack file (a new release on both ranks)."""
        path = self.project_dir / "Pulumi.pair.yaml"
        data = yaml.safe_load(path.read_text())
        data["config"]["servefleet:multiNode"]["big"]["port"] = port
        path.write_text(yaml.safe_dump(data))

    def props(self) -> dict[str, Any]:
        """The inputs the program declares for the engine, as the provider gets them."""
        project = self.project()
        release = render_multinode(project, project.stack.multi_node[0], SECRETS)
        return as_pulumi_sends(multinode_args(project, release, secrets=dict(SECRETS))
                               .to_props())

    def factory(self, node: Node, mask: SecretMask) -> SshTransport:
        transport = self.transports[node.name]
        transport.node = node
        return cast(SshTransport, transport)

    def deploy(self, project: Project, name: str, secrets: Any = None, **kwargs: Any,
               ) -> multinode.MultiNodeResult:
        """``deploy_multinode`` over the fake nodes (the real rollout, the fake gate)."""
        self.calls.append({"name": name, "secrets": dict(secrets or {}), **kwargs})
        [dep] = [d for d in project.stack.multi_node if d.name == name]
        release = render_multinode(project, dep, secrets)
        rollouts = {}
        for node in dep.nodes:
            transport = self.factory(project.nodes[node], SecretMask())
            rollouts[node] = GateWithFacts(project, project.nodes[node],
                                           ComposeSshRuntime(transport), secrets=secrets)
        runner = FakeWorkers(release, rollouts)
        runner.failing = self.failing_workers
        return runner.deploy()


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:
    ports = (free_port(), free_port())
    build(tmp_path / "project",
          entry={"profile": "qwen36-fp8-tp2", "nodes": list(NODES), "port": ports[0]},
          node_changes={n: {"base_dir": str(tmp_path / n / "srv"), "ports": list(ports)}
                        for n in NODES})
    project = load_project(tmp_path / "project", "pair")
    transports = {n: FakeNodeTransport(project.nodes[n], tmp_path / n / "node") for n in NODES}
    fake = Pair(tmp_path, ports, transports, [])
    monkeypatch.setattr(multinode, "deploy_multinode", fake.deploy)
    monkeypatch.setattr(multinode, "_factory", lambda _given: fake.factory)
    yield fake


# -- the provider, against two fake nodes ---------------------------------------------------
def test_create_deploys_both_ranks_and_reports_the_heads_gate(pair: Pair) -> None:
    props = pair.props()
    result = MultiNodeDeploymentProvider().create(props)
    assert result.id == f"big@{NODES[0]}+{NODES[1]}"
    assert result.outs is not None
    outs = as_pulumi_sends(result.outs)
    release = props["releaseId"]
    assert [pair.current(n) for n in NODES] == [release, release]
    assert [pair.running(n) for n in NODES] == [release, release]
    assert outs["releaseIds"] == {NODES[0]: release, NODES[1]: release}
    assert outs["health"] == {NODES[0]: HEALTHY, NODES[1]: HEALTHY}
    # The head's gate summary, read back from its audit log's gate record.
    assert outs["kvCacheTokens"] == FACTS["kv_cache_tokens"]
    assert outs["cudagraphMode"] == FACTS["cudagraph_mode"]
    assert outs["maxConcurrency"] == FACTS["max_concurrency"]
    assert [outs["observed"][n]["role"] for n in NODES] == ["head", "worker"]
    for rank in props["ranks"]:
        assert outs["observed"][rank["node"]]["filesDigest"] == rank["filesDigest"]
    assert outs["endpoint"] == f"http://{pair.project().nodes[NODES[0]].address}:{pair.ports[0]}"
    assert outs["providerVersion"] == MULTINODE_PROVIDER_VERSION
    # The secret went to the rollout, and nowhere into the outputs, not even as a digest.
    assert pair.calls[0]["secrets"] == SECRETS
    assert "secrets" not in outs
    text = repr(outs)
    assert TOKEN not in text
    assert hashlib.sha256(TOKEN.encode()).hexdigest() not in text
    # Nothing changed since: read gives the same outputs, and diff finds nothing to do.
    read = MultiNodeDeploymentProvider().read(result.id, outs)
    assert read.outs is not None
    assert as_pulumi_sends(read.outs) == outs
    diff = MultiNodeDeploymentProvider().diff(result.id, outs, pair.props())
    assert diff.changes is False and not diff.replaces


def test_a_flag_change_updates_both_ranks_to_one_release(pair: Pair) -> None:
    provider = MultiNodeDeploymentProvider()
    first = as_pulumi_sends(cast(dict[str, Any], provider.create(pair.props()).outs))
    pair.set_port(pair.ports[1])
    news = pair.props()
    assert news["releaseId"] != first["releaseId"]
    diff = provider.diff("big", first, news)
    assert diff.changes is True and not diff.replaces
    assert describe_changes(first, news) == [
        f"release {first['releaseId']} -> {news['releaseId']} on every rank "
        "(restarted together)"]
    updated = as_pulumi_sends(cast(dict[str, Any], provider.update("big", first, news).outs))
    assert updated["releaseIds"] == {n: news["releaseId"] for n in NODES}
    assert [pair.running(n) for n in NODES] == [news["releaseId"]] * 2
    assert updated["health"] == {n: HEALTHY for n in NODES}


def test_a_failed_worker_fails_the_update_in_one_masked_line_and_both_ranks_restore(
        pair: Pair) -> None:
    provider = MultiNodeDeploymentProvider()
    first = as_pulumi_sends(cast(dict[str, Any], provider.create(pair.props()).outs))
    old = first["releaseId"]
    pair.set_port(pair.ports[1])
    news = pair.props()
    pair.failing_workers = frozenset({news["releaseId"]})
    with pytest.raises(HealthGateFailed) as failed:
        provider.update("big", first, news)
    text = str(failed.value)
    line = text.splitlines()[0]
    assert line.startswith(f"big@{NODES[0]}+{NODES[1]}: release {news['releaseId']} "
                           "rolled back: failed in boot [worker_not_joined]: "), line
    assert NODES[1] in line
    assert f"release {old} serves again on every rank" in line
    assert TOKEN not in text
    # The nodes serve the restored release, and refresh shows it: the next up deploys again.
    assert [pair.running(n) for n in NODES] == [old, old]
    read = as_pulumi_sends(cast(dict[str, Any], provider.read("big", first).outs))
    assert read["releaseIds"] == {n: old for n in NODES}
    assert provider.diff("big", read, news).changes is True


def test_refresh_sees_a_stopped_worker_and_delete_stops_every_rank(pair: Pair) -> None:
    provider = MultiNodeDeploymentProvider()
    outs = as_pulumi_sends(cast(dict[str, Any], provider.create(pair.props()).outs))
    worker = pair.transports[NODES[1]]
    worker.sh(compose_commands.stop("big"))
    read = as_pulumi_sends(cast(dict[str, Any], provider.read("big", outs).outs))
    assert read["health"][NODES[0]] == HEALTHY
    assert read["health"][NODES[1]].startswith("down: "), read["health"]
    assert provider.diff("big", read, pair.props()).changes is True
    assert any(r.startswith(f"drift: rank 1 worker {NODES[1]}: down: ")
               for r in describe_changes(read, pair.props()))
    provider.delete("big", outs)
    assert [pair.running(n) for n in NODES] == [None, None]
    # The releases stay for a later deploy.
    assert [pair.current(n) for n in NODES] == [outs["releaseId"]] * 2


# -- diff on properties alone -----------------------------------------------------------------
def _props(release: str, nodes: list[str], version: str = MULTINODE_PROVIDER_VERSION,
           observed: dict[str, Any] | None = None) -> dict[str, Any]:
    props: dict[str, Any] = {
        "name": "big", "nodes": nodes, "releaseId": release, "providerVersion": version,
        "ranks": [{"node": n, "role": "head" if i == 0 else "worker", "filesDigest": "d" + n}
                  for i, n in enumerate(nodes)]}
    if observed is not None:
        props["observed"] = observed
    return props


def _serving(release: str, nodes: list[str]) -> dict[str, Any]:
    return {n: {"rank": float(i), "role": "head" if i == 0 else "worker",
                "currentRelease": release, "runningRelease": release,
                "filesDigest": "d" + n, "health": HEALTHY} for i, n in enumerate(nodes)}


def test_diff_replaces_when_the_set_of_nodes_changes_deleting_first() -> None:
    provider = MultiNodeDeploymentProvider()
    olds = _props("r1", ["a", "b"], observed=_serving("r1", ["a", "b"]))
    assert provider.diff("big", olds, _props("r1", ["a", "b"])).changes is False
    moved = provider.diff("big", olds, _props("r2", ["a", "c"]))
    assert moved.changes is True
    assert moved.replaces == ["nodes"]
    assert moved.delete_before_replace is True
    # Swapping head and worker is a new release on the same nodes: an update in place.
    swapped = provider.diff("big", olds, _props("r3", ["b", "a"]))
    assert swapped.changes is True and swapped.replaces == []
    bumped = provider.diff("big", olds, _props("r1", ["a", "b"], version="0-other"))
    assert bumped.changes is True and bumped.replaces == []


def test_diff_sees_each_kind_of_rank_drift() -> None:
    news = _props("r1", ["a", "b"])
    cases = {
        "drift: rank 1 worker b: current release is r0, not r1": {"currentRelease": "r0"},
        "drift: rank 1 worker b: release files differ on the node": {"filesDigest": "x"},
        "drift: rank 1 worker b: ungated: the running engine has not passed its gate": {
            "health": "ungated: the running engine has not passed its gate"},
    }
    for reason, change in cases.items():
        observed = _serving("r1", ["a", "b"])
        observed["b"] = {**observed["b"], **change}
        olds = _props("r1", ["a", "b"], observed=observed)
        assert describe_changes(olds, news) == [reason]
        assert MultiNodeDeploymentProvider().diff("big", olds, news).changes is True


# -- the program, under Pulumi's mocks ---------------------------------------------------------
class EngineMocks(RecordingMocks):
    """Node resources as ``test_pulumi_program`` mocks them; an engine's outputs echo its
    inputs, every rank serving its release."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.typ != MULTINODE_RESOURCE_TYPE:
            return super().new_resource(args)
        self.resources.append(args)
        outs = dict(args.inputs)
        outs.update(releaseIds={n: outs["releaseId"] for n in outs["nodes"]},
                    health={n: HEALTHY for n in outs["nodes"]}, kvCacheTokens=412336.0,
                    cudagraphMode="PIECEWISE", maxConcurrency=3.15, observed={})
        return f"{args.name}-id", outs


@pytest.fixture
def mocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingMocks]:
    ensure_event_loop()
    yield from mocked_runtime(monkeypatch, EngineMocks(), "pair", TOKEN)


def _stack_with(root: Path, strategy: str) -> Path:
    """The pair project plus a node deployment on the head's node and one elsewhere, and a
    second engine sharing the worker's node."""
    build(root, node_changes={n: {"ports": [8000, 8001, 8002]} for n in NODES}, extra_config={
        "servefleet:strategy": strategy,
        "servefleet:profiles": {"rtx5090": "qwen36-q4-llamacpp",
                                "dgx-spark-1": {"side": {"profile": "qwen36-fp8",
                                                         "port": 8001}}}})
    path = root / "Pulumi.pair.yaml"
    data = yaml.safe_load(path.read_text())
    data["config"]["servefleet:multiNode"]["big"]["port"] = 8000
    data["config"]["servefleet:multiNode"]["small"] = {
        "profile": "qwen36-fp8-tp2", "nodes": ["dgx-spark-2", "dgx-spark-1"], "port": 8002,
        "masterPort": 29502}
    path.write_text(yaml.safe_dump(data))
    return root


@pytest.mark.parametrize("strategy", ["parallel", "rolling"])
def test_program_declares_one_resource_per_engine_after_the_nodes_it_spans(
        mocks: RecordingMocks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        strategy: str) -> None:
    root = _stack_with(tmp_path / "project", strategy)
    order: list[tuple[str, list[str]]] = []
    real = pulumi_program.MultiNodeDeploymentResource

    def recording(name: str, args: Any, opts: pulumi.ResourceOptions | None = None) -> Any:
        depends = opts.depends_on if opts is not None else None
        order.append((name, [getattr(r, "_name", "?") for r in depends or []]
                      if isinstance(depends, list) else []))
        return real(name, args, opts)

    monkeypatch.setattr(pulumi_program, "MultiNodeDeploymentResource", recording)
    nodes, engines = pulumi_program.declare_stack(root, "pair", pulumi.Config("servefleet"))
    assert list(nodes) == ["dgx-spark-1", "rtx5090"]
    assert list(engines) == ["big", "small"]
    if strategy == "parallel":
        assert order == [("big", ["dgx-spark-1"]), ("small", ["dgx-spark-1", "big"])]
    else:
        # Rolling: also after the resource declared before (the last node, then `big`).
        assert order == [("big", ["dgx-spark-1", "rtx5090"]), ("small", ["dgx-spark-1", "big"])]


@pulumi.runtime.test
def test_program_inputs_are_the_rendered_ranks_and_secrets_stay_secret(
        mocks: RecordingMocks, tmp_path: Path) -> Any:
    root = build(tmp_path / "project")
    _, engines = pulumi_program.declare_stack(root, "pair", pulumi.Config("servefleet"))
    project = load_project(root, "pair")
    release = render_multinode(project, project.stack.multi_node[0], SECRETS)

    def check(_: Any) -> None:
        [args] = [r for r in mocks.resources if r.name == "big"]
        assert args.typ == MULTINODE_RESOURCE_TYPE
        assert MULTINODE_RESOURCE_TYPE == "pulumi-python:dynamic/servefleet:MultiNodeDeployment"
        inputs = args.inputs
        assert inputs["releaseId"] == release.release_id
        assert inputs["nodes"] == list(NODES)
        assert [(r["node"], r["role"]) for r in inputs["ranks"]] == [
            (NODES[0], "head"), (NODES[1], "worker")]
        assert inputs["ranks"][1]["engineFlags"]["--headless"] is True
        assert "--headless" not in inputs["ranks"][0]["engineFlags"]
        assert inputs["ranks"][0]["filesDigest"] != inputs["ranks"][1]["filesDigest"]
        assert plaintext_paths(inputs, TOKEN) == []
        assert plaintext_paths(inputs, hashlib.sha256(TOKEN.encode()).hexdigest()) == []
        assert inputs["secrets"]["value"] == SECRETS
        # Another token: the same release and the same digests (nothing computed from it).
        other = render_multinode(project, project.stack.multi_node[0],
                                 {"HF_TOKEN": "hf_another"})
        assert other.release_id == release.release_id

    return engines["big"].urn.apply(check)


def test_a_stack_without_engines_spanning_nodes_declares_none(mocks: RecordingMocks) -> None:
    repo = Path(__file__).resolve().parents[2]
    _, engines = pulumi_program.declare_stack(repo, "reference", pulumi.Config("servefleet"))
    assert engines == {}


def test_update_that_cannot_lock_names_the_holder_and_touches_nothing(pair: Pair) -> None:
    provider = MultiNodeDeploymentProvider()
    first = as_pulumi_sends(cast(dict[str, Any], provider.create(pair.props()).outs))
    pair.transports[NODES[1]].sh(remote.acquire_lock(
        str(pair.root / NODES[1] / "srv"), "someone@else pid=1 since=now op=deploy id=held-1"))
    pair.set_port(pair.ports[1])
    with pytest.raises(ServefleetError) as failed:
        provider.update("big", first, pair.props())
    assert not isinstance(failed.value, HealthGateFailed)
    line = str(failed.value).splitlines()[0]
    assert "failed in lock [lock_held]" in line and "someone@else" in line, line
    assert "nothing was stopped" in line
    assert [pair.running(n) for n in NODES] == [first["releaseId"]] * 2


def test_a_preview_of_a_stack_of_engines_only_declares_them(tmp_path: Path) -> None:
    # No node resource: the per-node engine preview is not asked (it refuses an empty
    # placement), and the engine is declared.
    pulumi.runtime.set_mocks(EngineMocks(), project="servefleet", stack="pair", preview=True)
    pulumi.runtime.set_all_config({"servefleet:hfToken": TOKEN},
                                  secret_keys=["servefleet:hfToken"])

    def planner(*_: Any) -> Any:
        raise AssertionError("the per-node planner was asked about a stack without nodes")

    try:
        nodes, engines = pulumi_program.declare_stack(build(tmp_path / "project"), "pair",
                                                      pulumi.Config("servefleet"), planner)
    finally:
        pulumi.runtime.set_all_config({})
    assert nodes == {} and list(engines) == ["big"]


def test_provider_is_stateless_and_pickles_by_reference() -> None:
    import base64

    from pulumi.dynamic.dynamic import serialize_provider

    provider = MultiNodeDeploymentProvider()
    assert vars(provider) == {}
    blob = serialize_provider(provider)
    assert blob == serialize_provider(MultiNodeDeploymentProvider())
    assert b"servefleet.adapters.pulumi_multinode" in base64.b64decode(blob)
