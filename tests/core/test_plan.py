"""The plan: rendered releases of the shipped profiles against observed node facts."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from servefleet.core.models import Deployment, StackConfig
from servefleet.core.observed import (
    COMPOSE_WORKING_DIR_LABEL,
    RELEASE_LABEL,
    ObservedContainer,
    ObservedDeployment,
)
from servefleet.core.plan import flags_from_argv, plan
from servefleet.core.project import Project, load_nodes, load_profiles
from servefleet.core.render import (
    RenderedRelease,
    hashed_env_text,
    manifest_for,
    render_release,
)
from tests.reference_project import REPO_ROOT

SECRETS = {"HF_TOKEN": "hf_plan_test_token"}
STARTED = "2026-11-21T10:00:05.123456789Z"


@pytest.fixture(scope="module")
def project() -> Project:
    """The repository's inventory and profiles with an in-memory stack."""
    nodes, node_files, node_problems = load_nodes(REPO_ROOT)
    profiles, profile_files, raw, problems = load_profiles(REPO_ROOT)
    assert not node_problems and not problems
    stack = StackConfig.model_validate({"stack": "test", "deployments": []})
    return Project(root=REPO_ROOT, nodes=nodes, node_files=node_files, profiles=profiles,
                   profile_files=profile_files, stack=stack, stack_file="Pulumi.test.yaml",
                   raw_profiles=raw)


def rendered(project: Project, profile: str, node: str = "dgx-spark-1") -> RenderedRelease:
    return render_release(project, Deployment(node=node, profile=profile), SECRETS)


def observed_of(release: RenderedRelease, *, status: str = "running", exit_code: int = 0,
                running_release: str | None = None, extra_releases: tuple[str, ...] = (),
                gated: bool = True) -> ObservedDeployment:
    """What a node that runs ``release`` reports (built from the real manifest); ``gated``:
    its engine passed its gate (the ``gated`` mark names its container's start)."""
    manifest = manifest_for(release, Deployment(node=release.node, name=release.deployment,
                                                profile=release.profile),
                            created_at="2026-11-21T10:00:00+00:00", created_by="ops@ctl")
    container = ObservedContainer(
        name=f"{release.deployment}-engine-1", status=status, exit_code=exit_code,
        labels={COMPOSE_WORKING_DIR_LABEL:
                f"/srv/servefleet/{release.deployment}/releases/{release.release_id}",
                RELEASE_LABEL: running_release or release.release_id},
        started_at=STARTED,
    )
    return ObservedDeployment(
        name=release.deployment, current_release=release.release_id,
        releases=tuple(sorted({release.release_id, *extra_releases})),
        manifest=json.loads(json.dumps(manifest)), containers=(container,),
        gated_release=(running_release or release.release_id) if gated else None,
        gated_started_at=STARTED if gated else None)


