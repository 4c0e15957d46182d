"""KV-pool planner accuracy: every Qwen3.6 KV figure we hold, predicted vs printed, every
real H200 boot of a full-size model (nine models, fitted and held-out rows marked), and
every pool vLLM's CPU build printed for the simulated nodes' tiny twin.

    .venv/bin/python bench/bench_kvplan.py [--notes] [--json] [--held-out DIR]

Prints one row per figure (inputs, predicted, printed, error %) as Markdown tables and the
worst case; rows the planner does not model are listed with the reason (``--notes``: every
row's note). ``--json`` prints one JSON document instead (the counts and the worst errors).
``--held-out DIR`` scores a folder of boots kept outside the project the same way as the H200
rows: each ``<name>.log`` written by ``bench/gpu/boot_vllm_truth.py --config-dir`` beside its
``<name>.config.json`` and ``<name>.record.json`` (the flags it booted with).

Exit status: 0 when every table compared at least one figure and every compared figure is
within the planner's tolerance; 1 when a table compared nothing (the comparison did not
happen: no pinned figure, no recorded CPU pool) or a figure is off by more than the
tolerance.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from servefleet.core.bootlog import VllmExtra, parse_text
from servefleet.core.kvplan import facts_from_config, load_pinned
from servefleet.core.kvplan.accuracy import TOLERANCE, cold_table, cpu_table, mtp_delta, table
from servefleet.core.kvplan.boots import BOOTS, PUBLIC_BOOTS, Boot, plan_boot
from servefleet.core.kvplan.pool import GIB, figures
from servefleet.sim.engines.tiny_qwen3_moe import CONFIG as TINY_CONFIG

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ("models/qwen3.6-35b-a3b.config.json",
          "3ac357d5a0e00f3c87e4b008c4ac1d38d062f7c286558a9d7eba4cb1618b90db")
H200_DATA = ROOT / "tests" / "core" / "kvplan" / "data" / "real-logs" / "vllm-0.26.0-h200"
PUBLIC_DATA = ROOT / "tests" / "core" / "kvplan" / "data" / "public-logs"


FLAGS = {"--max-num-seqs": ("max_num_seqs", int),
         "--max-num-batched-tokens": ("max_num_batched_tokens", int),
         "--gpu-memory-utilization": ("gpu_memory_utilization", float),
         "--kv-cache-dtype": ("kv_cache_dtype", str)}
"""The ``vllm serve`` flags a recorded boot may add, as profile settings."""


def recorded_boot(folder: Path, name: str) -> Boot:
    """A boot of ``folder`` as :class:`Boot`: its printed figures read by the project's own
    boot-log reader, its flags from its record."""
    log = (folder / f"{name}.log").read_text(encoding="utf-8", errors="replace")
    facts = parse_text(log)
    if not isinstance(facts.extra, VllmExtra) or facts.extra.available_kv_cache_gib is None \
            or facts.model_load_gib is None or facts.kv_cache_tokens is None:
        raise SystemExit(f"bench_kvplan: {folder / name}.log: not a finished vLLM boot")
    argv = json.loads((folder / f"{name}.record.json").read_text())["argv"]
    settings = tuple((FLAGS[flag][0], FLAGS[flag][1](value))
                     for flag, value in pairwise(argv) if flag in FLAGS)
    return Boot(name, facts.model_load_gib, facts.extra.available_kv_cache_gib,
                facts.kv_cache_tokens, facts.max_concurrency or 0.0, name, settings)


@dataclass(frozen=True)
class Scored:
    """One boot planned cold: its runner, the layout's error from the printed KV memory and
    the cold budget's error."""

    boot: Boot
    runner: str
    per_token: float
    cold: float
    planned_gib: float


def score(boot: Boot, data: Path) -> Scored:
    """Plan ``boot`` from ``data``'s configs and compare it with what it printed."""
    planned = plan_boot(boot, data)
    layout = figures(planned.layout, boot.available_gib * GIB, boot.max_model_len,
                     boot.version_tuple)
    v2 = planned.reserve is not None and planned.reserve.inputs.v2_runner
    return Scored(boot, "V2" if v2 else "V1", layout.kv_cache_tokens / boot.tokens - 1,
                  planned.available_kv_gib / boot.available_gib - 1, planned.available_kv_gib)


def _row(found: Scored, *first: str) -> str:
    boot = found.boot
    return (f"| {' | '.join(first)} | {found.runner} | {boot.tokens:,} | "
            f"{found.per_token:+.2%} | {found.planned_gib:.2f} | {boot.available_gib} | "
            f"{found.cold:+.2%} |")


def _worst(found: list[Scored]) -> str:
    return f"±{max((abs(f.cold) for f in found), default=0.0):.2%} ({len(found)} boots)"


def public_table(say: Callable[[str], None]) -> list[float]:
    """Public logs of other people's boots (other GPUs and releases), scored the same way;
    none was used to fit anything."""
    say("\nPublic logs (other GPUs and releases; tests/core/kvplan/data/public-logs):\n")
    say("| boot | vLLM | GPU | runner | printed tokens | layout from printed GiB | "
        "cold: predicted GiB | printed GiB | cold error |")
    say("|---|---|---|---|---|---|---|---|---|")
    found = [score(boot, PUBLIC_DATA) for boot in PUBLIC_BOOTS]
    for one in found:
        say(_row(one, one.boot.name, one.boot.version, one.boot.node))
    say(f"\nworst public cold: {_worst(found)}")
    return [f.cold for f in found]


