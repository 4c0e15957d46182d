"""What a healthy boot of a profile on a node should look like, derived from the profile.

The health gate compares a boot log against an :class:`ExpectedHealth`. Explicit values in
the profile's ``health:`` win; everything else is derived from the engine version, the
flags and the node's GPU, and every adjustment is said in ``notes`` so an operator can see
why the gate expects what it expects.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from servefleet.core.models import Node, Profile
from servefleet.core.models.inventory import SimEngine
from servefleet.core.models.profile import CudaGraphMode
from servefleet.core.project import profile_identity
from servefleet.core.rules.facts import (
    MTP_KV_SHRINK,
    WHY_CUDAGRAPH_SPEC,
    attention_backend,
    default_cudagraph_mode,
    flag_name,
    flashinfer_spec_downgrade,
    mtp_on,
    spec_on,
)

# ``--optimization-level`` / ``-O<n>`` (0.13+): O0 no graphs, O1 PIECEWISE, O2/O3 full.
OPTIMIZATION_LEVEL_MODES: dict[str, CudaGraphMode] = {
    "0": "NONE", "1": "PIECEWISE", "2": "FULL_AND_PIECEWISE", "3": "FULL_AND_PIECEWISE",
}
CUDAGRAPH_MODES: tuple[CudaGraphMode, ...] = (
    "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE",
)


class ExpectedHealth(BaseModel):
    """The health gate's expectations for one profile on one node."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    cudagraph_mode: CudaGraphMode | None
    """Final CUDA-graph mode the boot log should report; ``None``: nothing to check
    (llama.cpp prints nothing about graphs; vLLM before 0.10 had no modes)."""
    cudagraph_mode_explicit: bool
    """Whether ``cudagraph_mode`` comes from the profile's ``health.cudagraph_mode``."""
    attention_backend: str | None
    """Attention backend vLLM is expected to pick (``FLASHINFER``…); ``None`` for llama.cpp."""
    spec_decode: bool
    """Speculative decoding should be active (SpecDecoding metrics in the log)."""
    min_kv_cache_tokens: int | None
    """Smallest acceptable ``GPU KV cache size``; ``None``: not checked."""
    kv_smaller_than: str | None
    """With speculative decoding: identity (:func:`profile_identity`) of the same profile
    without it. The pool is expected *smaller* than that profile's pool on the same node, so
    a drop against such a baseline is not drift."""
    kv_tolerance: float
    """Relative change of the KV pool against the node's baseline that is flagged."""
    deterministic: bool
    """Identical temperature-0 requests should give identical outputs (the determinism
    probe's verdict); false with speculative decoding on."""
    boot_deadline_seconds: int
    """Give up on a boot after this long."""
    kv_cache_dtype: str | None = None
    """KV cache dtype the engine should report (``vllm:cache_config_info``); ``None``: not
    checked (llama.cpp, or a simulated node's CPU build)."""
    engine_version: str = ""
    """Version the engine should report (``/version``, ``/props`` build): the profile's
    ``engine_version``, or on a simulated node the version of the CPU build that runs."""
    predicted_kv_cache_tokens: int | None = None
    """The KV planner's predicted pool on this node (``None``: no prediction)."""
    predicted_kv_basis: str = ""
    """How it was predicted (``estimated from config.json``, ``calibrated on …``)."""
    kv_prediction_tolerance: float = 0.25
    """A pool below ``predicted × (1 − this)`` fails the gate."""
    notes: tuple[str, ...] = ()
    """One line per derived value or adjustment, saying why."""


def _mode_from_extra_args(profile: Profile) -> tuple[CudaGraphMode, str] | None:
    """A CUDA-graph mode forced through ``extra_args``: ``--compilation-config.cudagraph_mode=X``
    or ``--optimization-level=N``. The last one wins, as in argparse."""
    assert profile.vllm is not None
    found: tuple[CudaGraphMode, str] | None = None
    for arg in profile.vllm.extra_args:
        flag, _, value = arg.partition("=")
        name = flag_name(arg)
        value = value.strip().strip("'\"").upper()
        if name == "compilation-config" and flag.endswith(".cudagraph_mode"):
            mode = next((m for m in CUDAGRAPH_MODES if m == value), None)
            if mode is not None:
                found = (mode, f"{arg} in vllm.extra_args")
        elif name == "optimization-level" and value in OPTIMIZATION_LEVEL_MODES:
            found = (OPTIMIZATION_LEVEL_MODES[value], f"{arg} in vllm.extra_args")
    return found


def _without_speculation(profile: Profile) -> Profile:
    assert profile.vllm is not None
    settings = profile.vllm.model_copy(update={"speculative": None})
    return profile.model_copy(update={"vllm": settings})


def sim_engine_for(profile: Profile, node: Node) -> SimEngine | None:
    """The real CPU engine that runs ``profile`` on a simulated node, or ``None`` (a real
    node, or an engine the node runs as the stand-in). A profile that builds an overlay image
    runs on the stand-in: its patches apply to the stand-in's placeholder ``vllm`` package,
    and the real engine is mounted read-only."""
    if node.sim is None or profile.builds_image:
        return None
    return node.sim.engines.get(profile.engine)


