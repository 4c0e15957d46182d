"""KV-pool baselines: what each profile's pool was on a node, and whether a boot moved it (pure).

The KV pool an engine allocates is a function of the profile, the image and the GPU. When
the same profile on the same node suddenly gets a different pool, something changed that
nobody asked for: the operators' notes saw a pool jump from 174k to 368k tokens after an
image update, and a pool shrinks when something else holds device memory. So the pool of
the first healthy boot of a profile on a node is kept as that node's *baseline* for the
profile, and later boots are compared with it.

Where baselines live: on the node, in ``<base_dir>/.servefleet-baselines.json`` (one file
per node, beside the node lock), so that every operator machine sees the same baselines.
They are keyed by profile **name**, and each one records the profile identity, engine
version and image it was measured with. Keying by name, not identity, is deliberate: an
image update changes the identity, and that is exactly the change whose effect on the pool
should be flagged. What the verdict is:

* same identity and within ``health.kv_tolerance`` (default 5%): pass;
* same identity and beyond the tolerance: **fail** (nothing in git changed, the pool did);
* a different identity (new image, engine or flags) and beyond the tolerance: **warn**,
  naming what changed; the new pool becomes the baseline once the deployment is healthy.

vLLM's pool is in tokens (``GPU KV cache size``); llama.cpp's is the KV buffer in MiB.

With speculative decoding the pool is expected *smaller* than the same profile without it
(:attr:`ExpectedHealth.kv_smaller_than` names that profile's identity); when the node holds
a baseline of that profile, the two are compared.

The same file keeps, per deployment, the image ID its current release booted from
(:class:`ImageRecord`): the rollout's health gate writes it after every healthy boot, and
the drift check compares the running container with it (a tag that moved under a
re-created container). The health checks are the only writer of this file; the drift check
only reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servefleet.core.bootlog.model import BootFacts, Evidence
from servefleet.core.engines import ENGINES
from servefleet.core.engines.vllm import VLLM
from servefleet.core.health_table import CheckRow, Verdict
from servefleet.core.models import Profile

BASELINE_FILE = ".servefleet-baselines.json"
"""File name under the node's ``base_dir``."""
SCHEMA = 1
EVIDENCE_KEYS = {"tokens": "kv_cache_tokens", "MiB": "kv_cache_mib"}


class Baseline(BaseModel):
    """The KV pool one profile got on one node, and what it was measured with."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    profile: str
    """Profile name."""
    profile_identity: str
    """Identity of the profile when measured (see ``profile_identity``)."""
    engine: str
    """``vllm`` or ``llama.cpp``."""
    engine_version: str
    """Engine version of the profile when measured."""
    image: str
    """Pinned image (``repository:tag@sha256:…``) of the profile when measured."""
    kv_pool: float = Field(gt=0)
    """The pool: tokens (vLLM) or MiB of KV buffer (llama.cpp)."""
    unit: str
    """``tokens`` or ``MiB``."""
    recorded_at: str
    """When it was measured (ISO 8601, UTC)."""
    release_id: str | None = None
    """Release that booted with this pool."""
    deployment: str | None = None
    """Deployment that booted with this pool."""


class ImageRecord(BaseModel):
    """The image a deployment's release booted from when its health gate passed."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    release_id: str
    """Release that booted."""
    image_id: str
    """Image ID (``sha256:…``) its container ran."""
    recorded_at: str
    """When the gate passed (ISO 8601, UTC)."""


