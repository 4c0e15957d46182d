"""KV-pool planner accuracy: every Qwen3.6 KV figure we hold, predicted vs printed, and
every pool vLLM's CPU build printed for the simulated nodes' tiny twin.

    .venv/bin/python bench/bench_kvplan.py [--markdown]

Prints one row per figure (inputs, predicted, printed, error %) and the worst case; rows the
planner does not model are listed with the reason. Exit 0 always: this is a report.
"""

from __future__ import annotations

import sys
from pathlib import Path

from servefleet.core.kvplan import facts_from_config, load_pinned
from servefleet.core.kvplan.accuracy import TOLERANCE, cold_table, cpu_table, mtp_delta, table
from servefleet.sim.engines.tiny_qwen3_moe import CONFIG as TINY_CONFIG

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ("models/qwen3.6-35b-a3b.config.json",
          "a24b96956f06a5055ab1e73006159adfe90cb8d6fb02f33459166f6ed8a40879")


def main() -> int:
    facts = load_pinned(ROOT / "profiles", *CONFIG)
    results = table(facts)
    cold = cold_table(facts)
    print("| source and inputs | printed tokens | cold: predicted | cold error | "
          "calibrated or from printed budget | error |")
    print("|---|---|---|---|---|---|")
    worst: dict[str, float] = {}
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
            cells.append(f"{found.predicted_tokens:,} | {err:+.2%}")
        note = f" ({res.note})" if res.predicted_tokens is None else ""
        print(f"| {inputs}{note} | {row.printed_tokens:,} | {cells[0]} | {cells[1]} |")
    for kind, err in worst.items():
        print(f"\nworst {kind}: ±{err:.2%}; tolerance ±{TOLERANCE:.0%}")
    predicted, printed = mtp_delta(facts)
    print(f"GB10 MTP on vs off, cold: {predicted:+.1%} (printed {printed:+.1%})")
    print("\nvLLM's CPU build (simulated nodes) on the tiny twin:\n")
    print("| source and inputs | KV space | predicted tokens | printed tokens | error | "
          "predicted conc. | printed conc. |")
    print("|---|---|---|---|---|---|---|")
    cpu = cpu_table(facts_from_config(TINY_CONFIG, "tiny twin"))
    for res in cpu:
        row = res.row
        print(f"| {row.source}; kv {row.kv_dtype}, L {row.max_model_len} | "
              f"{row.available_gib:g} GiB | {res.predicted_tokens:,} | {row.printed_tokens:,} | "
              f"{res.error or 0.0:+.2%} | {res.predicted_concurrency:.2f} | "
              f"{row.printed_concurrency} |")
    if "--notes" in sys.argv:
        for res in [*results, *cold, *cpu]:
            print(f"- {res.row.source}: {res.note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
