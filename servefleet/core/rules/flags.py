"""Rules on flags and environment variables: the escape hatch, and what a version knows."""

from __future__ import annotations

from collections.abc import Iterator

from servefleet.core.engines import engine_of
from servefleet.core.engines.llamacpp import LLAMACPP
from servefleet.core.engines.vllm import VLLM, vllm_settings
from servefleet.core.rules.base import Issue, ProfileContext, Severity, profile_rule, show
from servefleet.core.rules.facts import (
    ENV_FACTS,
    FIELD_FLAGS,
    FLAG_SINCE,
    LLAMACPP_MANAGED_FLAGS,
    THINKING_BUDGET_SINCE,
    VLLM_MANAGED_FLAGS,
    at_least,
    dotted,
    flag_name,
    negated,
    version_known,
)

WHY_FLAGS = "vLLM arg_utils.py / cli_args.py of the released wheels (first checked release)"

MANAGED_FLAGS: dict[str, dict[str, str]] = {
    VLLM.name: VLLM_MANAGED_FLAGS,
    LLAMACPP.name: LLAMACPP_MANAGED_FLAGS,
}
"""Each engine's flags servefleet renders from typed fields (flag → profile field)."""


@profile_rule("extra-args-duplicate-managed-flag", Severity.ERROR)
def extra_args_duplicate_managed_flag(ctx: ProfileContext) -> Iterator[Issue]:
    """An extra argument repeats a flag servefleet renders from a typed field."""
    profile = ctx.profile
    engine = engine_of(profile)
    section, args = engine.settings_field, engine.extra_args(profile)
    managed = MANAGED_FLAGS[engine.name]
    for index, arg in enumerate(args):
        name = flag_name(arg)
        base = negated(name) or name
        if base not in managed:
            base = name
        if base not in managed:
            continue
        yield Issue(
            field=f"{section}.extra_args[{index}]", value=arg,
            message=(f"{arg} repeats --{base}, which servefleet sets from {managed[base]}: "
                     "two sources for one setting, and the later one silently wins"),
            why="argparse keeps the last occurrence of a repeated flag",
            fix=f"remove it from {section}.extra_args and set {managed[base]} instead",
        )


@profile_rule("flag-not-in-version", Severity.ERROR, engines=(VLLM.name,))
def flag_not_in_version(ctx: ProfileContext) -> Iterator[Issue]:
    """A flag the profile's vLLM version does not have (e.g. --language-model-only < 0.17)."""
    profile = ctx.profile
    vllm = vllm_settings(profile)
    if not version_known(profile):
        return
    version = profile.engine_version
    for field, flag in FIELD_FLAGS.items():
        value = getattr(vllm, field)
        if value in (None, False):
            continue
        fact = FLAG_SINCE[flag]
        if at_least(profile, fact.since):
            continue
        yield Issue(
            field=f"vllm.{field}", value=value,
            message=(f"{show(value)}: --{flag} does not exist in vLLM {version} ({fact.note}); "
                     "vLLM exits with 'unrecognized arguments'"),
            why=WHY_FLAGS,
            fix=f"remove vllm.{field}, or use a vLLM ≥ {dotted(fact.since)} image",
        )
    if vllm.thinking_token_budget is not None and not at_least(profile, THINKING_BUDGET_SINCE):
        yield Issue(
            field="vllm.thinking_token_budget", value=vllm.thinking_token_budget,
            message=(f"{vllm.thinking_token_budget}: vLLM {version} has no per-request "
                     "thinking_token_budget (first in 0.19.0), so requests carrying it fail"),
            why="vLLM vllm/sampling_params.py (absent in 0.17.0, present in 0.19.0)",
            fix="remove vllm.thinking_token_budget, or use a vLLM ≥ 0.19 image",
        )
    for index, arg in enumerate(vllm.extra_args):
        name = flag_name(arg)
        flag_fact = FLAG_SINCE.get(negated(name) or name)
        if flag_fact is None or at_least(profile, flag_fact.since):
            continue
        yield Issue(
            field=f"vllm.extra_args[{index}]", value=arg,
            message=(f"{arg}: the flag does not exist in vLLM {version} ({flag_fact.note}); "
                     "vLLM exits with 'unrecognized arguments'"),
            why=WHY_FLAGS,
            fix=f"remove it, or use a vLLM ≥ {dotted(flag_fact.since)} image",
        )


@profile_rule("env-var-not-in-version", Severity.WARNING, engines=(VLLM.name,))
def env_var_not_in_version(ctx: ProfileContext) -> Iterator[Issue]:
    """An engine environment variable the profile's vLLM version does not read."""
    profile = ctx.profile
    if not version_known(profile):
        return
    for name, value in profile.env.items():
        fact = ENV_FACTS.get(name)
        if fact is None:
            continue
        too_old = fact.since is not None and not at_least(profile, fact.since)
        too_new = fact.removed is not None and at_least(profile, fact.removed)
        if not (too_old or too_new):
            continue
        yield Issue(
            field=f"env.{name}", value=value,
            message=(f"{name}={value} has no effect in vLLM {profile.engine_version} "
                     f"({fact.note}); unknown variables are ignored silently"),
            why="vLLM vllm/envs.py of the released wheels",
            fix=f"remove env.{name}" + (" and use the replacement named above"
                                        if fact.removed else ""),
        )


@profile_rule("engine-version-unparsed", Severity.WARNING)
def engine_version_unparsed(ctx: ProfileContext) -> Iterator[Issue]:
    """The engine version is not a release number, so version-dependent checks are skipped."""
    profile = ctx.profile
    if version_known(profile):
        return
    yield Issue(
        field="engine_version", value=profile.engine_version,
        message=(f"{profile.engine_version} is not a release number: servefleet cannot check "
                 "flags, KV dtypes and defaults against it and skips those rules"),
        why="engine facts are tabled per release (vLLM 0.8.5 … 0.33.0 wheels)",
        fix=("write the version the image reports at /version, e.g. 0.21.0 or "
             "0.19.1rc1.dev328 (llama.cpp: b8680)"),
    )
