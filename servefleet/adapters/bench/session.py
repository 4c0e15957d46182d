"""One ``servefleet bench`` of a deployment: check that its engine may be measured, run
every scenario with every seed, keep each record on the node as it comes."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from servefleet.adapters import compose_commands
from servefleet.adapters.bench import (
    append_record,
    job_for,
    load_container,
    run_beside_command,
    run_command,
    run_load,
)
from servefleet.adapters.rollout.target import manifest_compose_files
from servefleet.adapters.runtime import Transport, runtime_for
from servefleet.core.bench.beside import default_bench_image
from servefleet.core.bench.record import BenchRecord, Role
from servefleet.core.bench.scenario import Scenario
from servefleet.core.bench.stability import answer_digests
from servefleet.core.engines import EngineSpec, engine_named
from servefleet.core.errors import ServefleetError
from servefleet.core.project import Project

TOKEN_ID_BACKENDS = ("openai", "vllm")
"""The backends ``vllm bench serve`` replays a timed trace through (prompts as token ids)."""
SECONDS_PER_PROMPT_BOUND = 600
"""A run may take this long per request (plus a start): a bound, not an estimate."""
_GATE_MISS_WORDS = {
    "no-gate": "no health gate passed on this node",
    "other-release": "the last gate passed for another release",
    "started-again": "its container started again after its gate",
}


class BenchRefused(ServefleetError):
    """The engine may not be measured now (booting, ungated, a rollout holds the lock)."""


@dataclass(frozen=True)
class BenchTarget:
    """The gated engine a bench measures."""

    node: str
    deployment: str
    release: str
    profile: str
    profile_identity: str
    engine: EngineSpec
    engine_version: str
    image: str
    port: int
    compose_files: tuple[str, ...] = ("compose.yaml",)
    load_image: str | None = None
    """The vLLM image the load generator runs in beside an engine whose own image has none
    (``None`` where the load runs in the engine's container, or the target was read for
    canaries only)."""
    tokenizer: str | None = None
    """What the load generator counts tokens with, when the engine names none that loads."""
    hf_cache: str = ""
    """The node's Hugging Face cache (the tokenizer's), for a load container beside."""

    @property
    def beside(self) -> bool:
        """The load program runs beside the engine (its image has no load generator)."""
        return not self.engine.bench_in_engine

    def load_command(self, base_dir: str, job: dict[str, Any]) -> list[str]:
        """The node command that runs the load program for ``job``."""
        if not self.beside:
            return run_command(self.deployment, job)
        if self.load_image is None:
            raise ValueError(f"{self.node}/{self.deployment}: read without a load image "
                             "(bench_target(..., loads=False)) but asked to load")
        return run_beside_command(base_dir, self.deployment, self.release,
                                  self.compose_files, self.load_image, self.hf_cache, job)


def bench_target(transport: Transport, deployment: str, project: Project, *,
                 loads: bool = True) -> BenchTarget:
    """What runs as ``deployment`` on the transport's node, read in one command;
    :class:`BenchRefused` unless it is a gated engine no rollout is changing. An engine
    whose image has no load generator is loaded from the stack's ``benchImage`` beside it,
    counting tokens with its profile's ``model.tokenizer``; that image is looked for only
    when the caller ``loads`` (canaries send no load)."""
    node = transport.node.name
    observed = runtime_for(transport).observe([deployment])
    lock = observed.lock
    if lock is not None:
        raise BenchRefused(f"{node}: locked by {lock.owner} ({lock.operation or 'a rollout'}"
                           f"{', ' + lock.phase if lock.phase else ''}): a bench waits until "
                           "the rollout ends")
    have = observed.deployments.get(deployment)
    if have is None or not have.running or have.manifest is None:
        raise BenchRefused(f"{node}/{deployment}: no engine running; deploy it first")
    if have.gate_miss is not None:
        raise BenchRefused(f"{node}/{deployment}: the engine is ungated "
                           f"({_GATE_MISS_WORDS[have.gate_miss]}): a bench measures only "
                           "an engine that passed its gate; deploy it, or roll back")
    manifest = have.manifest
    engine = engine_named(str(manifest.get("engine")))
    profile = project.profiles.get(str(manifest.get("profile")))
    tokenizer = profile.model.tokenizer if profile is not None else None
    load_image = None
    if loads and not engine.bench_in_engine:
        load_image = project.stack.bench_image or default_bench_image(
            project.profiles.values())
    return BenchTarget(
        node=node, deployment=deployment, release=str(manifest.get("release_id")),
        profile=str(manifest.get("profile")),
        profile_identity=str(manifest.get("profile_identity", "")), engine=engine,
        engine_version=str(manifest.get("engine_version", "")),
        image=str(manifest.get("image", "")), port=int(manifest["port"]),
        compose_files=manifest_compose_files(manifest), load_image=load_image,
        tokenizer=tokenizer,
        hf_cache=transport.node.hf_cache)


def _stop_load_beside(transport: Transport, target: BenchTarget) -> None:
    """Remove the load container of an interrupted run (Ctrl-C, SIGTERM, a failure): unlike
    ``docker exec``, a container keeps loading the engine when its client goes. Best effort:
    over a dropped link it stays until its run ends, and the next bench removes it first."""
    if not target.beside:
        return
    with contextlib.suppress(Exception):
        transport.run(compose_commands.remove_container(load_container(target.deployment)),
                      timeout=30, what="remove the load container")


@dataclass
class BenchProgress:
    """What a bench tells as it goes (the CLI prints it)."""

    started: Callable[[Scenario, int], None]
    alive: Callable[[Scenario, int, float], None]
    finished: Callable[[BenchRecord], None]


def run_bench(transport: Transport, target: BenchTarget, scenarios: Sequence[Scenario],
              *, run_id: str, role: Role, progress: BenchProgress,
              repeat: int = 0) -> list[BenchRecord]:
    """Every scenario with every seed against ``target``, each record kept on the node
    when its run ends; the records, in order. ``repeat`` > 0 runs each scenario that many
    times with its first seed instead, keeping a digest of every answer
    (:mod:`servefleet.core.bench.stability`)."""
    if target.beside and target.tokenizer is None:
        raise BenchRefused(
            f"{target.node}/{target.deployment}: {target.engine.display_name} names no "
            "tokenizer the load generator can load; set `model.tokenizer` in profile "
            f"{target.profile} (the Hugging Face repository of the model the GGUF was made "
            "from)")
    replays = [s.name for s in scenarios if s.replay is not None]
    if replays and target.engine.bench_api[0] not in TOKEN_ID_BACKENDS:
        raise BenchRefused(
            f"{target.node}/{target.deployment}: scenario(s) {', '.join(replays)} replay a "
            f"trace, which `vllm bench serve` sends as token ids to a completions endpoint; "
            f"{target.engine.display_name} is benched through "
            f"{target.engine.bench_api[1]}: leave them out (--only)")
    records: list[BenchRecord] = []
    for scenario in scenarios:
        seeds = [scenario.seeds[0]] * repeat if repeat else scenario.seeds
        for seed in seeds:
            progress.started(scenario, seed)
            job = job_for(scenario, seed, port=target.port,
                          kv_gauges=target.engine.kv_usage_gauges, texts=bool(repeat),
                          tokenizer=target.tokenizer, api=target.engine.bench_api)
            bound = SECONDS_PER_PROMPT_BOUND * (scenario.prompts + scenario.warmups)
            try:
                result = run_load(
                    transport, target.load_command(transport.node.base_dir, job),
                    timeout=60 + bound,
                    alive=functools.partial(progress.alive, scenario, seed))
            except BaseException:
                _stop_load_beside(transport, target)
                raise
            figures = {k: v for k, v in result.figures.items() if k != "texts"}
            if repeat:
                figures["answers"] = answer_digests(result.figures.get("texts") or [])
            record = BenchRecord(
                at=datetime.now(UTC).isoformat(timespec="seconds"), run_id=run_id,
                role=role, node=target.node, deployment=target.deployment,
                release=target.release, profile=target.profile,
                profile_identity=target.profile_identity, engine=target.engine.name,
                engine_version=target.engine_version, image=target.image,
                image_id=result.image_id, scenario=scenario.name,
                scenario_identity=scenario.identity, shape=scenario.shape(), seed=seed,
                figures=figures)
            append_record(transport, record)
            records.append(record)
            progress.finished(record)
    return records
