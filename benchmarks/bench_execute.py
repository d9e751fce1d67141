"""What ``--execute`` costs on models at the sizes users deploy (issue 69 part 3): each model of
benchmarks/realsize_models.py audited plain and with ``--execute``, one after the other, afresh (``--no-cache``).

    .venv/bin/python benchmarks/bench_execute.py [MODEL ...]

Per model: the audit's own time (its JSON ``timings_s.total``: export, lowering, Inductor, code generation and,
with ``--execute``, ``numerics``: building the generated program against the stand-in runtime, loading its
weights, running it, eager and the float64 reference, and comparing), the ratio of the two, the numerics phase
alone, the verdict, and the audit process's peak resident memory (``ru_maxrss`` of the child: the float64
reference included). Issue 69's bar: ``--execute`` within 1.2x of the plain audit.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

MODELS = ("whisper_tiny_encoder", "smollm_135m", "llama_1b_layers")
FACTORIES = Path(__file__).resolve().parent / "realsize_models.py"


def audit(model: str, execute: bool) -> tuple[dict, float]:
    """The audit's JSON report of ``model`` and the child's peak resident memory in GiB."""
    command = [sys.executable, "-m", "shimkit", "audit", f"{FACTORIES}:{model}", "--json", "--no-cache", "-j", "1",
               "--quiet", *(["--execute"] if execute else [])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    finished = subprocess.run(command, capture_output=True, text=True)
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 2 ** 20
    if not finished.stdout.strip():
        raise SystemExit(f"{model}: the audit printed no report\n{finished.stderr[-3000:]}")
    return json.loads(finished.stdout), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    print(f"{'model':22} {'plain':>8} {'execute':>8} {'ratio':>6} {'numerics':>9}  verdict  peak memory")
    for model in args.models:
        plain, _ = audit(model, execute=False)
        executed, peak = audit(model, execute=True)
        row = executed["models"][0]
        plain_s, executed_s = plain["models"][0]["timings_s"]["total"], row["timings_s"]["total"]
        print(f"{model:22} {plain_s:7.1f}s {executed_s:7.1f}s {executed_s / plain_s:6.2f} "
              f"{row['timings_s']['numerics']:8.1f}s  {row.get('status', '?'):7}  {peak:.1f} GiB", flush=True)


if __name__ == "__main__":
    main()
