"""``shimkit audit`` speed on the bundled zoo: per model, per phase, warm.

    .venv/bin/python benchmarks/bench_audit.py [--repeat 5] [--no-plugins] [--no-speedups] [MODEL ...]

One warm-up audit (``seed_split_linear``) pays the process's imports and Inductor's first-time
initialisation; then every model is audited ``--repeat`` times, round-robin over the zoo so a burst
of load from other processes on a shared machine spreads over all models instead of hitting one.
Each cell is the median over the repetitions: wall seconds per phase (the audit's own clock, see
docs/audit.md "Speed"), their total, the wall time of the whole audit and its process CPU seconds
(less sensitive to other load than wall time). ``--no-speedups`` audits without
:mod:`shimkit.audit.speed` (the audit as it was before those were added). The load average before
and after is printed, because on a shared machine it says how far to trust the figures.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings

from shimkit.audit import run_audit
from shimkit.audit.runner import PHASES
from shimkit.audit.zoo import ZOO
from shimkit.backend import new_registry

WARM_UP = "seed_split_linear"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", help="zoo models (default: the whole zoo)")
    parser.add_argument("--repeat", type=int, default=5, help="audits per model (median reported)")
    parser.add_argument("--no-plugins", action="store_true", help="audit the stock upstream MetalBackend")
    parser.add_argument("--no-speedups", action="store_true", help="audit without shimkit.audit.speed")
    args = parser.parse_args()

    warnings.simplefilter("ignore")
    for name in ("torch", "torchao", "executorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    models = args.models or list(ZOO)
    plugins = not args.no_plugins
    speedups = not args.no_speedups
    # shimkit's built-in plugins only: third-party entry points would make the figures machine-specific.
    registry = new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs; plugins={plugins}; speedups={speedups}; repeat={args.repeat}", flush=True)
    started = time.perf_counter()
    run_audit([WARM_UP], plugins=plugins, registry=registry, speedups=speedups)
    print(f"warm-up ({WARM_UP}, first audit in the process): {time.perf_counter() - started:.2f} s",
          flush=True)

    samples: dict[str, list[dict[str, float]]] = {m: [] for m in models}
    statuses: dict[str, set[str]] = {m: set() for m in models}
    for _ in range(args.repeat):
        for model in models:
            cpu = time.process_time()
            wall = time.perf_counter()
            (audit,) = run_audit([model], plugins=plugins, registry=registry, speedups=speedups).models
            row = dict(audit.timings)
            row["total"] = sum(audit.timings.values())
            row["wall"] = time.perf_counter() - wall
            row["cpu"] = time.process_time() - cpu
            samples[model].append(row)
            statuses[model].add(audit.status)

    columns = [*PHASES, "total", "wall", "cpu"]
    width = max(map(len, models)) + 2
    print()
    print(f"{'model':<{width}}" + "".join(f"{c:>15}" for c in columns) + "  status")
    medians = {}
    for model in models:
        medians[model] = {c: statistics.median(r[c] for r in samples[model]) for c in columns}
        print(f"{model:<{width}}" + "".join(f"{medians[model][c]:>15.3f}" for c in columns)
              + "  " + ",".join(sorted(statuses[model])))
    print(f"{'sum of medians':<{width}}"
          + "".join(f"{sum(m[c] for m in medians.values()):>15.3f}" for c in columns))
    share = {c: sum(m[c] for m in medians.values()) for c in PHASES}
    total = sum(share.values()) or 1.0
    print("share of phase time: " + ", ".join(f"{c} {100 * share[c] / total:.0f}%" for c in PHASES))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
