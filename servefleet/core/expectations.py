"""What a healthy boot of a profile on a node should look like, derived from the profile.

The health gate compares a boot log against an :class:`ExpectedHealth`. Explicit values in
the profile's ``health:`` win; everything else is derived from the engine version, the
flags and the node's GPU, and every adjustment is said in ``notes`` so an operator can see
why the gate expects what it expects.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from servefleet.core.engines import engine_of
from servefleet.core.models import Node, Profile
from servefleet.core.models.inventory import SimEngine
from servefleet.core.models.profile import CudaGraphMode


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
    engine = engine_of(profile)
    derived = engine.expectations(profile, node)
    notes = list(derived.notes)
    mode = derived.cudagraph_mode

    explicit = health.cudagraph_mode is not None
    if explicit:
        if mode is not None and mode != health.cudagraph_mode:
            notes.append(f"health.cudagraph_mode {health.cudagraph_mode} overrides the derived "
                         f"{mode}")
        mode = health.cudagraph_mode

    deterministic = health.determinism.wanted
    why_not = engine.nondeterminism(profile) if deterministic else None
    if why_not is not None:
        deterministic = False
        notes.append(why_not)

    expected = ExpectedHealth(
        cudagraph_mode=mode,
        cudagraph_mode_explicit=explicit,
        attention_backend=derived.attention_backend,
        spec_decode=profile.speculative is not None,
        min_kv_cache_tokens=health.min_kv_cache_tokens,
        kv_smaller_than=derived.kv_smaller_than,
        kv_tolerance=health.kv_tolerance,
        deterministic=deterministic,
        boot_deadline_seconds=health.boot_deadline_seconds,
        engine_version=profile.engine_version,
        kv_cache_dtype=engine.kv_cache_dtype(profile),
        predicted_kv_cache_tokens=predicted_kv,
        predicted_kv_basis=predicted_basis,
        kv_prediction_tolerance=health.kv_prediction_tolerance,
        notes=tuple(notes),
    )
    substitute = sim_engine_for(profile, node)
    return expected if substitute is None else _substituted(expected, substitute)
