"""``servefleet tune``: solve a vLLM profile's ``gpu_memory_utilization`` for a KV-pool or
concurrency target on one node, and print the overlay profile that sets it.

On a simulated node whose vLLM is the CPU build, the pool is the KV space the engine is
given, not what a GPU leaves: the overlay sets ``--kv-cache-memory-bytes`` (same meaning on
a GPU), solved from the tiny twin's config (``servefleet.sim.engines.tiny_qwen3_moe``); the
node's ``cpu_twin.py`` lets that flag size the pool."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from servefleet.cli.main import CliContext

if TYPE_CHECKING:
    from servefleet.core.models import Profile


@click.command("tune")
@click.argument("profile_name", metavar="PROFILE")
@click.option("--node", "node_name", required=True, help="Node the profile runs on.")
@click.option("--target-kv-tokens", type=click.IntRange(1), help="KV pool wanted (as printed).")
@click.option("--target-concurrency", type=click.FloatRange(0, min_open=True),
              help="Requests of max_model_len tokens that must fit at once.")
@click.option("--measure", is_flag=True,
              help="Search the serving settings on the node itself: every candidate deployed "
                   "(gated) and benched; the node ends on PROFILE.")
@click.option("--deployment", help="With --measure: the deployment to tune (when the stack "
                                   "places PROFILE on NODE more than once).")
@click.option("--scenarios", "scenarios_path", help="With --measure: scenario file (default: "
                                                    "the stack's bench scenarios).")
@click.option("--only", help="With --measure: scenario names to run, comma-separated.")
@click.option("--slo", "slo_text", help="With --measure: bounds a candidate must meet, e.g. "
                                        "'ttft_p99<=2s,tpot_mean<=80ms'.")
@click.option("--max-deploys", type=click.IntRange(1),
              help="With --measure: candidates deployed at most (default: a third of the "
                   "grid).")
@click.option("--max-minutes", type=click.FloatRange(0, min_open=True),
              help="With --measure: stop searching after this long.")
@click.option("--grid", is_flag=True, help="With --measure: deploy every point (vLLM "
                                           "auto_tune's way) instead of searching.")
@click.option("--apply", is_flag=True, help="With --measure: leave the node on the winner "
                                            "and write its overlay under profiles/.")
@click.option("--knobs", help="With --measure: the settings to search, comma-separated "
                              "(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, "
                              "num_speculative_tokens, kv_cache_dtype).")
@click.option("--values", multiple=True, help="With --measure: KNOB=V1,V2,… (repeatable): "
                                              "the values searched for a knob.")
@click.option("--allow-outage", is_flag=True,
              help="With --measure: tune the last engine of a gateway route (its requests "
                   "fail while the search has it drained).")
@click.option("--json", "as_json", is_flag=True, help="With --measure: the outcome as JSON.")
@click.pass_obj
def tune_command(obj: CliContext, profile_name: str, node_name: str,
                 target_kv_tokens: int | None, target_concurrency: float | None,
                 measure: bool, deployment: str | None, scenarios_path: str | None,
                 only: str | None, slo_text: str | None, max_deploys: int | None,
                 max_minutes: float | None, grid: bool, apply: bool, knobs: str | None,
                 values: tuple[str, ...], allow_outage: bool, as_json: bool) -> None:
    """Print a profile overlay (extends PROFILE) with the gpu_memory_utilization that reaches
    the target on NODE, with the prediction it rests on; with --measure, search the serving
    settings on NODE itself and print the winner's overlay."""
    import yaml

    if measure:
        if target_kv_tokens is not None or target_concurrency is not None:
            raise click.UsageError("--measure searches by measuring: leave out --target-*")
        from servefleet.cli.tune_measure import run_measured

        run_measured(obj, profile_name, node_name, deployment=deployment,
                     scenarios_path=scenarios_path, only=only, slo_text=slo_text,
                     max_deploys=max_deploys, max_minutes=max_minutes, grid=grid,
                     apply=apply, knobs=knobs, values=values, as_json=as_json,
                     allow_outage=allow_outage)
        return

    from servefleet.core.engines import engine_of
    from servefleet.core.errors import ConfigError
    from servefleet.core.expectations import sim_engine_for
    from servefleet.core.kvplan import predict, solve_utilization
    from servefleet.core.kvplan.modelconfig import facts_for_profile
    from servefleet.core.kvplan.pool import reported_meaning
    from servefleet.core.project import PROFILES_DIR, load_nodes, load_profiles
    from servefleet.core.suggest import unknown_name

    if (target_kv_tokens is None) == (target_concurrency is None):
        raise click.UsageError("give exactly one of --target-kv-tokens or --target-concurrency")
    profiles, _, _, problems = load_profiles(obj.project_dir)
    nodes, _, node_problems = load_nodes(obj.project_dir)
    if profile_name not in profiles:
        raise ConfigError(problems or unknown_name("profile", profile_name, profiles,
                                                   "profiles/"))
    if node_name not in nodes:
        raise ConfigError(node_problems or unknown_name("node", node_name, nodes, "nodes/"))
    profile, node = profiles[profile_name], nodes[node_name]
    if not engine_of(profile).kv_planned:
        raise ConfigError(f"profiles/{profile_name}.yaml: engine {profile.engine}: tune plans "
                          "vLLM's KV pool only")
    cpu = sim_engine_for(profile, node)
    if cpu is not None and cpu.device == "cpu":
        click.echo(_cpu_overlay(profile, node_name, cpu.version, target_kv_tokens,
                                target_concurrency, cpu.fp8_kv_cache), nl=False)
        return
    facts = facts_for_profile(obj.project_dir / PROFILES_DIR, profile)
    if facts is None:
        from servefleet.core.modelpin.spec import pin_command

        repin = pin_command(profile)
        raise ConfigError(f"profiles/{profile_name}.yaml: field model.config is not set; pin the "
                          "checkpoint's config.json (profiles/models/) to plan its KV pool"
                          + (f": {repin}" if repin else ""))
    now = predict(facts, profile, node)
    try:
        util, found = solve_utilization(facts, profile, node, tokens=target_kv_tokens,
                                        concurrency=target_concurrency)
    except ValueError:
        raise ConfigError(
            f"profiles/{profile_name}.yaml: no gpu_memory_utilization below 1.0 reaches the "
            f"target on {node_name} ({now.summary()} at {now.utilization:g}); lower "
            "max_model_len, use a smaller KV dtype or another node") from None
    gpu = node.primary_gpu
    if gpu.boot_free_gib is not None and util * gpu.cuda_total_gib > gpu.boot_free_gib:
        from servefleet.core.rules.memory import largest_booting_utilization

        best = largest_booting_utilization(gpu.boot_free_gib, gpu.cuda_total_gib)
        raise ConfigError(
            f"profiles/{profile_name}.yaml: the target needs gpu_memory_utilization {util:g} "
            f"on {node_name}, but it frees at most {gpu.boot_free_gib:g} GiB at boot, so the "
            f"largest utilization that boots is {best:g} ({found.summary()} needs more); lower "
            "max_model_len or the target, or use a smaller KV dtype")
    meaning = reported_meaning(found.layout, found.pool, profile.version)
    if target_kv_tokens is not None and meaning.other_tokens != found.pool.kv_cache_tokens:
        click.echo(f"warning: --target-kv-tokens {target_kv_tokens:,} is read as vLLM "
                   f"{profile.engine_version} prints 'GPU KV cache size' ({meaning.this}); "
                   f"vLLM {meaning.other_versions} prints the same pool as "
                   f"{meaning.other_tokens:,} tokens ({meaning.other}). If your figure came "
                   "from such a log, convert it first.", err=True)
    lines = [
        f"# {profile_name} on {node_name}: now {now.summary()} at {now.utilization:g}",
        f"# 'GPU KV cache size' in vLLM {profile.engine_version}'s meaning: {meaning.this}",
        f"# tuned: {found.summary()} at {util:g}; {found.available_kv_gib:.2f} GiB KV",
        f"# budget {found.how}",
        f"# layout: {found.layout.describe()}",
    ]
    if found.host_headroom_gib is not None:
        lines.append(f"# unified memory: {found.host_headroom_gib:.1f} GiB left to the host")
    click.echo("\n".join(lines))
    overlay = {"extends": profile_name,
               "description": f"{profile_name} tuned for {node_name} by servefleet tune",
               "vllm": {"gpu_memory_utilization": util}}
    click.echo(yaml.safe_dump(overlay, sort_keys=False, allow_unicode=True), nl=False)


