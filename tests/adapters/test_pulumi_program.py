"""The Pulumi program under Pulumi's mocks: what it declares, with which inputs, and that the
provider survives the pickling Pulumi does when a resource is declared.

The reference stack is used (its inventory is in git): two DGX Spark (one with two
deployments) and an RTX 5090, strategy ``rolling``, a Hugging Face token as stack secret.
The provider's ``diff`` is tested here too, on properties alone (it never connects to a node).
"""

from __future__ import annotations

import base64
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import dill
import pulumi
import pulumi.runtime
import pytest
import yaml
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.runtime import rpc
from pulumi_helpers import ensure_event_loop, mocked_runtime

from servefleet.adapters import pulumi_program, pulumi_provider
from servefleet.adapters.pulumi_provider import (
    PROVIDER_VERSION,
    RESOURCE_TYPE,
    NodeDeploymentProvider,
)
from servefleet.core.errors import ServefleetError
from servefleet.core.project import load_project
from servefleet.core.render import render_release
from tests.reference_project import REPO_ROOT

HF_TOKEN = "hf_mocked-program-secret-4242"
PROVIDER_KEY = "__provider"


class RecordingMocks(pulumi.runtime.Mocks):
    """Records every resource the program registers; outputs echo the inputs."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(args)
        outs = dict(args.inputs)
        deployments = outs.get("deployments") or {}
        outs["endpoints"] = {n: f"http://{outs.get('address')}:{int(d['port'])}"
                             for n, d in deployments.items()}
        outs["releaseIds"] = {n: d["releaseId"] for n, d in deployments.items()}
        outs["kvCacheTokens"] = {n: 323456.0 for n in deployments}
        outs["cudagraphModes"] = {n: "PIECEWISE" for n in deployments}
        outs["health"] = {n: "healthy" for n in deployments}
        return f"{args.name}-id", outs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


@pytest.fixture(autouse=True)
def event_loop_for_pulumi() -> None:
    """Pulumi's runtime wants a current event loop; an earlier ``asyncio.run()`` anywhere in
    the session leaves none."""
    ensure_event_loop()


@pytest.fixture
def mocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingMocks]:
    """Pulumi's mock monitor, keeping secrets wrapped so a test can see which inputs are
    secret (the mock monitor unwraps them otherwise)."""
    yield from mocked_runtime(monkeypatch, RecordingMocks(), "reference", HF_TOKEN)


def _is_secret(value: Any) -> bool:
    return isinstance(value, dict) and \
        value.get(rpc._special_sig_key) == rpc._special_secret_sig


def plaintext_paths(value: Any, needle: str, path: str = "") -> list[str]:
    """Where ``needle`` occurs in ``value`` outside a Pulumi secret."""
    if _is_secret(value):
        return []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in plaintext_paths(v, needle, f"{path}.{k}")]
    if isinstance(value, list | tuple):
        return [p for i, v in enumerate(value) for p in plaintext_paths(v, needle, f"{path}[{i}]")]
    if isinstance(value, str | bytes) and needle in (value if isinstance(value, str)
                                                     else value.decode("latin-1")):
        return [path or "."]
    return []


def registered(mocks: RecordingMocks) -> dict[str, pulumi.runtime.MockResourceArgs]:
    return {r.name: r for r in mocks.resources}


@pulumi.runtime.test
def test_one_resource_per_node_with_type_and_rolling_order(mocks: RecordingMocks) -> Any:
    resources = pulumi_program.declare_fleet(REPO_ROOT, "reference",
                                             pulumi.Config("servefleet"))
    assert list(resources) == ["dgx-spark-1", "dgx-spark-2", "rtx5090"]

    def check(_: Any) -> None:
        seen = registered(mocks)
        assert sorted(seen) == ["dgx-spark-1", "dgx-spark-2", "rtx5090"]
        assert {r.typ for r in seen.values()} == {RESOURCE_TYPE}
        assert RESOURCE_TYPE == "pulumi-python:dynamic/servefleet:NodeDeployment"
        spark1 = seen["dgx-spark-1"].inputs
        assert sorted(spark1["deployments"]) == ["main", "nomtp"]
        assert spark1["providerVersion"] == PROVIDER_VERSION
        assert spark1["strategy"] == "rolling"
        assert spark1["stack"] == "reference"
        main = spark1["deployments"]["main"]
        assert main["profile"] == "qwen36-fp8-mtp"
        assert int(main["port"]) == 8000
        assert int(spark1["deployments"]["nomtp"]["port"]) == 8001
        # The MTP deployment's flags name the speculative config; the other's do not.
        assert "--speculative-config" in main["engineFlags"]
        assert "--speculative-config" not in spark1["deployments"]["nomtp"]["engineFlags"]

    return pulumi.Output.all(*(r.urn for r in resources.values())).apply(check)


@pulumi.runtime.test
def test_release_ids_are_rendered_at_program_time(mocks: RecordingMocks) -> Any:
    resources = pulumi_program.declare_fleet(REPO_ROOT, "reference",
                                             pulumi.Config("servefleet"))
    project = load_project(REPO_ROOT, "reference")
    want = {d.key: render_release(project, d, {"HF_TOKEN": HF_TOKEN}).release_id
            for d in project.stack.deployments}

    def check(_: Any) -> None:
        got = {f"{name}/{dep}": spec["releaseId"]
               for name, r in registered(mocks).items()
               for dep, spec in r.inputs["deployments"].items()}
        assert got == want
        # Nothing computed from the secret is in the id (outputs are readable by anyone with
        # the state): another token, the same release.
        other = render_release(project, project.stack.deployments[0],
                               {"HF_TOKEN": "hf_another-token"}).release_id
        assert other == want[project.stack.deployments[0].key]

    return pulumi.Output.all(*(r.urn for r in resources.values())).apply(check)


@pulumi.runtime.test
def test_secrets_reach_the_resource_only_as_pulumi_secrets(mocks: RecordingMocks) -> Any:
    resources = pulumi_program.declare_fleet(REPO_ROOT, "reference",
                                             pulumi.Config("servefleet"))

    def check(_: Any) -> None:
        seen = registered(mocks)
        for name, args in seen.items():
            assert plaintext_paths(args.inputs, HF_TOKEN) == [], name
        spark = seen["dgx-spark-2"].inputs
        assert _is_secret(spark["secrets"])
        assert spark["secrets"]["value"] == {"HF_TOKEN": HF_TOKEN}
        # The llama.cpp profile needs no token: the node gets no secret at all.
        assert "secrets" not in seen["rtx5090"].inputs
        # The pickled provider holds nothing secret, so Pulumi leaves it unencrypted.
        for args in seen.values():
            blob = args.inputs[PROVIDER_KEY]
            assert isinstance(blob, str), "the provider was stored as a secret"
            assert HF_TOKEN not in base64.b64decode(blob).decode("latin-1")

    return pulumi.Output.all(*(r.urn for r in resources.values())).apply(check)


def _reference_copy(tmp_path: Path, strategy: str, **config: Any) -> Path:
    project = tmp_path / "project"
    for folder in ("nodes", "profiles", "templates", "healthchecks"):
        if (REPO_ROOT / folder).is_dir():
            shutil.copytree(REPO_ROOT / folder, project / folder,
                            ignore=shutil.ignore_patterns("sim"))
    stack = yaml.safe_load((REPO_ROOT / "Pulumi.reference.yaml").read_text())
    stack["config"]["servefleet:strategy"] = strategy
    stack["config"].update(config)
    (project / "Pulumi.reference.yaml").write_text(yaml.safe_dump(stack))
    return project


@pytest.mark.parametrize("strategy", ["rolling", "parallel"])
def test_rolling_chains_nodes_parallel_does_not(mocks: RecordingMocks, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                strategy: str) -> None:
    declared: list[tuple[str, list[str]]] = []
    real = pulumi_program.NodeDeployment

    def recording(name: str, args: Any, opts: pulumi.ResourceOptions | None = None) -> Any:
        depends = opts.depends_on if opts is not None else None
        after = [getattr(r, "_name", "?") for r in depends or []] \
            if isinstance(depends, list) else []
        declared.append((name, after))
        return real(name, args, opts)

    monkeypatch.setattr(pulumi_program, "NodeDeployment", recording)
    pulumi_program.declare_fleet(_reference_copy(tmp_path, strategy), "reference",
                                 pulumi.Config("servefleet"))
    if strategy == "rolling":
        assert declared == [("dgx-spark-1", []), ("dgx-spark-2", ["dgx-spark-1"]),
                            ("rtx5090", ["dgx-spark-2"])]
    else:
        assert declared == [("dgx-spark-1", []), ("dgx-spark-2", []), ("rtx5090", [])]


def test_the_gateway_is_declared_first_and_every_node_waits_for_it(
        mocks: RecordingMocks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    declared: list[tuple[str, list[str]]] = []
    real = pulumi_program.NodeDeployment

    def recording(name: str, args: Any, opts: pulumi.ResourceOptions | None = None) -> Any:
        depends = opts.depends_on if opts is not None else None
        declared.append((name, [getattr(r, "_name", "?") for r in depends or []]
                         if isinstance(depends, list) else []))
        assert not args.allow_outage
        return real(name, args, opts)

    gateways: list[Any] = []
    real_gateway = pulumi_program.GatewayResource

    def gateway(name: str, args: Any, opts: pulumi.ResourceOptions | None = None) -> Any:
        gateways.append(args)
        return real_gateway(name, args, opts)

    monkeypatch.setattr(pulumi_program, "NodeDeployment", recording)
    monkeypatch.setattr(pulumi_program, "GatewayResource", gateway)
    root = _reference_copy(tmp_path, "rolling", **{"servefleet:gateway": {
        "node": "rtx5090", "port": 8080,
        "routes": [{"model": "qwen36", "promptOverBytes": 65536, "to": ["dgx-spark-1/nomtp"],
                    "thinking": False}]}})
    pulumi_program.declare_fleet(root, "reference", pulumi.Config("servefleet"))
    assert declared == [("dgx-spark-1", ["gateway"]),
                        ("dgx-spark-2", ["gateway", "dgx-spark-1"]),
                        ("rtx5090", ["gateway", "dgx-spark-2"])]
    [args] = gateways
    assert args.node == "rtx5090" and args.port == 8080 and len(args.release_id) == 12


def test_missing_secret_names_the_config_line(tmp_path: Path) -> None:
    # A gated model needs hfToken (a public model's is optional: it deploys blank).
    import shutil

    root = tmp_path / "project"
    for folder in ("nodes", "profiles", "templates"):
        shutil.copytree(REPO_ROOT / folder, root / folder,
                        ignore=shutil.ignore_patterns("sim", "__pycache__"))
    for name in ("Pulumi.yaml", "Pulumi.reference.yaml"):
        shutil.copy(REPO_ROOT / name, root / name)
    fp8 = root / "profiles/qwen36-fp8.yaml"
    fp8.write_text(fp8.read_text().replace("\nmodel:\n", "\nmodel:\n  gated: true\n", 1))
    pulumi.runtime.set_mocks(RecordingMocks(), project="servefleet", stack="reference")
    pulumi.runtime.set_all_config({})
    with pytest.raises(ServefleetError, match=r"pulumi config set --secret servefleet:hfToken"):
        pulumi_program.declare_fleet(root, "reference", pulumi.Config("servefleet"))


def test_secret_config_keys() -> None:
    assert pulumi_program.secret_config_key("HF_TOKEN") == "hfToken"
    assert pulumi_program.secret_config_key("VLLM_API_KEY") == "apiKey"
    assert pulumi_program.secret_config_key("OTHER_TOKEN") == "secretEnv.OTHER_TOKEN"


def test_provider_pickles_and_round_trips() -> None:
    provider = NodeDeploymentProvider()
    assert vars(provider) == {}, "the provider must hold no state"
    # What Pulumi stores: dill with sorted dicts, base64; stable across calls (else every
    # preview would show the provider as changed).
    blob = serialize_provider(provider)
    assert blob == serialize_provider(NodeDeploymentProvider())
    restored = dill.loads(base64.b64decode(blob))
    assert type(restored) is NodeDeploymentProvider
    assert vars(restored) == {}
    # By reference, not by value: the provider host imports servefleet, so a fixed bug
    # reaches resources already in the state (with a providerVersion bump).
    assert b"servefleet.adapters.pulumi_provider" in base64.b64decode(blob)
    again = cloudpickle.loads(cloudpickle.dumps(provider))
    assert type(again) is NodeDeploymentProvider
    assert type(pickle.loads(pickle.dumps(provider))) is NodeDeploymentProvider
    # Its methods survive the trip too (the provider host calls them on the copy).
    olds = {"deployments": {"main": {"profile": "a", "port": 8000.0, "releaseId": "x",
                                     "engineFlags": {}, "fileHashes": {}}},
            "providerVersion": PROVIDER_VERSION,
            "observed": {"main": {"currentRelease": "x", "runningRelease": "x",
                                  "fileHashes": {}, "health": "healthy"}}}
    assert restored.diff("n", olds, olds).changes is False
    assert pulumi_provider.describe_changes(olds, olds) == []


# -- the provider's diff, on properties alone (no node needed) ---------------------------------
def _deployment(profile: str, release: str, flags: dict[str, Any], port: float = 8000.0,
                files: dict[str, str] | None = None) -> dict[str, Any]:
    return {"profile": profile, "port": port, "releaseId": release, "engine": "vllm",
            "engineFlags": flags, "fileHashes": files or {"compose.yaml": "aa"}}


def _healthy(release: str, files: dict[str, str] | None = None) -> dict[str, Any]:
    return {"currentRelease": release, "runningRelease": release, "health": "healthy",
            "fileHashes": files or {"compose.yaml": "aa"}}


def _props(deployments: dict[str, Any], observed: dict[str, Any] | None = None,
           version: str = PROVIDER_VERSION) -> dict[str, Any]:
    props: dict[str, Any] = {"node": "n1", "address": "10.0.0.1", "providerVersion": version,
                             "deployments": deployments}
    if observed is not None:
        props["observed"] = observed
    return props


def test_diff_of_identical_properties_is_no_change() -> None:
    dep = _deployment("p", "r1", {"--model": "m", "--enable-prefix-caching": True})
    olds = _props({"main": dep}, {"main": _healthy("r1")})
    news = _props({"main": {**dep, "port": 8000}})  # an int port equals Pulumi's float
    assert NodeDeploymentProvider().diff("n1", olds, news).changes is False
    # Moving the project folder or changing the strategy alone deploys nothing.
    moved = {**news, "projectDir": "/elsewhere", "strategy": "rolling"}
    assert NodeDeploymentProvider().diff("n1", olds, moved).changes is False


def test_diff_names_toggled_boolean_flags_and_added_flags() -> None:
    old = _deployment("p", "r1", {"--model": "m", "--async-scheduling": True})
    new = _deployment("p2", "r2", {"--model": "m", "--no-async-scheduling": True,
                                   "--speculative-config": '{"method":"mtp"}'})
    olds = _props({"main": old}, {"main": _healthy("r1")})
    [change] = pulumi_provider.describe_changes(olds, _props({"main": new}))
    assert change.restart is True
    assert change.flag_diff.changed == {"--async-scheduling": ("--async-scheduling",
                                                               "--no-async-scheduling")}
    assert change.flag_diff.added == {"--speculative-config": '{"method":"mtp"}'}
    assert "profile p -> p2" in change.reasons
    assert "releaseId r1 -> r2" in change.reasons


def test_diff_sees_drift_in_the_last_observation() -> None:
    dep = _deployment("p", "r1", {"--model": "m"})
    news = _props({"main": dep})
    cases = {
        "drift: the node's current release is r0, not r1": {**_healthy("r1"),
                                                            "currentRelease": "r0"},
        "drift: the engine runs release r0, not r1": {**_healthy("r1"),
                                                      "runningRelease": "r0"},
        "drift: release files differ on the node: compose.yaml": _healthy(
            "r1", {"compose.yaml": "bb"}),
        "drift: engine is not healthy (down: exited (exit 137))": {
            **_healthy("r1"), "health": "down: exited (exit 137)"},
    }
    for reason, observed in cases.items():
        olds = _props({"main": dep}, {"main": observed})
        assert NodeDeploymentProvider().diff("n1", olds, news).changes is True, reason
        [change] = pulumi_provider.describe_changes(olds, news)
        assert change.reasons == (reason,)
        assert change.flag_diff.empty


def test_diff_of_added_and_removed_deployments_and_a_provider_bump() -> None:
    main = _deployment("p", "r1", {"--model": "m"})
    extra = _deployment("q", "r9", {"--model": "m", "--port": "8001"}, port=8001.0)
    olds = _props({"main": main, "old": extra}, {"main": _healthy("r1"),
                                                 "old": _healthy("r9")})
    news = _props({"main": main, "nomtp": extra})
    changes = {c.deployment: c for c in pulumi_provider.describe_changes(olds, news)}
    assert sorted(changes) == ["nomtp", "old"]
    assert changes["old"].reasons == ("removed from the stack: engine stops",)
    assert changes["nomtp"].flag_diff.added["--port"] == "8001"
    same = _props({"main": main}, {"main": _healthy("r1")})
    assert NodeDeploymentProvider().diff(
        "n1", same, _props({"main": main}, version="0-other")).changes is True
