"""Drift checks of a deployment's engine container: state, gate, command line, environment,
labels, image and patch set."""

from __future__ import annotations

from servefleet.core.drift.desired import DesiredDeployment
from servefleet.core.drift.items import DriftKind, ItemCollector, short_digest
from servefleet.core.observed import ObservedContainer, ObservedDeployment, gate_miss
from servefleet.core.observed.serving import ungated_phrase
from servefleet.core.plan import runs_engine_flags
from servefleet.core.render.layout import ENV_FILE
from servefleet.core.secrets import secret_digest

COMPOSE_LABEL_PREFIX = "com.docker.compose."
"""Labels docker compose adds itself (project, service, config hash…): never drift."""
SECRET_SHOWN = "(secret)"
"""What a report shows instead of a secret value."""
HIDDEN_SHOWN = "(set; value not shown)"
"""What a report shows for an unmanaged variable: it may hold a secret."""


def compare_container(want: DesiredDeployment, have: ObservedDeployment,
                      container: ObservedContainer, items: ItemCollector) -> None:
    """Every check of the engine container, in report order."""
    _compare_container_state(have, container, items)
    _compare_gate(have, container, items)
    adopted = have.adopted_release is not None and \
        container.release_label == have.adopted_release
    _compare_command(want, container, items, adopted=adopted)
    _compare_env(want, have, container, items)
    if not adopted and want.service_known:
        # Started by hand: its labels were set then and cannot change while it runs.
        _compare_labels(want, container, items)
    _compare_image(want, container, items)
    _compare_patch_set(want, container, items)


def _compare_container_state(have: ObservedDeployment, container: ObservedContainer,
                             items: ItemCollector) -> None:
    if container.status == "restarting":
        items.add(DriftKind.CONTAINER_RESTARTING, "running",
                  f"restarting ({container.restart_count} restarts)",
                  f"container {container.name} is crash-looping ({container.restart_count} "
                  f"restarts, last exit {container.exit_code}); read its log")
    elif not container.running:
        items.add(DriftKind.CONTAINER_STOPPED, "running", container.state_phrase,
                  f"container {container.name} is {container.state_phrase}; start it "
                  "or deploy again")
    elif container.restart_count > 0:
        items.add(DriftKind.CONTAINER_RESTARTING, 0, container.restart_count,
                  f"container {container.name} runs but Docker restarted it "
                  f"{container.restart_count} time(s) since it was created (it crashed)")
    if have.other_containers:
        items.add(DriftKind.CONTAINER_STOPPED, 1, 1 + have.other_containers,
                  f"{have.other_containers} more container(s) belong to the compose project "
                  "(left-overs of a hand-made change?)", "containers")


def ungated_why(have: ObservedDeployment, container: ObservedContainer) -> str | None:
    """How the running ``container`` misses its gate mark, in the shared phrase
    (:func:`~servefleet.core.observed.serving.ungated_phrase`), or ``None``: it passed, is
    not running, or the mark was not read (it is read with the deployment's folder: none
    without the folder)."""
    if not have.present or not container.running:
        return None
    miss = gate_miss(container.release_id, container.started_at, have.gated_release,
                     have.gated_started_at)
    if miss is None:
        return None
    return ungated_phrase(miss, container.release_id, have.gated_release,
                          container.restart_count)


def _compare_gate(have: ObservedDeployment, container: ObservedContainer,
                  items: ItemCollector) -> None:
    """A running engine whose container is not the one the gate mark names."""
    why = ungated_why(have, container)
    if why is None:
        return
    items.add(DriftKind.UNGATED_ENGINE, "gated", "ungated",
              f"{why}; run servefleet deploy to put it through the gate", "gated")


def _compare_command(want: DesiredDeployment, container: ObservedContainer,
                     items: ItemCollector, *, adopted: bool = False) -> None:
    if want.command is None or container.command is None:
        return
    if tuple(container.command) == tuple(want.command):
        return
    if adopted and runs_engine_flags(container.command, want.command):
        # Written by hand in another order: the same flags, as the adoption compared them.
        return
    missing = [a for a in want.command if a not in container.command]
    added = [a for a in container.command if a not in want.command]
    detail = []
    if missing:
        detail.append("missing " + " ".join(missing))
    if added:
        detail.append("added " + " ".join(added))
    items.add(DriftKind.COMMAND, list(want.command), list(container.command),
              f"container {container.name} runs another command line than the release "
              f"({'; '.join(detail) or 'same arguments in another order'})")