class BaselineBook(BaseModel):
    """Every baseline of one node: the content of :data:`BASELINE_FILE`."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    schema_version: int = SCHEMA
    """File format version."""
    baselines: dict[str, Baseline] = Field(default_factory=dict)
    """Baselines by profile name."""
    images: dict[str, ImageRecord] = Field(default_factory=dict)
    """The image of each deployment's last release that passed its health gate, by
    deployment name."""

    def by_identity(self, identity: str) -> Baseline | None:
        """The baseline measured with profile identity ``identity``, if any."""
        return next((b for b in self.baselines.values() if b.profile_identity == identity), None)

    def to_text(self) -> str:
        """The file content (stable key order)."""
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def parse_book(text: str) -> tuple[BaselineBook, str | None]:
    """The book in ``text`` (empty: no baselines yet) and a problem, if the file is not a
    book (then it is treated as empty and rewritten at the next record)."""
    if not text.strip():
        return BaselineBook(), None
    try:
        return book_from_json(json.loads(text))
    except ValueError as error:
        return BaselineBook(), _unreadable(error)


def book_from_json(data: Any) -> tuple[BaselineBook, str | None]:
    """The book in already decoded JSON (``None``: no file), as :func:`parse_book`."""
    if data is None:
        return BaselineBook(), None
    try:
        return BaselineBook.model_validate(data), None
    except ValidationError as error:
        return BaselineBook(), _unreadable(error)


def _unreadable(error: Exception) -> str:
    first = str(error).splitlines()[0]
    return f"{BASELINE_FILE} is unreadable ({first}); starting afresh"


def kv_pool(facts: BootFacts) -> tuple[float, str] | None:
    """The pool a boot log states: ``(tokens, "tokens")`` for vLLM, ``(MiB, "MiB")`` for
    llama.cpp; ``None`` when the log does not state it."""
    # A log no engine here wrote (sglang) states its pool in tokens, as vLLM's does.
    return ENGINES.get(str(facts.engine), VLLM).kv_pool(facts)


def _number(value: float, unit: str) -> str:
    return f"{value:,.0f}" if unit == "tokens" else f"{value:,.2f}"


def _amount(value: float, unit: str) -> str:
    return f"{_number(value, unit)} {unit}"


def relative_change(now: float, before: float) -> float:
    """``now`` against ``before`` as a fraction (``-0.3``: 30% smaller)."""
    return (now - before) / before if before else float("inf")


def _day(stamp: str) -> str:
    return stamp[:10]


def _evidence(facts: BootFacts, unit: str) -> tuple[str, ...]:
    items: list[Evidence] = list(facts.evidence.get(EVIDENCE_KEYS[unit], ()))
    return tuple(f"L{e.line}: {e.text}" for e in items[:3])


def what_changed(baseline: Baseline, profile: Profile, identity: str) -> str | None:
    """What differs between the profile now and when the baseline was measured; ``None``
    when nothing does."""
    if baseline.profile_identity == identity:
        return None
    if baseline.engine_version != profile.engine_version:
        return f"engine {baseline.engine_version} → {profile.engine_version}"
    if baseline.image != profile.image.pinned:
        return f"image {baseline.image} → {profile.image.pinned}"
    return "profile settings changed"


def check_against_baseline(profile: Profile, identity: str, facts: BootFacts,
                           book: BaselineBook) -> CheckRow | None:
    """The pool of this boot against the node's baseline of the profile (see the module
    docstring for the verdicts); ``None`` when the log states no pool."""
    measured = kv_pool(facts)
    if measured is None:
        return None
    value, unit = measured
    tolerance = profile.health.kv_tolerance
    baseline = book.baselines.get(profile.name)
    fact = "KV pool vs baseline"
    evidence = _evidence(facts, unit)
    if baseline is None or baseline.unit != unit:
        return CheckRow(fact, "-", f"{_amount(value, unit)} (no baseline on this node yet)",
                        "info", evidence)
    change = relative_change(value, baseline.kv_pool)
    expected = (f"{_amount(baseline.kv_pool, unit)} ±{tolerance:.0%} "
                f"(baseline of {_day(baseline.recorded_at)})")
    if abs(change) <= tolerance:
        return CheckRow(fact, expected, f"{_amount(value, unit)} ({change:+.1%})", "pass",
                        evidence)
    story = (f"KV pool {_number(baseline.kv_pool, unit)} → {_amount(value, unit)} "
             f"({change:+.0%}) against the baseline of "
             f"{_day(baseline.recorded_at)}")
    changed = what_changed(baseline, profile, identity)
    if changed is None:
        return CheckRow(fact, expected, story, "fail",
                        (*evidence, f"baseline: release {baseline.release_id or '-'}, "
                         f"recorded {baseline.recorded_at}; the profile is unchanged since"))
    return CheckRow(fact, expected, f"{story}; {changed}", "warn",
                    (*evidence, f"the profile changed since the baseline ({changed}): the new "
                     "pool becomes the baseline once the deployment is healthy"))


def check_smaller_than(kv_smaller_than: str | None, facts: BootFacts,
                       book: BaselineBook) -> CheckRow | None:
    """With speculative decoding: the pool is smaller than the node's baseline of the same
    profile without it (when the node has one)."""
    if kv_smaller_than is None:
        return None
    measured = kv_pool(facts)
    other = book.by_identity(kv_smaller_than)
    if measured is None or other is None or other.unit != measured[1]:
        return None
    value, unit = measured
    change = relative_change(value, other.kv_pool)
    expected = (f"< {_amount(other.kv_pool, unit)} ({other.profile} on this node, "
                f"{_day(other.recorded_at)})")
    verdict: Verdict = "pass" if value < other.kv_pool else "fail"
    evidence = _evidence(facts, unit)
    if verdict == "fail":
        evidence = (*evidence, "speculative decoding needs KV for its draft layers: a pool "
                    "that is not smaller suggests the drafter is not loaded")
    return CheckRow("KV pool vs without speculation", expected,
                    f"{_amount(value, unit)} ({change:+.1%})", verdict, evidence)


def record(book: BaselineBook, profile: Profile, identity: str, facts: BootFacts, *,
           now: datetime, release_id: str | None, deployment: str | None,
           force: bool = False) -> BaselineBook | None:
    """The book with this boot as the profile's baseline, or ``None`` when nothing needs
    writing: a baseline of the same identity is kept (so that slow drift is measured against
    the first healthy boot), unless ``force`` (the operator accepts the new pool)."""
    measured = kv_pool(facts)
    if measured is None:
        return None
    current = book.baselines.get(profile.name)
    if current is not None and current.profile_identity == identity and \
            current.unit == measured[1] and not force:
        return None
    entry = Baseline(profile=profile.name, profile_identity=identity, engine=profile.engine,
                     engine_version=profile.engine_version, image=profile.image.pinned,
                     kv_pool=measured[0], unit=measured[1],
                     recorded_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"), release_id=release_id,
                     deployment=deployment)
    baselines: Mapping[str, Baseline] = {**book.baselines, profile.name: entry}
    return book.model_copy(update={"baselines": dict(sorted(baselines.items()))})


def record_image(book: BaselineBook, deployment: str, release_id: str, image_id: str, *,
                 now: datetime) -> BaselineBook | None:
    """The book with ``image_id`` as the image of ``deployment``'s release ``release_id``, or
    ``None`` when it says so already."""
    current = book.images.get(deployment)
    if current is not None and (current.release_id, current.image_id) == (release_id, image_id):
        return None
    entry = ImageRecord(release_id=release_id, image_id=image_id,
                        recorded_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    images = {**book.images, deployment: entry}
    return book.model_copy(update={"images": dict(sorted(images.items()))})


def book_json(book: BaselineBook) -> dict[str, Any]:
    """JSON-ready form."""
    return book.model_dump(mode="json")
