"""The settings a measured tune searches: one ordered list of values per knob, the lattice
they span, and the profile overlay a point of it makes.

The default values bracket the profile's own setting (its value, halved and doubled: the
steps operators take by hand in the seeds), so the profile itself is always the lattice's
centre and the control.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any, get_args

from servefleet.core.engines.vllm import vllm_settings
from servefleet.core.models import Profile
from servefleet.core.models.profile import KvCacheDtype

KNOBS = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
         "num_speculative_tokens", "kv_cache_dtype")
"""The settings a tune may search, in the order the search tries them."""

KV_DTYPE_STEPS = ("auto", "fp8_e4m3")
"""The KV-cache dtypes searched around a profile that sets one, largest element first (one
step up halves the bytes a token's KV takes on a 16-bit model: more sequences fit)."""

Point = tuple[tuple[str, Any], ...]
"""One candidate: ``(knob, value)`` pairs in :data:`KNOBS` order (hashable, for records)."""


@dataclass(frozen=True)
class Knob:
    """One setting and the values searched, in increasing order."""

    name: str
    values: tuple[Any, ...]

    def index(self, value: Any) -> int:
        """The position of ``value`` among :attr:`values`."""
        return self.values.index(value)


@dataclass(frozen=True)
class Space:
    """The lattice: every combination of the knobs' values."""

    knobs: tuple[Knob, ...]
    origin: Point
    """The profile's own settings (the control)."""

    def points(self) -> Iterator[Point]:
        """Every point, in grid order (the first knob slowest)."""
        for values in product(*(k.values for k in self.knobs)):
            yield tuple(zip((k.name for k in self.knobs), values, strict=True))

    @property
    def size(self) -> int:
        """How many points the grid has."""
        count = 1
        for knob in self.knobs:
            count *= len(knob.values)
        return count

    def neighbours(self, point: Point) -> Iterator[tuple[str, int, Point]]:
        """The points one step away along one knob: ``(knob, direction, point)``, knobs in
        order, each upwards first (more sequences and bigger batches first: what the
        planner's pool allows is what a node has to give)."""
        values = dict(point)
        for knob in self.knobs:
            at = knob.index(values[knob.name])
            for step in (1, -1):
                if 0 <= at + step < len(knob.values):
                    moved = {**values, knob.name: knob.values[at + step]}
                    yield knob.name, step, tuple((k.name, moved[k.name]) for k in self.knobs)


    def diagonals(self, point: Point) -> Iterator[tuple[str, int, Point]]:
        """The points one step away along two knobs at once (what the search polls when no
        neighbour along one knob is better: a refused or failed point in one direction
        must not hide the points around it)."""
        values = dict(point)
        names = [k.name for k in self.knobs]
        for i, first in enumerate(self.knobs):
            for second in self.knobs[i + 1:]:
                for a in (1, -1):
                    for b in (1, -1):
                        at, bt = first.index(values[first.name]) + a, \
                            second.index(values[second.name]) + b
                        if 0 <= at < len(first.values) and 0 <= bt < len(second.values):
                            moved = {**values, first.name: first.values[at],
                                     second.name: second.values[bt]}
                            yield f"{first.name}+{second.name}", a * 2 + b, tuple(
                                (n, moved[n]) for n in names)


def _bracket(value: int, low: int, high: int) -> tuple[int, ...]:
    return tuple(sorted({max(low, min(high, v)) for v in (value // 2, value, value * 2)}))


def default_space(profile: Profile, only: Sequence[str] | None = None,
                  values: Mapping[str, Sequence[Any]] | None = None) -> Space:
    """The lattice around ``profile``'s settings: ``max_num_seqs`` and
    ``max_num_batched_tokens`` halved and doubled, ``gpu_memory_utilization`` ±0.05 (on a
    GPU profile that sets it), the speculative tokens ±1 (on a profile that drafts), the KV
    dtype (on a profile that sets one: its own, and ``auto`` or ``fp8_e4m3``, whichever it
    is not, as :data:`KV_DTYPE_STEPS` orders them).
    ``only`` keeps those knobs; ``values`` replaces a knob's values (the profile's own
    value is added when missing, so the control is always a point)."""
    settings = vllm_settings(profile)
    seqs = settings.max_num_seqs or 256
    batched = settings.max_num_batched_tokens or max(2048, seqs)
    origin: dict[str, Any] = {"max_num_seqs": seqs, "max_num_batched_tokens": batched}
    knobs: dict[str, tuple[Any, ...]] = {
        "max_num_seqs": _bracket(seqs, 1, 1024),
        "max_num_batched_tokens": _bracket(batched, 256, 1 << 17),
    }
    util = settings.gpu_memory_utilization
    if util is not None:
        origin["gpu_memory_utilization"] = util
        knobs["gpu_memory_utilization"] = tuple(sorted(
            {round(u, 2) for u in (util - 0.05, util, util + 0.05) if 0.05 <= u <= 0.95}))
    spec = settings.speculative
    if spec is not None:
        n = spec.num_speculative_tokens
        origin["num_speculative_tokens"] = n
        knobs["num_speculative_tokens"] = tuple(v for v in (n - 1, n, n + 1) if 1 <= v <= 16)
    kv = settings.kv_cache_dtype
    if kv is not None:
        origin["kv_cache_dtype"] = kv
        knobs["kv_cache_dtype"] = _kv_steps(kv)
    for name, given in (values or {}).items():
        if name not in knobs:
            raise ValueError(f"{name}: not a knob of this profile (it has: "
                             f"{', '.join(knobs)})")
        knobs[name] = (_kv_steps(origin[name], given) if name == "kv_cache_dtype"
                       else tuple(sorted({*given, origin[name]})))
    chosen = [k for k in KNOBS if k in knobs and (not only or k in only)]
    if only:
        unknown = [k for k in only if k not in knobs]
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a knob of this profile (it has: "
                             f"{', '.join(knobs)})")
    return Space(tuple(Knob(k, knobs[k]) for k in chosen),
                 tuple((k, origin[k]) for k in chosen))


def _kv_steps(own: str, given: Sequence[Any] = ()) -> tuple[str, ...]:
    """KV dtypes in :data:`KV_DTYPE_STEPS` order (others after them, as given), the
    profile's own always among them; a ``ValueError`` for a name vLLM does not take."""
    unknown = [str(d) for d in given if str(d) not in get_args(KvCacheDtype)]
    if unknown:
        raise ValueError(f"kv_cache_dtype {', '.join(unknown)}: not a KV-cache dtype (one of "
                         f"{', '.join(get_args(KvCacheDtype))})")
    wanted = {own, *map(str, given)} if given else {own, *KV_DTYPE_STEPS}
    known = [d for d in KV_DTYPE_STEPS if d in wanted]
    return tuple(known + [d for d in dict.fromkeys([own, *map(str, given)]) if d not in known])


def label(point: Point) -> str:
    """``seqs=32 batched=16384 …``: a point in a table's width."""
    short = {"max_num_seqs": "seqs", "max_num_batched_tokens": "batched",
             "gpu_memory_utilization": "util", "num_speculative_tokens": "spec",
             "kv_cache_dtype": "kv"}
    return " ".join(f"{short[k]}={v}" for k, v in point)


def vllm_overlay(profile: Profile, point: Point) -> dict[str, Any]:
    """The ``vllm:`` block of the overlay profile that sets ``point`` on ``profile``."""
    settings = vllm_settings(profile)
    block: dict[str, Any] = {}
    for name, value in point:
        if name == "num_speculative_tokens":
            assert settings.speculative is not None
            block["speculative"] = {**settings.speculative.model_dump(
                mode="json", exclude_none=True), "num_speculative_tokens": value}
        else:
            block[name] = value
    return block


def apply_point(profile: Profile, point: Point, name: str) -> Profile:
    """``profile`` with ``point``'s settings, named ``name`` (a candidate to deploy)."""
    settings = vllm_settings(profile)
    changes: dict[str, Any] = {}
    for knob, value in point:
        if knob == "num_speculative_tokens":
            assert settings.speculative is not None
            changes["speculative"] = settings.speculative.model_copy(
                update={"num_speculative_tokens": value})
        else:
            changes[knob] = value
    return profile.model_copy(update={"name": name,
                                      "vllm": settings.model_copy(update=changes)})