def _compare_env(want: DesiredDeployment, have: ObservedDeployment,
                 container: ObservedContainer, items: ItemCollector) -> None:
    env = container.env
    for name, value in sorted(want.env.items()):
        got = env.get(name)
        if got is None:
            items.add(DriftKind.ENV, value, None,
                      f"environment variable {name} is not set in the container", name)
        elif got.sha256 != secret_digest(value):
            shown = got.value if got.value is not None else HIDDEN_SHOWN
            items.add(DriftKind.ENV, value, shown,
                      f"environment variable {name} is {shown!r} in the container, the "
                      f"release sets {value!r}", name)
    for name, digest in sorted(want.secret_env.items()):
        got = env.get(name)
        reference = digest if digest is not None else have.release_secret_digests.get(name)
        if got is None:
            items.add(DriftKind.ENV, SECRET_SHOWN, None,
                      f"secret variable {name} is not set in the container", name)
        elif reference is not None and got.sha256 != reference:
            against = "git's value" if digest is not None else f"the release's {ENV_FILE}"
            items.add(DriftKind.ENV, SECRET_SHOWN, f"{SECRET_SHOWN} differs",
                      f"secret variable {name} in the container differs from {against} "
                      "(compared by sha256)", name)
    if not want.service_known:
        return  # what the compose files set is not known: no variable is "by hand"
    managed = set(want.env) | set(want.secret_env)
    for name, got in sorted(env.items()):
        if name in managed or container.image_env.get(name) == got.sha256:
            continue
        items.add(DriftKind.ENV, None, HIDDEN_SHOWN,
                  f"environment variable {name} is set in the container but not by the "
                  "release (added by hand?)", name)


def _compare_labels(want: DesiredDeployment, container: ObservedContainer,
                    items: ItemCollector) -> None:
    labels = container.labels
    for name, value in sorted(want.labels.items()):
        got = labels.get(name)
        if got != value:
            what = "missing" if got is None else f"{got!r}"
            items.add(DriftKind.LABELS, value, got,
                      f"label {name} is {what} on the container, the release sets {value!r}",
                      name)
    for name, got in sorted(labels.items()):
        if name in want.labels or name.startswith(COMPOSE_LABEL_PREFIX):
            continue
        if container.image_labels.get(name) == got:
            continue
        items.add(DriftKind.LABELS, None, got,
                  f"label {name}={got!r} is on the container but not in the release", name)


def _compare_image(want: DesiredDeployment, container: ObservedContainer,
                   items: ItemCollector) -> None:
    image = want.image
    have_id = container.image_id
    if image.image_id is not None and have_id is not None and have_id != image.image_id:
        items.add(DriftKind.IMAGE_DIGEST, image.image_id, have_id,
                  f"container {container.name} runs image {short_digest(have_id)}, the "
                  f"deployment started with {short_digest(image.image_id)} "
                  f"({container.image_ref or image.ref}: a tag that moved, or an image rebuilt "
                  "by hand)", "image_id")
    elif image.repo_digest is not None and container.repo_digests and not any(
            d.endswith("@" + image.repo_digest) for d in container.repo_digests):
        items.add(DriftKind.IMAGE_DIGEST, image.repo_digest, list(container.repo_digests),
                  f"container {container.name} runs an image whose digest is not the pinned "
                  f"{short_digest(image.repo_digest)} (its tag moved); deploy again to pull the "
                  "pinned digest", "repo_digest")
    if container.ref_image_id is not None and have_id is not None and \
            container.ref_image_id != have_id:
        items.add(DriftKind.IMAGE_DIGEST, have_id, container.ref_image_id,
                  f"{container.image_ref} now points at image "
                  f"{short_digest(container.ref_image_id)}, the container runs "
                  f"{short_digest(have_id)}: the tag moved under it (the next restart would run "
                  "the other image)", "image_ref")


def _compare_patch_set(want: DesiredDeployment, container: ObservedContainer,
                       items: ItemCollector) -> None:
    if not container.patch_marker_checked:
        return
    want_hash, have_hash = want.patch_marker_sha256, container.patch_marker_sha256
    if want_hash == have_hash:
        return
    if want_hash is None:
        message = ("the container carries an overlay marker, but the release builds no "
                   "overlay (an image patched by hand?)")
    elif have_hash is None:
        message = ("the overlay marker is missing from the container: it runs an image "
                   "without the release's patches")
    else:
        message = "the container's overlay marker lists another patch set than the release"
    items.add(DriftKind.PATCH_SET, want_hash, have_hash, message, "patches.json")