def test_new_deployment_is_created_with_every_flag_added(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    item = plan(release, None)
    assert item.action == "create"
    assert item.upload and item.restart
    assert item.current_release is None
    assert item.flag_diff.added["--model"] == "Qwen/Qwen3.6-35B-A3B-FP8"
    assert item.flag_diff.added["--max-model-len"] == "131072"
    assert not item.flag_diff.removed and not item.flag_diff.changed
    assert item.reasons == ("new deployment",)


def test_running_desired_release_is_unchanged(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    item = plan(release, observed_of(release))
    assert item.action == "unchanged"
    assert not item.changes and not item.restart and not item.upload
    assert item.summary_lines() == [
        f"dgx-spark-1/main: unchanged (release {release.release_id}, running)"]


def node_hashes(release: RenderedRelease,
                edits: dict[str, bytes | None] | None = None) -> dict[str, str]:
    """What the node reader hashes on a node holding ``release`` with ``edits`` applied
    (path → new content, ``None``: deleted): ``engine.env`` in its secret-hashed form."""
    files: dict[str, bytes | None] = {**release.files, **(edits or {})}
    return {path: hashlib.sha256(hashed_env_text(content) if path == "engine.env"
                                 else content).hexdigest()
            for path, content in files.items() if content is not None}


def test_intact_release_files_are_unchanged(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    observed = observed_of(release).model_copy(update={"file_hashes": node_hashes(release)})
    item = plan(release, observed)
    assert item.action == "unchanged" and not item.repair


def test_file_edited_on_the_node_plans_a_repair(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    edited = release.files["compose.yaml"] + b"# edited by hand\n"
    observed = observed_of(release).model_copy(update={
        "file_hashes": node_hashes(release, {"compose.yaml": edited})})
    item = plan(release, observed)
    assert item.action == "update" and item.repair and item.upload and item.restart
    assert item.current_release == item.release_id == release.release_id
    assert item.reasons == ("files edited on the node: compose.yaml",)
    assert item.changed_files == ("compose.yaml",)
    assert "  files edited on the node: compose.yaml" in item.summary_lines()
    assert item.to_json()["repair"] is True


def test_edited_secret_and_added_file_are_named_without_values(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    # A variable added to engine.env by hand; the published hash covers names, not values.
    env = release.files["engine.env"] + b"EXTRA_TOKEN='hf_added_by_hand'\n"
    observed = observed_of(release, status="exited", exit_code=1).model_copy(update={
        "file_hashes": node_hashes(release, {"engine.env": env, "notes.txt": b"x"})})
    item = plan(release, observed)
    assert item.reasons == ("files edited on the node: engine.env, notes.txt",
                            "engine not running (exited (exit 1))")
    assert SECRETS["HF_TOKEN"] not in json.dumps(item.to_json())


def test_unread_file_hashes_never_plan_a_repair(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    assert plan(release, observed_of(release)).action == "unchanged"


def test_switching_to_mtp_shows_only_the_speculative_flag(project: Project) -> None:
    old = rendered(project, "qwen36-fp8")
    new = rendered(project, "qwen36-fp8-mtp")
    item = plan(new, observed_of(old))
    assert item.action == "update"
    assert item.restart and item.upload
    assert item.previous_profile == "qwen36-fp8" and item.profile == "qwen36-fp8-mtp"
    assert item.flag_diff.added == {
        "--speculative-config": '{"method":"qwen3_next_mtp","num_speculative_tokens":2}'}
    assert not item.flag_diff.removed and not item.flag_diff.changed
    assert item.image_change is None
    assert "compose.yaml" in item.changed_files
    assert item.reasons == ("engine flags change",)
    lines = item.summary_lines()
    assert lines[0] == f"dgx-spark-1/main: update: release {old.release_id} -> {new.release_id}"
    assert '  + --speculative-config {"method":"qwen3_next_mtp","num_speculative_tokens":2}' \
        in lines


def test_a_changed_flag_value_reads_old_to_new(project: Project) -> None:
    old = rendered(project, "qwen36-w8a16")
    new = rendered(project, "qwen36-w8a16-1m")
    item = plan(new, observed_of(old))
    assert item.action == "update"
    assert "--max-model-len" in item.flag_diff.changed
    before, after = item.flag_diff.changed["--max-model-len"]
    assert before != after


def test_killed_engine_of_the_current_release_is_restarted_without_upload(
        project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    item = plan(release, observed_of(release, status="exited", exit_code=137))
    assert item.action == "update"
    assert item.restart and not item.upload
    assert item.reasons == ("engine not running (exited (exit 137))",)
    assert item.flag_diff.empty


def test_engine_started_from_another_release_is_not_unchanged(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    item = plan(release, observed_of(release, running_release="0123456789ab"))
    assert item.action == "update"
    assert item.reasons == (
        f"engine runs release 0123456789ab, not the current {release.release_id}",)


def test_release_already_on_the_node_is_sent_again_to_replace_it_if_it_differs(
        project: Project) -> None:
    # Release ids never depend on secret values, and only the current release's secrets are
    # digested: a folder of the target release left by an earlier deploy may hold an old
    # HF_TOKEN. It is sent again as a repair; the node keeps it when its files are the same.
    old = rendered(project, "qwen36-fp8")
    new = rendered(project, "qwen36-fp8-mtp")
    item = plan(new, observed_of(old, extra_releases=(new.release_id,)))
    assert item.action == "update" and item.upload and item.repair


def test_release_not_on_the_node_is_uploaded_without_replacing_anything(
        project: Project) -> None:
    old = rendered(project, "qwen36-fp8")
    new = rendered(project, "qwen36-fp8-mtp")
    item = plan(new, observed_of(old))
    assert item.action == "update" and item.upload and not item.repair


def test_node_with_releases_but_no_current_is_a_create(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    observed = ObservedDeployment(name="main", releases=(release.release_id,))
    item = plan(release, observed)
    assert item.action == "create"
    assert item.upload and item.repair
    assert item.reasons == ("no current release on the node",)


def test_unreadable_manifest_still_plans_an_update(project: Project) -> None:
    old = rendered(project, "qwen36-fp8")
    new = rendered(project, "qwen36-fp8-mtp")
    observed = observed_of(old).model_copy(update={"manifest": None,
                                                   "manifest_error": "not JSON"})
    item = plan(new, observed)
    assert item.action == "update"
    assert item.flag_diff.empty
    assert item.reasons[0] == ("current release has no readable manifest: flag diff unknown "
                               "(not JSON)")


def test_engine_change_reports_image_and_flags(project: Project) -> None:
    old = rendered(project, "qwen36-fp8", node="rtx5090")
    new = rendered(project, "qwen36-q4-llamacpp", node="rtx5090")
    item = plan(new, observed_of(old))
    assert item.image_change == (old.image, new.image)
    assert "image changes" in item.reasons
    assert item.flag_diff.added["-m"] == "/models/Qwen3.6-35B-A3B-Q4_K_M.gguf"
    assert "--served-model-name" in item.flag_diff.removed


def test_plan_json_round_trips(project: Project) -> None:
    new = rendered(project, "qwen36-fp8-mtp")
    data: dict[str, Any] = json.loads(json.dumps(plan(new, observed_of(
        rendered(project, "qwen36-fp8"))).to_json()))
    assert data["action"] == "update"
    assert data["flag_diff"]["added"] == {
        "--speculative-config": '{"method":"qwen3_next_mtp","num_speculative_tokens":2}'}


@pytest.mark.parametrize(("argv", "flags"), [
    (["Qwen/Q", "--max-model-len", "4096", "--enable-prefix-caching", "--no-async-scheduling"],
     {"--model": "Qwen/Q", "--max-model-len": "4096", "--enable-prefix-caching": None,
      "--no-async-scheduling": None}),
    (["-m", "/models/x.gguf", "--reasoning-budget", "-1", "--metrics", "-c", "0"],
     {"-m": "/models/x.gguf", "--reasoning-budget": "-1", "--metrics": None, "-c": "0"}),
    (["m", "--hf-overrides={\"a\":1}", "--x", "1", "--x", "2"],
     {"--model": "m", "--hf-overrides": '{"a":1}', "--x": "2"}),
    ([], {}),
])
def test_flags_from_argv(argv: list[str], flags: dict[str, str | None]) -> None:
    assert flags_from_argv(argv) == flags


def test_flags_from_argv_inverts_the_renderer(project: Project) -> None:
    from servefleet.core.render import engine_command, engine_flags

    for name, profile in project.profiles.items():
        assert flags_from_argv(engine_command(profile, 8000)) == engine_flags(profile, 8000), name


# -- adopting a container started by hand ---------------------------------------------------
def hand_started(command: list[str], status: str = "running") -> ObservedDeployment:
    """A never-deployed deployment whose stack names a container started by hand."""
    return ObservedDeployment(name="main", adopt_candidate=ObservedContainer(
        name="vllm-qwen", status=status, command=tuple(command), image_ref="vllm/vllm-openai"))


def test_hand_started_engine_with_the_rendered_flags_in_any_order_is_adopted(
        project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    model, *flags = release.engine_argv
    pairs = flags_from_argv(release.engine_argv)
    shuffled = [model]
    for flag, value in reversed([(f, v) for f, v in pairs.items() if f != "--model"]):
        shuffled += [flag] if value is None else [f"{flag}={value}"]
    assert shuffled != [model, *flags]
    item = plan(release, hand_started(shuffled))
    assert item.action == "adopt" and item.changes
    assert item.adopt_container == "vllm-qwen"
    assert not item.restart and item.upload and item.flag_diff.empty
    assert item.summary_lines() == [
        f"dgx-spark-1/main: adopt: release none -> {release.release_id}",
        "  container vllm-qwen (started by hand) runs the rendered engine: taken over "
        "without a restart"]
    assert item.to_json()["adopt_container"] == "vllm-qwen"


def test_entrypoint_words_leading_the_command_are_not_engine_flags(project: Project) -> None:
    # `docker run --entrypoint python3 IMAGE /opt/wrapper.py vllm MODEL --flags…`
    release = rendered(project, "qwen36-fp8")
    command = ["/opt/servefleet-sim/cpu_twin.py", "vllm", *release.engine_argv]
    assert plan(release, hand_started(command)).action == "adopt"
    too_many = ["a", "b", "c", "d", *release.engine_argv]
    assert plan(release, hand_started(too_many)).action == "create"


def test_hand_started_engine_with_other_flags_is_replaced_with_the_diff(
        project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    command = [a if a != "32" else "64" for a in release.engine_argv]
    assert command != list(release.engine_argv)
    item = plan(release, hand_started(command))
    assert item.action == "create" and item.restart
    assert item.adopt_container == "vllm-qwen"
    assert item.flag_diff.changed == {"--max-num-seqs": ("64", "32")}
    assert item.reasons == (
        "container vllm-qwen (started by hand) is not adopted: it runs other engine flags; "
        "it is stopped (kept, not removed) and the release started in its place",)


def test_a_stopped_hand_started_container_is_not_adopted(project: Project) -> None:
    release = rendered(project, "qwen36-fp8")
    item = plan(release, hand_started(list(release.engine_argv), status="exited"))
    assert item.action == "create" and item.adopt_container is None