def _substituted(expected: ExpectedHealth, engine: SimEngine) -> ExpectedHealth:
    """``expected`` for the CPU build that runs on a simulated node: its own version, and no
    expectation for the boot facts it cannot show, each said in the notes."""
    notes = [f"simulated node: {engine.why}"]
    update: dict[str, object] = {"engine_version": engine.version}
    unshown = list(engine.unshown)
    # A CPU build never shows the pool a GPU would leave, even where the node's inventory
    # was written before the planner's prediction joined the gate.
    if engine.device == "cpu" and "predicted_kv_cache_tokens" not in unshown:
        unshown.append("predicted_kv_cache_tokens")
    for fact in unshown:
        if getattr(expected, fact) is not None:
            update[fact] = None
            notes.append(f"simulated node: {fact} not checked (a {engine.device.upper()} "
                         "build does not show it)")
    return expected.model_copy(update={**update, "notes": (*expected.notes, *notes)})


def derive_expectations(profile: Profile, node: Node, *, predicted_kv: int | None = None,
                        predicted_basis: str = "") -> ExpectedHealth:
    """The expectations of ``profile`` booted on ``node`` (pure; see the module docstring);
    ``predicted_kv``: the KV planner's pool for it (:mod:`servefleet.core.kvplan.gate`)."""
    health = profile.health
    notes: list[str] = []
    mode: CudaGraphMode | None = None
    backend: str | None = None
    kv_smaller_than: str | None = None
    spec = profile.speculative

    if profile.vllm is not None:
        backend, backend_reason = attention_backend(profile, node)
        notes.append(f"attention backend {backend}: {backend_reason}")
        derived = default_cudagraph_mode(profile)
        if derived is None:
            notes.append(f"vLLM {profile.engine_version} predates CUDA-graph modes (0.10); "
                         "the graph mode is not checked")
        else:
            notes.append(f"CUDA graphs start from {derived}, vLLM {profile.engine_version}'s "
                         "default (PIECEWISE in 0.10.x, FULL_AND_PIECEWISE from 0.11; "
                         "vllm/config/compilation.py)")
        mode = derived
        forced = _mode_from_extra_args(profile)
        if forced is not None:
            mode = forced[0]
            notes.append(f"CUDA graphs forced to {mode} by {forced[1]}")
        if profile.vllm.enforce_eager:
            mode = "NONE"
            notes.append("enforce_eager: no CUDA graphs, mode NONE")
        elif mode not in (None, "NONE", "PIECEWISE") and flashinfer_spec_downgrade(profile, node):
            assert spec is not None
            mode = "PIECEWISE"
            notes.append(
                f"speculative decoding ({spec.method}) on FlashInfer off SM100 (SM "
                f"{node.primary_gpu.compute_capability}): CUDA graphs fall back to PIECEWISE "
                f"({WHY_CUDAGRAPH_SPEC})")
        if spec is not None:
            kv_smaller_than = profile_identity(_without_speculation(profile))
            extra = (f"MTP draft heads, padding layers, {mode} graphs" if mtp_on(profile)
                     else "draft state")
            notes.append(
                f"speculative decoding: the KV pool is expected smaller than the same profile "
                f"without it ({extra}; about {MTP_KV_SHRINK:.0%} on GB10: 360k → 323k tokens)")

    explicit = health.cudagraph_mode is not None
    if explicit:
        if mode is not None and mode != health.cudagraph_mode:
            notes.append(f"health.cudagraph_mode {health.cudagraph_mode} overrides the derived "
                         f"{mode}")
        mode = health.cudagraph_mode

    deterministic = health.determinism.wanted
    if deterministic and spec_on(profile):
        deterministic = False
        assert spec is not None
        notes.append(f"not deterministic: speculative decoding ({spec.method}) accepts drafted "
                     "tokens differently from run to run (vLLM + MTP: 4/12 tasks stable)")
    settings = profile.llamacpp
    if deterministic and settings is not None and (
        settings.parallel != 1 or settings.cache_prompt is not False
    ):
        deterministic = False
        notes.append("not deterministic: llama.cpp needs parallel 1 and cache_prompt false for "
                     "identical outputs (server README cache_prompt; PR #22224)")

    expected = ExpectedHealth(
        cudagraph_mode=mode,
        cudagraph_mode_explicit=explicit,
        attention_backend=backend,
        spec_decode=spec is not None,
        min_kv_cache_tokens=health.min_kv_cache_tokens,
        kv_smaller_than=kv_smaller_than,
        kv_tolerance=health.kv_tolerance,
        deterministic=deterministic,
        boot_deadline_seconds=health.boot_deadline_seconds,
        engine_version=profile.engine_version,
        kv_cache_dtype=profile.vllm.kv_cache_dtype if profile.vllm else None,
        predicted_kv_cache_tokens=predicted_kv,
        predicted_kv_basis=predicted_basis,
        kv_prediction_tolerance=health.kv_prediction_tolerance,
        notes=tuple(notes),
    )
    substitute = sim_engine_for(profile, node)
    return expected if substitute is None else _substituted(expected, substitute)
