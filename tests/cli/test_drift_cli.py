"""``servefleet drift`` and ``servefleet nightly install`` through click.

Without the simulated fleet: the reference stack's nodes pin no host key, so each is
refused before any packet is sent (unreachable, exit 1, the others still reported);
``nightly install`` only renders files. Then, on the simulated fleet, each kind of drift is
made on a node and the check must name it with its values.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from servefleet.adapters.rollout import deploy
from servefleet.cli.drift import cron_quote, systemd_quote
from servefleet.core.baselines import BASELINE_FILE, BaselineBook, parse_book
from servefleet.core.models import Node
from servefleet.core.project import Project, load_project
from servefleet.sim.testbed import FleetHandle
from tests.reference_project import REPO_ROOT

Run = Callable[..., Result]
"""The real ``servefleet`` (``run`` binds it to the project copy and the reference stack)."""


def test_unreachable_nodes_exit_1_and_every_node_is_reported(run: Run, project: Path,
                                                              tmp_path: Path) -> None:
    received = tmp_path / "notified.json"
    notify = shlex.join([sys.executable, "-c",
                         f"import sys; open({str(received)!r}, 'w').write(sys.stdin.read())"])
    result = run("drift", "--json", "--no-probe", "--notify", notify)
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["status"] == "error"
    assert sorted(report["nodes"]) == ["dgx-spark-1", "dgx-spark-2", "rtx5090"]
    for node in report["nodes"].values():
        [item] = node["items"]
        assert item["kind"] == "unreachable"
        assert "no host key is pinned" in item["message"]
    assert json.loads(received.read_text()) == report


def test_one_node_by_name_and_the_table(run: Run, project: Path) -> None:
    result = run("drift", "rtx5090", "--no-probe")
    assert result.exit_code == 1
    assert "rtx5090: error" in result.output
    assert "unreachable" in result.output
    assert "dgx-spark-1" not in result.output


def test_unknown_node_is_a_config_error_reported_as_json(run: Run, project: Path) -> None:
    result = run("drift", "nosuchnode", "--json")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["status"] == "error" and report["nodes"] == {}
    assert "nosuchnode" in report["errors"][0]


def test_notify_is_not_run_when_nothing_is_wrong(run: Run, project: Path, tmp_path: Path) -> None:
    # A stack without deployments has nothing to check: exit 0, no notification.
    (project / "Pulumi.empty.yaml").write_text("config:\n  servefleet:profiles: {}\n")
    marker = tmp_path / "ran"
    notify = shlex.join([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    result = run("drift", "--json", "--notify", notify, stack="empty")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["status"] == "ok"
    assert not marker.exists()


def test_help_names_the_pulumi_route(run: Run, project: Path) -> None:
    for args in (["drift", "--help"], ["nightly", "install", "--help"]):
        result = run(*args)
        assert "pulumi preview --refresh --expect-no-changes" in result.output


def test_nightly_install_renders_service_timer_and_cron(run: Run, project: Path,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "units"
    notify = "mail -s 'drift 100%' ops@example.org"
    result = run("nightly", "install", "--at", "3:07", "--out", str(out),
                 "--notify", notify, "--user", "ops")
    assert result.exit_code == 0, result.output
    service = (out / "servefleet-drift.service").read_text()
    timer = (out / "servefleet-drift.timer").read_text()
    cron = (out / "servefleet-drift.cron").read_text()
    assert "OnCalendar=*-*-* 03:07:00" in timer
    assert "Persistent=true" in timer
    assert "Type=oneshot" in service and "User=ops" in service
    exec_start = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    assert " drift --json --notify " in exec_start
    assert '"mail -s \'drift 100%%\' ops@example.org"' in exec_start
    assert f"--project {project.resolve()}" in exec_start
    cron_line = cron.strip().splitlines()[-1]
    assert cron_line.startswith("7 3 * * * cd ")
    assert "drift\\%" not in cron_line and "100\\%" in cron_line
    assert cron_line in result.output
    assert "systemctl enable --now servefleet-drift.timer" in result.output


def test_nightly_install_rejects_a_bad_time(run: Run, project: Path, tmp_path: Path) -> None:
    result = run("nightly", "install", "--at", "25:00", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert "HH:MM" in result.output


def test_quoting_for_systemd_and_cron() -> None:
    assert systemd_quote("/usr/bin/python3") == "/usr/bin/python3"
    assert systemd_quote("a b") == '"a b"'
    assert systemd_quote('say "hi" $HOME 5%') == '"say \\"hi\\" $$HOME 5%%"'
    assert cron_quote("50% off") == "'50\\% off'"


# --------------------------------------------------------------------------- on the fleet
# The test stack runs two deployments on the simulated RTX 5090 node (x86_64 and discrete
# memory like this machine, so the GPU probe's host facts match its inventory): "overlay"
# runs an image built with the PR 40798 patch (a patch marker inside the container),
# "plain" runs the stand-in image itself. Each is on a port of its own, beside whatever
# else runs there. The stack is deployed once with the real rollout, whose health gate
# records the baselines the check compares with; each test then changes one thing the way
# an operator or a failure would, checks that exactly that is reported with its values, and
# puts it back.

DRIFT_STACK = "drifttest"
OVERLAY, PLAIN = "overlay", "plain"
PORTS = {OVERLAY: 18101, PLAIN: 18102}
SECRETS = {"HF_TOKEN": "hf_drift-test-secret-value"}
STANDIN_IMAGE = "servefleet-sim/vllm-standin:latest"
BOOT_WAIT_SECONDS = 240
BASE_PROFILE = "qwen36-nvfp4-tq"
# The KV floor is not what these tests are about. Without its overlay the profile must not
# use TurboQuant KV: vLLM 0.21 then dies on a long prompt, and the rollout's gate refuses it.
TEST_PROFILES = {
    "drift-overlay": {"extends": BASE_PROFILE, "vllm": {"gpu_memory_utilization": 0.45},
                      "health": {"min_kv_cache_tokens": 100000}},
    "drift-plain": {"extends": BASE_PROFILE, "patches": [],
                    "vllm": {"kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.45},
                    "health": {"min_kv_cache_tokens": 100000}},
}


@dataclass
class Fleet:
    """The deployed test stack and ways to reach and change it."""

    handle: FleetHandle
    project_dir: Path
    project: Project
    node_name: str
    """The node both deployments run on."""
    spare: str
    """Another node of the fleet, in the stack of the sshd test only."""
    run_cli: Run
    """The real ``servefleet`` (the session's ``run_cli`` fixture)."""

    @property
    def node(self) -> Node:
        return self.project.nodes[self.node_name]

    def ssh(self, command: str) -> str:
        return self.handle.ssh(self.node_name, command, timeout=300).stdout.strip()

    def container(self, deployment: str) -> str:
        return self.ssh("docker ps -aq --no-trunc --filter "
                        f"label=com.docker.compose.project=servefleet-{deployment}")

    def release_dir(self, deployment: str) -> Path:
        return (Path(self.node.base_dir) / deployment / "current").resolve()

    def baselines(self) -> BaselineBook:
        """The node's baselines, as the rollout's health gate recorded them."""
        book, problem = parse_book((Path(self.node.base_dir) / BASELINE_FILE).read_text())
        assert problem is None, problem
        return book

    def compose_up(self, deployment: str, *extra: Path) -> None:
        """``docker compose up -d --force-recreate`` of the current release, by hand (plus
        override files)."""
        release = self.release_dir(deployment)
        files = [release / "compose.yaml", *sorted(release.glob("compose.override.*.yaml")),
                 *extra]
        self.ssh(f"docker compose -p servefleet-{deployment} --project-directory "
                 f"{shlex.quote(str(release))} "
                 + " ".join(f"-f {shlex.quote(str(f))}" for f in files)
                 + " up -d --force-recreate --no-build")

    @property
    def control(self) -> Path:
        settings = self.node.sim
        assert settings is not None
        return Path(settings.control_dir)

    def scratch(self, file: str) -> Path:
        """A file on the node outside every release folder."""
        return self.handle.node_files(self.node_name).root / file

    @contextlib.contextmanager
    def engine_by_hand(self, file: str, engine: dict[str, Any]) -> Iterator[None]:
        """The plain deployment's engine recreated by hand with the compose override
        ``engine`` (written to the scratch ``file``); recreated from its release after (a
        new container: its restart count starts at 0), and put back."""
        extra = self.scratch(file)
        extra.write_text(yaml.safe_dump({"services": {"engine": engine}}))
        try:
            self.compose_up(PLAIN, extra)
            yield
        finally:
            self.compose_up(PLAIN)
            extra.unlink(missing_ok=True)
        self.put_back(PLAIN)

    def drift(self, *args: str, stack: str = DRIFT_STACK) -> tuple[int, dict[str, Any]]:
        result = self.run_cli("drift", "--json", "--timeout", "90", *args,
                              project=self.project_dir, stack=stack,
                              env={"HF_TOKEN": SECRETS["HF_TOKEN"]})
        assert result.output.strip(), result
        return result.exit_code, json.loads(result.output)

    def items(self, deployment: str | None = None) -> list[dict[str, Any]]:
        """The node's items (those of ``deployment`` and the node-wide ones)."""
        _, report = self.drift()
        return [i for i in report["nodes"][self.node_name]["items"]
                if deployment is None or i["deployment"] in (None, deployment)]

    def wait(self, deployment: str, done: Callable[[list[dict[str, Any]]], bool],
             what: str) -> list[dict[str, Any]]:
        """Check until ``done(items)`` (engines take a while to boot)."""
        deadline = time.monotonic() + BOOT_WAIT_SECONDS
        while True:
            items = self.items(deployment)
            if done(items):
                return items
            if time.monotonic() > deadline:
                pytest.fail(f"{deployment}: {what} not seen within {BOOT_WAIT_SECONDS} s: "
                            f"{json.dumps(items, indent=1)}")
            time.sleep(2)

    def wait_clean(self, deployment: str) -> None:
        self.wait(deployment, lambda items: not items, "a clean check")

    def put_back(self, deployment: str) -> None:
        """After a test restarted the engine by hand: deploy, which puts the engine that
        runs ungated through its gate again (a no-op for one that never restarted), then a
        clean check."""
        results = deploy(self.project, [self.node_name], secrets=SECRETS)
        assert all(r.ok for r in results), [r.to_json() for r in results]
        self.wait_clean(deployment)


def kinds(items: list[dict[str, Any]]) -> set[str]:
    return {item["kind"] for item in items}


def restarted_by_hand(items: list[dict[str, Any]], deployment: str) -> list[dict[str, Any]]:
    """The items of an engine a test restarted by hand, less the ``ungated-engine`` one that
    such a restart always brings (the engine started again without passing its gate)."""
    ungated = [i for i in items if i["kind"] == "ungated-engine"]
    assert [i["deployment"] for i in ungated] == [deployment], items
    return [i for i in items if i["kind"] != "ungated-engine"]


def one(items: list[dict[str, Any]], kind: str, subject: str | None = None) -> dict[str, Any]:
    found = [i for i in items if i["kind"] == kind and (subject is None or i["subject"] == subject)]
    assert len(found) == 1, (kind, subject, items)
    return found[0]


def _write_stack(root: Path, stack: str, placements: dict[str, dict[str, Any]]) -> None:
    (root / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(
        {"config": {"servefleet:strategy": "parallel", "servefleet:profiles": placements}}))


@pytest.fixture(scope="module")
def fleet(sim_fleet: FleetHandle, tmp_path_factory: pytest.TempPathFactory,
          run_cli: Run) -> Iterator[Fleet]:
    """The test stack deployed on the simulated fleet (real rollout, real stand-in engine,
    whose health gate records the baselines), checked clean once."""
    if not sim_fleet.standin_is_real:
        pytest.fail("the stand-in engine image is not built yet (servefleet/sim/standin has "
                    "no Dockerfile.vllm): drift checks need its boot log and /version")
    specs = sorted(sim_fleet.nodes.values(), key=lambda s: s.index)
    # Two engines of one 22 GiB model share the node: a GB10's 128 GB holds both (0.45 each),
    # where the validation rules rightly refuse 2 x 0.95 of a 5090.
    target = next((s for s in specs if s.docker and s.gpu.unified_memory), None)
    assert target is not None, "the simulated fleet has a GB10 node"
    spare = next(s for s in specs if s.name != target.name)
    root = tmp_path_factory.mktemp("drift-project")
    # Copies, not links: render refuses files reached through a symbolic link.
    shutil.copytree(sim_fleet.project_dir / "nodes", root / "nodes")
    shutil.copytree(REPO_ROOT / "templates", root / "templates")
    shutil.copytree(REPO_ROOT / "profiles", root / "profiles")
    for name, profile in TEST_PROFILES.items():
        (root / "profiles" / f"{name}.yaml").write_text(yaml.safe_dump(profile))
    placements = {target.name: {OVERLAY: {"profile": "drift-overlay", "port": PORTS[OVERLAY]},
                                PLAIN: {"profile": "drift-plain", "port": PORTS[PLAIN]}}}
    _write_stack(root, DRIFT_STACK, placements)
    # The same, plus a node that will not answer (the sshd test).
    _write_stack(root, f"{DRIFT_STACK}-spare", {
        **placements, spare.name: {PLAIN: {"profile": "qwen36-fp8", "port": PORTS[PLAIN]}}})
    project = load_project(root, DRIFT_STACK)

    def wipe() -> None:
        for deployment in (OVERLAY, PLAIN):
            sim_fleet.remove_deployment(project, deployment, [target.name])

    wipe()
    results = deploy(project, secrets=SECRETS)
    assert all(r.ok for r in results), [r.to_json() for r in results]
    fleet = Fleet(sim_fleet, project.root, project, target.name, spare.name, run_cli)
    code, report = fleet.drift()
    assert code == 0, json.dumps(report, indent=1)
    yield fleet
    wipe()


@pytest.mark.fleet
@pytest.mark.slow
def test_a_clean_fleet_exits_0_against_the_gates_baselines(fleet: Fleet) -> None:
    path = Path(fleet.node.base_dir) / BASELINE_FILE
    before = path.read_bytes(), path.stat().st_mtime_ns
    code, report = fleet.drift()
    assert code == 0, json.dumps(report, indent=1)
    assert report["nodes"] == {fleet.node_name: {"status": "ok", "items": []}}
    book = fleet.baselines()
    for deployment, profile in ((OVERLAY, "drift-overlay"), (PLAIN, "drift-plain")):
        assert book.baselines[profile].kv_pool > 0
        image = book.images[deployment]
        assert image.release_id == fleet.release_dir(deployment).name
        assert image.image_id == fleet.ssh("docker inspect --format '{{.Image}}' "
                                           + fleet.container(deployment))
    # Drift only reads the baselines: nothing on the node was written.
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert not list(Path(fleet.node.base_dir).glob("*/baseline.json"))


@pytest.mark.fleet
@pytest.mark.slow
def test_hand_edited_compose_file(fleet: Fleet) -> None:
    path = fleet.release_dir(OVERLAY) / "compose.yaml"
    original = path.read_bytes()
    try:
        path.write_bytes(original + b"# tuned by hand on the node\n")
        code, report = fleet.drift()
        assert code == 2
        [item] = report["nodes"][fleet.node_name]["items"]
        assert (item["kind"], item["subject"], item["deployment"]) == \
            ("file-hash", "compose.yaml", OVERLAY)
        assert item["expected"] == hashlib.sha256(original).hexdigest()
        assert item["observed"] == hashlib.sha256(path.read_bytes()).hexdigest()
    finally:
        path.write_bytes(original)
    assert fleet.items() == []


@pytest.mark.fleet
@pytest.mark.slow
def test_stopped_container(fleet: Fleet) -> None:
    container = fleet.container(OVERLAY)
    try:
        fleet.ssh(f"docker stop -t 5 {container}")
        [item] = fleet.items()
        assert (item["kind"], item["deployment"]) == ("container-stopped", OVERLAY)
        assert item["expected"] == "running" and item["observed"].startswith("exited (")
    finally:
        fleet.ssh(f"docker start {container}")
    # Started again by hand: it serves, but nothing checked this boot.
    item = one(fleet.items(OVERLAY), "ungated-engine")
    assert (item["expected"], item["observed"]) == ("gated", "ungated")
    fleet.put_back(OVERLAY)


@pytest.mark.fleet
@pytest.mark.slow
def test_restarting_container(fleet: Fleet) -> None:
    # A fault in this container's environment only (the fault file would reach both).
    with fleet.engine_by_hand("drift-test-crash.yaml", {
        "environment": {"STANDIN_FAULT": "crash_after_boot=1"}}):
        items = fleet.wait(PLAIN, lambda items: "container-restarting" in kinds(items),
                           "a restarting container")
        item = one(items, "container-restarting")
        # Crash-looping ("restarting (N restarts)"), or back up after N restarts.
        assert item["deployment"] == PLAIN and item["observed"] != item["expected"]
        restarts = fleet.ssh(f"docker inspect --format '{{{{.RestartCount}}}}' "
                             f"{fleet.container(PLAIN)}")
        assert int(restarts) >= 1
        assert one(items, "env", "STANDIN_FAULT")["expected"] is None


@pytest.mark.fleet
@pytest.mark.slow
def test_env_and_labels_changed_by_hand(fleet: Fleet) -> None:
    with fleet.engine_by_hand("drift-test-env.yaml", {
        "environment": {"STANDIN_NODE_NAME": "renamed-by-hand", "DEBUG_BY_HAND": "1",
                        "HF_TOKEN": "hf_pasted-by-hand-1234"},
        "labels": {"io.servefleet.profile": "by-hand", "owner": "bob"}}):
        fleet.wait(PLAIN, lambda items: "engine-version" not in kinds(items),
                   "the recreated engine answering")
        code, report = fleet.drift()
        assert code == 2
        items = report["nodes"][fleet.node_name]["items"]
        assert kinds(restarted_by_hand(items, PLAIN)) == {"env", "labels"}, items
        assert {i["deployment"] for i in items} == {PLAIN}
        changed = one(items, "env", "STANDIN_NODE_NAME")
        assert (changed["expected"], changed["observed"]) == (fleet.node_name,
                                                              "renamed-by-hand")
        assert one(items, "env", "DEBUG_BY_HAND")["expected"] is None
        secret = one(items, "env", "HF_TOKEN")
        assert secret["expected"] == "(secret)" and "differs" in secret["observed"]
        label = one(items, "labels", "io.servefleet.profile")
        assert (label["expected"], label["observed"]) == ("drift-plain", "by-hand")
        owner = one(items, "labels", "owner")
        assert (owner["expected"], owner["observed"]) == (None, "bob")
        text = json.dumps(report)
        assert "hf_pasted-by-hand-1234" not in text and SECRETS["HF_TOKEN"] not in text


@pytest.mark.fleet
@pytest.mark.slow
def test_a_tag_that_moved(fleet: Fleet) -> None:
    inspect_id = f"docker image inspect --format '{{{{.Id}}}}' {STANDIN_IMAGE}"
    before = fleet.ssh(inspect_id)
    try:
        # Another image under the same reference, as after a pull of a moved tag.
        scratch = fleet.ssh(f"docker create {STANDIN_IMAGE}")
        fleet.ssh(f"docker commit --change 'LABEL io.servefleet.test=moved' {scratch} "
                  f"{STANDIN_IMAGE} >/dev/null && docker rm {scratch} >/dev/null")
        moved = fleet.ssh(inspect_id)
        assert moved != before

        # The container still runs the old image; the tag now names another one.
        [item] = fleet.items()
        assert (item["kind"], item["subject"], item["deployment"]) == \
            ("image-digest", "image_ref", PLAIN)
        assert (item["expected"], item["observed"]) == (before, moved)

        # Recreated, it runs the moved image: not the one it was deployed with.
        fleet.compose_up(PLAIN)
        items = fleet.wait(PLAIN, lambda items: any(i["subject"] == "image_id" for i in items)
                           and all(i["subject"] in ("image_id", "gated") for i in items),
                           "the recreated container's image")
        [item] = restarted_by_hand(items, PLAIN)
        assert (item["kind"], item["expected"], item["observed"]) == \
            ("image-digest", before, moved)
    finally:
        fleet.ssh(f"docker tag {before} {STANDIN_IMAGE}")
        fleet.compose_up(PLAIN)
        fleet.ssh("docker image prune -f >/dev/null")
    fleet.put_back(PLAIN)


@pytest.mark.fleet
@pytest.mark.slow
def test_patch_marker_removed(fleet: Fleet) -> None:
    marker = fleet.release_dir(OVERLAY) / "patches.json"
    try:
        fleet.ssh(f"docker exec {fleet.container(OVERLAY)} rm /etc/servefleet/patches.json")
        [item] = fleet.items()
        assert (item["kind"], item["subject"], item["deployment"]) == \
            ("patch-set", "patches.json", OVERLAY)
        assert item["expected"] == hashlib.sha256(marker.read_bytes()).hexdigest()
        assert item["observed"] is None
    finally:
        fleet.compose_up(OVERLAY)
    fleet.put_back(OVERLAY)


@pytest.mark.fleet
@pytest.mark.slow
def test_driver_upgraded(fleet: Fleet) -> None:
    gpu_json = fleet.control / "gpu.json"
    original = gpu_json.read_text()
    try:
        reading = json.loads(original)
        reading["driver_version"] = "590.44.01"
        reading["cuda_version"] = "13.1"
        gpu_json.write_text(json.dumps(reading))
        code, report = fleet.drift()
        assert code == 2
        items = report["nodes"][fleet.node_name]["items"]
        assert kinds(items) == {"driver", "cuda"}, items
        driver, cuda = one(items, "driver"), one(items, "cuda")
        assert (driver["expected"], driver["observed"]) == (fleet.node.driver_version,
                                                            "590.44.01")
        assert (cuda["expected"], cuda["observed"]) == (fleet.node.cuda_version, "13.1")
        assert driver["deployment"] is None
    finally:
        gpu_json.write_text(original)
    assert fleet.items() == []


@pytest.mark.fleet
@pytest.mark.slow
def test_engine_version_changed(fleet: Fleet) -> None:
    with fleet.engine_by_hand("drift-test-version.yaml", {
        "environment": {"STANDIN_ENGINE_VERSION": "0.22.0"}}):
        items = fleet.wait(PLAIN, lambda items: any(
            i["kind"] == "engine-version" and i["observed"] for i in items),
            "the engine's new version")
        item = one(items, "engine-version")
        assert (item["expected"], item["observed"]) == ("0.21.0", "0.22.0")
        # The variable was changed by hand too, and that is said as well.
        env = one(items, "env", "STANDIN_ENGINE_VERSION")
        assert (env["expected"], env["observed"]) == ("0.21.0", "0.22.0")


@pytest.mark.fleet
@pytest.mark.slow
def test_kv_pool_shrinks(fleet: Fleet) -> None:
    fault = fleet.control / "fault"
    entry = fleet.baselines().baselines["drift-overlay"]
    try:
        # Read at boot: only the restarted engine gets it.
        fault.write_text("kv_small=0.3\n")
        fleet.ssh(f"docker restart -t 5 {fleet.container(OVERLAY)}")
        items = fleet.wait(OVERLAY, lambda items: "kv-pool" in kinds(items),
                           "the smaller KV pool")
        [item] = restarted_by_hand(items, OVERLAY)
        assert (item["kind"], item["deployment"]) == ("kv-pool", OVERLAY)
        assert item["expected"] == round(entry.kv_pool)
        assert item["observed"] < item["expected"] * 0.8
    finally:
        fault.unlink(missing_ok=True)
        fleet.ssh(f"docker restart -t 5 {fleet.container(OVERLAY)}")
    fleet.put_back(OVERLAY)


@pytest.mark.fleet
@pytest.mark.slow
def test_cuda_graph_mode(fleet: Fleet) -> None:
    release = fleet.release_dir(PLAIN)
    service = yaml.safe_load((release / "compose.yaml").read_text())["services"]["engine"]
    command = [str(a) for a in service["command"]] + ["--enforce-eager"]
    with fleet.engine_by_hand("drift-test-eager.yaml", {"command": command}):
        items = fleet.wait(PLAIN, lambda items: "cudagraph-mode" in kinds(items),
                           "the CUDA-graph mode of the new boot")
        item = one(items, "cudagraph-mode")
        assert (item["expected"], item["observed"]) == ("FULL_AND_PIECEWISE", "NONE")
        assert "--enforce-eager" in one(items, "command")["observed"]


@pytest.mark.fleet
@pytest.mark.slow
def test_stopped_sshd_exits_1_and_the_other_nodes_are_checked(fleet: Fleet) -> None:
    from servefleet.sim import procs, sshd, state

    layout = fleet.handle.config.layout
    record = state.load(layout).nodes[fleet.spare].sshd
    assert record is not None
    try:
        assert procs.stop(record, timeout=10.0)
        code, report = fleet.drift(stack=f"{DRIFT_STACK}-spare")
        assert code == 1
        assert report["status"] == "error"
        [item] = report["nodes"][fleet.spare]["items"]
        assert (item["kind"], item["node"]) == ("unreachable", fleet.spare)
        assert report["nodes"][fleet.node_name] == {"status": "ok", "items": []}
    finally:
        spec = fleet.handle.nodes[fleet.spare]
        files = layout.node(fleet.spare)
        with state.locked(layout):
            restarted = sshd.start(spec, files)
            sshd.wait_ready(spec, files, restarted)
            current = state.load(layout)
            node = current.nodes[fleet.spare].model_copy(update={"sshd": restarted})
            state.save(layout, current.model_copy(
                update={"nodes": {**current.nodes, fleet.spare: node}}))
    fleet.handle.ssh(fleet.spare, "true")
