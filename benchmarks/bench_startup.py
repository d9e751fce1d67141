"""Start-up of the ``shimkit`` commands people wait on, as a ratio to ``import torch``.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 7]

Each round runs, in fresh interpreters and in turn, ``python -c "import torch"``, ``shimkit plugins`` and
``shimkit config mps`` (stdout discarded), so a burst of load from other processes on a shared machine
falls on all three alike. Reported: the median wall time of each over the rounds and each command's ratio
to ``import torch`` (the goal is at most 2x). Entry points are not loaded
(``SHIMKIT_DISABLE_PLUGIN_AUTOLOAD=1``), so the figure does not depend on what else is installed. The
load average before and after says how far to trust the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "import torch": [sys.executable, "-c", "import torch"],
    "shimkit plugins": [sys.executable, "-m", "shimkit", "plugins"],
    "shimkit config mps": [sys.executable, "-m", "shimkit", "config", "mps"],
}
BASELINE = "import torch"
GOAL = 2.0


def _wall_seconds(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="rounds (the median is reported)")
    args = parser.parse_args()
    env = dict(os.environ, SHIMKIT_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONWARNINGS="ignore")

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs; repeat={args.repeat}", flush=True)
    for command in COMMANDS.values():  # warm the page cache before anything is timed
        _wall_seconds(command, env)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeat):
        for name, command in COMMANDS.items():
            samples[name].append(_wall_seconds(command, env))

    baseline = statistics.median(samples[BASELINE])
    print(f"{'command':<22}{'median s':>10}{'x import torch':>16}")
    for name, values in samples.items():
        ratio = statistics.median(values) / baseline
        verdict = "" if name == BASELINE else ("  ok" if ratio <= GOAL else f"  over {GOAL:g}x")
        print(f"{name:<22}{statistics.median(values):>10.2f}{ratio:>16.2f}{verdict}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