def _cpu_overlay(profile: Profile, node_name: str, version: str, tokens: int | None,
                 concurrency: float | None, fp8_kv: bool = True) -> str:
    """The overlay for a simulated node's CPU build: the least ``--kv-cache-memory-bytes``
    (whole MiB) whose pool on the tiny twin reaches the target."""
    import yaml

    from servefleet.core.engines.vllm import vllm_settings
    from servefleet.core.kvplan import facts_from_config
    from servefleet.core.kvplan.cpu import KV_BYTES_FLAG, cpu_layout, cpu_pool, solve_kv_bytes
    from servefleet.core.kvplan.pool import GIB
    from servefleet.sim.engines.tiny_qwen3_moe import CONFIG

    facts = facts_from_config(CONFIG, "the tiny twin (sim/engines/tiny_qwen3_moe.py)")
    engine = tuple(int(part) for part in version.split(".")[:3] if part.isdigit())
    kv_bytes = solve_kv_bytes(facts, profile, engine, tokens=tokens, concurrency=concurrency,
                              fp8_kv=fp8_kv)
    pool = cpu_pool(facts, profile, engine, kv_bytes, fp8_kv)
    args = [a for a in vllm_settings(profile).extra_args if a.partition("=")[0] != KV_BYTES_FLAG]
    lines = [
        f"# {profile.name} on {node_name}: the CPU build of vLLM {version} on {facts.source}",
        f"# tuned: KV pool {pool.kv_cache_tokens:,} tokens, concurrency at "
        f"{pool.max_model_len:,} {pool.max_concurrency:.1f}x from {kv_bytes:,} bytes "
        f"({kv_bytes / GIB:.2f} GiB) of KV space; exact (CPU build: the pool is the space)",
        f"# layout: {cpu_layout(facts, profile, engine, fp8_kv).describe()}",
    ]
    overlay = {"extends": profile.name,
               "description": f"{profile.name} tuned for {node_name} by servefleet tune",
               "vllm": {"extra_args": [*args, f"{KV_BYTES_FLAG}={kv_bytes}"]}}
    return "\n".join(lines) + "\n" + yaml.safe_dump(overlay, sort_keys=False,
                                                      allow_unicode=True)
