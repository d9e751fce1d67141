"""Re-auditing the bundled zoo from the audit cache, against auditing it cold, in one process.

    .venv/bin/python benchmarks/bench_audit_cache.py [--repeat 3] [--check-numerics]

One warm-up audit pays the process's imports and Inductor's first-time initialisation. Then, per round,
the whole zoo is audited into an empty cache (cold) and audited again from it (warm); each figure is the
median over the rounds of the wall time for the whole zoo, and the ratio warm / cold is the cache's cost as
a share of an audit (the goal is at most 10%). A warm audit still loads and exports each model: that, and
hashing the program and the registry, is what it costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

from shimkit.audit.cache import AuditCache
from shimkit.audit.options import AuditOptions
from shimkit.audit.parallel import audit_in_process
from shimkit.audit.zoo import ZOO


def _zoo_seconds(cache: AuditCache, check_numerics: bool) -> tuple[float, list[bool]]:
    started = time.perf_counter()
    models, _ = audit_in_process(list(ZOO), AuditOptions(numerics=check_numerics), cache=cache)
    return time.perf_counter() - started, [m["cached"] for m in models]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="rounds (the median is reported)")
    parser.add_argument("--check-numerics", action="store_true", help="audit with --check-numerics")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    os.environ["SHIMKIT_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # figures independent of what else is installed

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; "
          f"{len(ZOO)} zoo models; check_numerics={args.check_numerics}; repeat={args.repeat}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        _zoo_seconds(AuditCache(os.path.join(scratch, "warm-up")), args.check_numerics)
        cold, warm = [], []
        for round_ in range(args.repeat):
            cache = AuditCache(os.path.join(scratch, f"round{round_}"))
            seconds, cached = _zoo_seconds(cache, args.check_numerics)
            assert not any(cached), "a cold round found entries"
            cold.append(seconds)
            seconds, cached = _zoo_seconds(cache, args.check_numerics)
            assert all(cached), "a warm round missed"
            warm.append(seconds)
    cold_s, warm_s = statistics.median(cold), statistics.median(warm)
    print(f"cold (audited, stored): {cold_s:.2f} s")
    print(f"warm (from the cache):  {warm_s:.2f} s")
    print(f"warm / cold: {warm_s / cold_s:.3f} ({'ok' if warm_s / cold_s <= 0.10 else 'over'} the 10% goal)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
