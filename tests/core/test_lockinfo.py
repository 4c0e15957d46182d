"""The node lock as data, and the repair lines a plan makes of it."""

from __future__ import annotations

from servefleet.core.lockinfo import parse_lock
from servefleet.core.observed import RELEASE_LABEL, ObservedContainer, ObservedDeployment
from servefleet.core.plan import recovery_notes

OWNER = "ops@ctl pid=4242 since=2026-11-24T15:00:00Z op=deploy id=3f9c1a2b7d4e"


def test_owner_and_state_lines() -> None:
    lock = parse_lock(f"{OWNER}\nphase=boot deployment=main release=r2 at=2026-11-24T15:01:10Z\n")
    assert lock is not None
    assert (lock.who, lock.pid, lock.operation, lock.lock_id) == \
        ("ops@ctl", 4242, "deploy", "3f9c1a2b7d4e")
    assert (lock.phase, lock.deployment, lock.release) == ("boot", "main", "r2")
    assert lock.where() == "during the boot gate at 2026-11-24T15:01:10Z"
    assert lock.engine_ungated and lock.abandoned is None


def test_no_lock_and_an_old_lock_without_id() -> None:
    assert parse_lock(None) is None and parse_lock("\n") is None
    old = parse_lock("alice@a pid=1 since=T op=deploy")
    assert old is not None and old.lock_id is None and old.phase is None
    assert old.where() == "before its first phase (lock taken T)"


def test_abandoned_lock() -> None:
    lock = parse_lock(f"{OWNER}\nphase=stop deployment=main release=r2 at=T2 "
                      "abandoned=second-signal-during-stop")
    assert lock is not None and lock.abandoned == "second-signal-during-stop"
    assert not lock.engine_ungated


def running(release: str, started: str) -> ObservedContainer:
    return ObservedContainer(name="servefleet-main-engine-1", status="running",
                             labels={RELEASE_LABEL: release}, started_at=started)


def test_an_ungated_engine_is_a_repair_even_without_a_lock() -> None:
    dep = ObservedDeployment(name="main", current_release="r1", releases=("r1", "r2"),
                             containers=(running("r2", "S2"),), gated_release="r1",
                             gated_started_at="S1")
    assert dep.ungated
    assert recovery_notes(None, dep, "main") == (
        "repair: engine r2 ungated (the last gate passed for r1)",)
    restarted = dep.model_copy(update={"containers": (running("r1", "S3"),)})
    assert restarted.ungated
    gated = dep.model_copy(update={"containers": (running("r1", "S1"),)})
    assert not gated.ungated and recovery_notes(None, gated, "main") == ()


def test_a_lock_left_during_the_boot_gate_names_the_ungated_engine() -> None:
    lock = parse_lock(f"{OWNER}\nphase=boot deployment=main release=r2 at=T1")
    dep = ObservedDeployment(name="main", current_release="r1", releases=("r1", "r2"),
                             containers=(running("r2", "S2"),))
    assert recovery_notes(lock, dep, "main") == (
        "repair: interrupted during the boot gate at T1, or still running "
        "(lock 3f9c1a2b7d4e held by ops@ctl); engine r2 ungated",)
    # Another deployment's lock line is not this one's repair.
    assert recovery_notes(lock, None, "other") == ()
