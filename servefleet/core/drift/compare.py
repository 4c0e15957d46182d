"""Drift's comparison: every difference between what git wants on a node and what it has."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from servefleet.core.baselines import BASELINE_FILE, relative_change
from servefleet.core.drift.container import compare_container
from servefleet.core.drift.desired import DesiredDeployment, DesiredNode
from servefleet.core.drift.items import DriftItem, DriftKind, ItemCollector, short_digest
from servefleet.core.drift.observation import NodeObservation
from servefleet.core.gpu import compare_with_inventory
from servefleet.core.models.profile import version_tuple
from servefleet.core.observed import MANIFEST_FILE, BootSummary, ObservedDeployment
from servefleet.core.release_diff import (
    Absent,
    CurrentDiff,
    Difference,
    FilesDiff,
    Seen,
    Wanted,
    find,
    release_diff,
)


def engine_version_matches(expected: str, observed: str) -> bool:
    """Does the version an engine reports match the profile's pin?

    vLLM reports ``0.21.0`` or ``0.19.1rc1.dev328+g18013df6a`` (a local ``+`` part the pin
    may leave out); llama.cpp's ``build_info`` is ``b8680-1a2b3c4`` for the pin ``b8680``.
    """
    want, have = expected.strip().lstrip("v"), observed.strip().lstrip("v")
    if have == want:
        return True
    if have.startswith(want + "+") or have.startswith(want + "-"):
        return True
    # llama.cpp pins may be written as a bare number; builds report b<N>.
    return bool(re.fullmatch(r"b?\d+", want)) and version_tuple(have.split("-")[0]) == \
        version_tuple(want)


def _compare_gpu(desired: DesiredNode, observed: NodeObservation, items: ItemCollector) -> None:
    if desired.gpu is None:
        return
    if observed.gpu is None:
        items.add(DriftKind.ERROR, None, None,
                  f"GPU probe gave no reading: {observed.gpu_error or 'no reason given'}",
                  "gpu")
        return
    for mismatch in compare_with_inventory(observed.gpu, desired.gpu):
        if mismatch.severity != "error":
            continue  # "could not be read" warnings: not a difference
        kind = {"driver_version": DriftKind.DRIVER,
                "cuda_version": DriftKind.CUDA}.get(mismatch.field, DriftKind.GPU)
        items.add(kind, mismatch.expected, mismatch.observed, mismatch.message, mismatch.field)


def _compare_release(want: DesiredDeployment, have: ObservedDeployment,
                     diffs: tuple[Difference, ...], items: ItemCollector) -> None:
    if find(diffs, Absent) is not None:
        items.add(DriftKind.RELEASE, want.release_id, None,
                  "not deployed: the deployment's folder does not exist on the node; deploy it")
        return
    current = find(diffs, CurrentDiff)
    if current is not None and current.have is None:
        items.add(DriftKind.RELEASE, want.release_id, None,
                  "no current release (the 'current' link is missing); deploy again")
    elif current is not None:
        profile = (have.manifest or {}).get("profile")
        was = f" (profile {profile})" if isinstance(profile, str) else ""
        items.add(DriftKind.RELEASE, want.release_id, current.have,
                  f"runs release {current.have}{was}, git renders "
                  f"{want.release_id} (profile {want.profile}); deploy to converge, or "
                  "roll back in git")
    elif want.release_id is None:
        # No release id to compare (a secret value is not available here): the profile
        # the current release was rendered from is the next best thing.
        identity = (have.manifest or {}).get("profile_identity")
        if identity != want.profile_identity:
            items.add(DriftKind.RELEASE, short_digest("sha256:" + want.profile_identity),
                      short_digest(f"sha256:{identity}") if isinstance(identity, str) else None,
                      f"release {have.current_release} was rendered from another profile "
                      f"than {want.profile} in git (release id not computed: a secret value "
                      "is not available here)")


def _compare_weights(have: ObservedDeployment, items: ItemCollector) -> None:
    """The pinned weights the running release was staged with are still in the cache: the
    engine boots again (a restart, a rollback) with the hub offline only if they are."""
    staged = (have.manifest or {}).get("weights")
    facts = have.weights
    if not isinstance(staged, dict) or facts is None:
        return
    pin = str(staged.get("pin"))
    if not facts.get("present"):
        others = [str(r) for r in facts.get("revisions") or []]
        held = f" (the cache holds {', '.join(r[:12] for r in others)})" if others else ""
        items.add(DriftKind.WEIGHTS, pin, ", ".join(others) or None,
                  f"the node holds no {pin}{held}: the engine cannot boot again with the hub "
                  "offline; deploy again to stage it")
    elif not facts.get("verified"):
        items.add(DriftKind.WEIGHTS, pin, "unverified",
                  f"{pin} is in the cache but its verification record is missing; deploy "
                  "again to verify it")


def _manifest_hashes(manifest: Mapping[str, Any] | None) -> dict[str, str] | None:
    files = (manifest or {}).get("files")
    if not isinstance(files, dict):
        return None
    hashes: dict[str, str] = {}
    for path, entry in files.items():
        digest = entry.get("sha256") if isinstance(entry, dict) else entry
        if isinstance(digest, str):
            hashes[str(path)] = digest
    return hashes


def _compare_files(want: DesiredDeployment, have: ObservedDeployment,
                   recorded: dict[str, str] | None, diffs: tuple[Difference, ...],
                   items: ItemCollector) -> None:
    if not have.present or have.current_release is None:
        return
    if have.current_release != want.release_id and recorded is None:
        # Not git's release, and no record of what it was deployed with: the comparer had
        # nothing to check its files against.
        items.add(DriftKind.ERROR, None, None,
                  f"release {have.current_release} has no readable {MANIFEST_FILE}; its "
                  "files could not be checked", MANIFEST_FILE)
        return
    files = find(diffs, FilesDiff)
    if files is None:
        return
    expected, source = ((want.file_hashes, "git") if files.against == "wanted"
                        else (recorded or {}, MANIFEST_FILE))
    for path in files.paths:
        want_hash, have_hash = expected.get(path), (have.file_hashes or {}).get(path)
        if have_hash is None:
            message = f"{path} is missing from release {have.current_release}"
        elif want_hash is None:
            message = f"{path} was added to release {have.current_release} by hand"
        else:
            message = (f"{path} of release {have.current_release} was edited on the node "
                       f"(sha256 {have_hash[:12]}…, {source} says {want_hash[:12]}…); "
                       "deploy again to restore it, or move the change into git")
        items.add(DriftKind.FILE_HASH, want_hash, have_hash, message, path)


def _pool(value: float, unit: str) -> int | float:
    return round(value) if unit == "tokens" else value


def _compare_kv_pool(want: DesiredDeployment, boot: BootSummary, items: ItemCollector) -> None:
    baseline = want.kv_baseline
    if baseline is None:
        return
    now = boot.kv_cache_tokens if baseline.unit == "tokens" else boot.kv_cache_mib
    if now is None:
        return
    change = relative_change(now, baseline.kv_pool)
    if abs(change) <= want.kv_tolerance:
        return
    unit, base = baseline.unit, _pool(baseline.kv_pool, baseline.unit)
    items.add(DriftKind.KV_POOL, base, _pool(now, unit),
              f"the latest boot's KV pool is {_pool(now, unit):,} {unit}, the baseline "
              f"({BASELINE_FILE}, recorded {baseline.recorded_at}) is {base:,} "
              f"({change:+.1%}, tolerance ±{want.kv_tolerance:.0%})")


def _compare_engine(want: DesiredDeployment, have: ObservedDeployment,
                    items: ItemCollector) -> None:
    if have.engine_version is not None:
        if not engine_version_matches(want.engine_version, have.engine_version):
            items.add(DriftKind.ENGINE_VERSION, want.engine_version, have.engine_version,
                      f"the engine reports version {have.engine_version}, the profile pins "
                      f"{want.engine_version}")
    elif have.engine_version_error is not None:
        items.add(DriftKind.ENGINE_VERSION, want.engine_version, None,
                  f"the engine did not tell its version: {have.engine_version_error}")
    boot = have.boot
    if boot is None:
        return
    _compare_kv_pool(want, boot, items)
    if want.cudagraph_mode is not None and boot.cudagraph_mode is not None and \
            boot.cudagraph_mode.upper() != want.cudagraph_mode.upper():
        items.add(DriftKind.CUDAGRAPH_MODE, want.cudagraph_mode, boot.cudagraph_mode,
                  f"the latest boot runs CUDA graphs in mode {boot.cudagraph_mode}, expected "
                  f"{want.cudagraph_mode}")


def _compare_deployment(want: DesiredDeployment, have: ObservedDeployment | None,
                        node: str) -> list[DriftItem]:
    items = ItemCollector(node, want.deployment)
    if have is None:
        items.add(DriftKind.ERROR, None, None, "the node's answer left this deployment out")
        return items.found
    recorded = _manifest_hashes(have.manifest)
    diffs = release_diff(
        Wanted(want.release_id, want.file_hashes),
        Seen(present=have.present, current_release=have.current_release,
             file_hashes=have.file_hashes, recorded_hashes=recorded))
    _compare_release(want, have, diffs, items)
    _compare_files(want, have, recorded, diffs, items)
    _compare_weights(have, items)
    if have.docker_error is not None:
        items.add(DriftKind.ERROR, None, None,
                  f"containers could not be listed: {have.docker_error}", "docker")
        return items.found
    if have.compose_error is not None:
        items.add(DriftKind.ERROR, None, None,
                  f"docker compose config failed on the node ({have.compose_error}): the "
                  "container's command, environment and labels were not compared", "compose")
    container = have.engine_container
    if container is None:
        items.add(DriftKind.CONTAINER_MISSING, "running", None,
                  "the deployment has no container; deploy again")
        return items.found
    compare_container(want, have, container, items)
    if container.running:
        _compare_engine(want, have, items)
    return items.found


def compare(desired: DesiredNode, observed: NodeObservation) -> list[DriftItem]:
    """Every difference between what git wants on a node and what the node has.

    An unreachable node gives one ``unreachable`` item and nothing else. Checks whose
    facts are missing from ``observed`` are skipped or reported as ``error`` items.
    """
    node_items = ItemCollector(desired.node, None)
    if observed.unreachable is not None:
        reason = observed.unreachable.removeprefix(f"{desired.node}: ")
        node_items.add(DriftKind.UNREACHABLE, "reachable", None, reason)
        return node_items.found
    for error in observed.errors:
        node_items.add(DriftKind.ERROR, None, None, error)
    _compare_gpu(desired, observed, node_items)
    found = list(node_items.found)
    for want in desired.deployments:
        found.extend(_compare_deployment(want, observed.deployments.get(want.deployment),
                                         desired.node))
    return found
