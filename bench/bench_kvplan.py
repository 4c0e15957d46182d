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
from servefleet.core.kvplan.accuracy import TOLERANCE, cpu_table, table
from servefleet.sim.engines.tiny_qwen3_moe import CONFIG as TINY_CONFIG

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ("models/qwen3.6-35b-a3b.config.json",
          "a24b96956f06a5055ab1e73006159adfe90cb8d6fb02f33459166f6ed8a40879")


def main() -> int:
    facts = load_pinned(ROOT / "profiles", *CONFIG)
    results = table(facts)
    print("| source and inputs | predicted tokens | printed tokens | error | "
          "predicted conc. | printed conc. |")
    print("|---|---|---|---|---|---|")
    worst = None
    for res in results:
        row = res.row
        inputs = (f"{row.source}; vLLM {'.'.join(map(str, row.version))}, kv {row.kv_dtype}, "
                  f"L {row.max_model_len}, spec {row.num_spec}, prefix {row.prefix_caching}")
        if res.predicted_tokens is None:
            print(f"| {inputs} | — | {row.printed_tokens:,} | {res.note} | — | "
                  f"{row.printed_concurrency} |")
            continue
        err = res.error or 0.0
        if worst is None or abs(err) > abs(worst.error or 0.0):
            worst = res
        conc = f"{res.predicted_concurrency:.2f}" if res.predicted_concurrency else "—"
        print(f"| {inputs} | {res.predicted_tokens:,} | {row.printed_tokens:,} | "
              f"{err:+.2%} | {conc} | {row.printed_concurrency or '—'} |")
    if worst is not None:
        print(f"\nworst: {worst.error:+.2%} ({worst.row.source}); tolerance ±{TOLERANCE:.0%}")
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
    results = results + cpu
    if "--notes" in sys.argv:
        for res in results:
            print(f"- {res.row.source}: {res.note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
