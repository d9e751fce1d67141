"""A chart of the coverage sweep (or of ``shimkit audit --json`` reports), as a Mermaid block GitHub draws.

    .venv/bin/python benchmarks/chart_coverage.py                       # docs/coverage.md from the stored sweep
    .venv/bin/python benchmarks/chart_coverage.py --share               # each group as shares of 100%
    .venv/bin/python benchmarks/chart_coverage.py --audit stock.json shimkit.json --markdown report.md
    .venv/bin/python benchmarks/chart_coverage.py --print               # the block on stdout, no file written

The chart, its groups and segments are :mod:`shimkit.audit.chart` (the same block ``shimkit audit --report``
writes, and ``python -m shimkit.audit.coverage --markdown`` keeps in docs/coverage.md); this script draws it
from stored JSON: the sweep's (``benchmarks/results/coverage.json``, written by ``python -m
shimkit.audit.coverage --json``) or ``shimkit audit --json`` reports, and puts it between the chart markers of
a Markdown file, replacing what was there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from shimkit.audit.chart import chart_audit, chart_sweep, insert

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "coverage.json"
DEFAULT_MARKDOWN = ROOT / "docs" / "coverage.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/chart_coverage.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="the sweep's JSON (coverage.json)")
    parser.add_argument("--audit", type=Path, nargs="+", metavar="REPORT",
                        help="chart these `shimkit audit --json` reports by suite instead of the sweep")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="the Markdown file to put the chart in (default: docs/coverage.md for the sweep; "
                             "required with --audit unless --print)")
    parser.add_argument("--print", action="store_true", help="write the block to stdout, touch no file")
    parser.add_argument("--share", action="store_true", help="plot each group as shares of 100%%, not counts")
    parser.add_argument("--dtype", default="float32", help="the sweep's dtype to chart ('all' for every pair)")
    args = parser.parse_args(argv)

    shown = ["--share"] if args.share else []
    if args.audit:
        sources = [_relative(p) for p in args.audit]
        reports = [json.loads(p.read_text()) for p in args.audit]
        command = " ".join([".venv/bin/python benchmarks/chart_coverage.py --audit", *sources, *shown])
        block = chart_audit(reports, sources, share=args.share, command=command)
        target = args.markdown
        if target is None and not args.print:
            parser.error("--audit needs --markdown FILE (or --print)")
    else:
        dtype = None if args.dtype == "all" else args.dtype
        if args.dtype != "float32":
            shown.append(f"--dtype {args.dtype}")
        if args.json != DEFAULT_JSON:
            shown.append(f"--json {_relative(args.json)}")
        command = " ".join([".venv/bin/python benchmarks/chart_coverage.py", *shown])
        block = chart_sweep(json.loads(args.json.read_text()), _relative(args.json), share=args.share,
                            dtype=dtype, command=command)
        target = args.markdown or DEFAULT_MARKDOWN
    if args.print:
        print(block)
        return 0
    assert target is not None
    target.write_text(insert(target.read_text() if target.exists() else "", block))
    print(f"chart written to {_relative(target)}", file=sys.stderr)
    return 0


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