def held_out_table(folder: Path, say: Callable[[str], None]) -> list[float]:
    """The boots of ``folder`` (kept outside the project), scored like the H200 rows."""
    say(f"\nHeld out, kept outside the project ({folder}):\n")
    say("| boot | runner | printed tokens | layout from printed GiB | cold: predicted GiB | "
        "printed GiB | cold error |")
    say("|---|---|---|---|---|---|---|")
    found = [score(recorded_boot(folder, log.stem), folder)
             for log in sorted(folder.glob("*.log"))]
    for one in found:
        say(_row(one, one.boot.name))
    say(f"\nworst held-out cold: {_worst(found)}")
    return [f.cold for f in found]


def h200_table(say: Callable[[str], None]) -> list[float]:
    """The H200 boots, grouped by model: per-token layout (from the printed KV memory) and
    cold budget; returns the cold errors."""
    say("\nReal vLLM 0.26.0 boots on one H200 (dummy weights, full size), by model; the "
        "datacenter reserve was fitted on the rows marked fitted:\n")
    say("| model | boot | rows | runner | printed tokens | layout from printed GiB | "
        "cold: predicted GiB | printed GiB | cold error |")
    say("|---|---|---|---|---|---|---|---|---|")
    found = [score(boot, H200_DATA)
             for boot in sorted(BOOTS, key=lambda b: (b.model or b.name, b.name))]
    for one in found:
        say(_row(one, one.boot.model or one.boot.name, one.boot.name,
                 "fitted" if one.boot.fitted else "held out"))
    fitted = [f for f in found if f.boot.fitted]
    held = [f for f in found if not f.boot.fitted]
    say(f"\nworst h200 cold: fitted {_worst(fitted)}, held out {_worst(held)}")
    return [f.cold for f in found]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", action="store_true", help="every row's note")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--held-out", type=Path, default=None, metavar="DIR",
                        help="also score the boots of DIR, kept outside the project")
    args = parser.parse_args(argv)
    lines: list[str] = []
    say = lines.append
    facts = load_pinned(ROOT / "profiles", *CONFIG)
    results = table(facts)
    cold = cold_table(facts)
    say("| source and inputs | printed tokens | cold: predicted | cold error | "
        "calibrated or from printed budget | error |")
    say("|---|---|---|---|---|---|")
    worst: dict[str, float] = {}
    compared = {"cold": 0, "calibrated": 0, "cpu": 0, "h200": 0}
    for res, cres in zip(results, cold, strict=True):
        row = res.row
        inputs = (f"{row.source}; vLLM {'.'.join(map(str, row.version))}, kv {row.kv_dtype}, "
                  f"L {row.max_model_len}, spec {row.num_spec}, prefix {row.prefix_caching}")
        cells = []
        for kind, found in (("cold", cres), ("calibrated", res)):
            if found.predicted_tokens is None:
                cells.append("— | —")
                continue
            err = found.error or 0.0
            worst[kind] = max(worst.get(kind, 0.0), abs(err))
            compared[kind] += 1
            cells.append(f"{found.predicted_tokens:,} | {err:+.2%}")
        note = f" ({res.note})" if res.predicted_tokens is None else ""
        say(f"| {inputs}{note} | {row.printed_tokens:,} | {cells[0]} | {cells[1]} |")
    for kind, err in worst.items():
        say(f"\nworst {kind}: ±{err:.2%}; tolerance ±{TOLERANCE:.0%}")
    predicted, printed = mtp_delta(facts)
    say(f"GB10 MTP on vs off, cold: {predicted:+.1%} (printed {printed:+.1%})")
    h200 = h200_table(say)
    compared["h200"] = len(h200)
    worst["h200"] = max(map(abs, h200), default=0.0)
    public = public_table(say)
    compared["public"] = len(public)
    if args.held_out is not None:
        held = held_out_table(args.held_out, say)
        compared["held_out"] = len(held)
        worst["held_out"] = max(map(abs, held), default=0.0)
    say("\nvLLM's CPU build (simulated nodes) on the tiny twin:\n")
    say("| source and inputs | KV space | predicted tokens | printed tokens | error | "
        "predicted conc. | printed conc. |")
    say("|---|---|---|---|---|---|---|")
    cpu = cpu_table(facts_from_config(TINY_CONFIG, "tiny twin"))
    for res in cpu:
        row = res.row
        if res.predicted_tokens is None:
            say(f"| {row.source} | not modelled: {res.note} | | | | | |")
            continue
        compared["cpu"] += 1
        worst["cpu"] = max(worst.get("cpu", 0.0), abs(res.error or 0.0))
        say(f"| {row.source}; kv {row.kv_dtype}, L {row.max_model_len} | "
            f"{row.available_gib:g} GiB | {res.predicted_tokens:,} | {row.printed_tokens:,} | "
            f"{res.error or 0.0:+.2%} | {res.predicted_concurrency:.2f} | "
            f"{row.printed_concurrency} |")
    if args.notes:
        for res in [*results, *cold, *cpu]:
            say(f"- {res.row.source}: {res.note}")
    # The scenario happened only if every table compared something; its claim holds only
    # if every compared figure is within the tolerance.
    empty = sorted(kind for kind, count in compared.items() if count == 0)
    beyond = sorted(kind for kind, err in worst.items() if err > TOLERANCE)
    problems = ([f"nothing compared: {', '.join(empty)}"] if empty else []) + (
        [f"beyond ±{TOLERANCE:.0%}: {', '.join(beyond)}"] if beyond else [])
    if args.json:
        print(json.dumps({"compared": compared, "worst": worst, "tolerance": TOLERANCE,
                          "mtp_delta": {"predicted": predicted, "printed": printed},
                          "problems": problems}, indent=2))
    else:
        print("\n".join(lines))
        print(f"\ncompared: {compared['cold']} cold, {compared['calibrated']} calibrated, "
              f"{compared['cpu']} CPU pools, {compared['h200']} H200 boots")
    for problem in problems:
        print(f"bench_kvplan: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
