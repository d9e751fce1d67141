"""Coverage charts: per op family or model suite, how many are clean stock, made clean by shimkit, missing
kernels, stopped before the backend or other, as a Mermaid ``xychart-beta`` block GitHub draws, its legend and a
table of the counts. Only the standard library: the chart is text, so nothing is installed and no image is kept.

Drawn into the ``--report`` Markdown (:func:`chart_audit`), into the coverage sweep's Markdown
(:func:`chart_sweep`, by ``python -m shimkit.audit.coverage --markdown``) and by ``benchmarks/chart_coverage.py``
from stored JSON. The block sits between ``<!-- chart:begin -->`` and ``<!-- chart:end -->``; :func:`insert`
replaces it in a file that has one.

Groups: for the sweep, the OpInfo name's family (``nn.functional.*``, ``linalg.*``, ``fft.*``, ``special.*``,
``masked.*``, the rest "core"); for audit reports, the model's suite (``metal/whisper-encoder-f32`` ->
``metal``, ``tools/cuda_models.py:gru`` -> ``cuda_models.py``, a built-in zoo name -> ``zoo``).

Each group is one bar, stacked from the bottom: clean stock (and still clean with shimkit), made clean by
shimkit, missing kernels, stopped before the backend (the sweep's ``pre-backend``: ``to_edge`` refuses it;
an audit's ``stopped``), other (error, limitation, wrong numerics, unchecked, ...). The top of the second
segment is "clean with shimkit". Mermaid's ``xychart-beta`` has no stacked bars, so the bars are drawn
overlapping, tallest (cumulative) first; the legend is a line of coloured squares under the chart. The sweep's
ops that never reach the audit (no OpInfo sample for the dtype, not exportable, timed out) are left out, so
the bars add up to its "eligible" count.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

BEGIN = "<!-- chart:begin -->"
END = "<!-- chart:end -->"

# What leaves a sweep's op out of the count: torch cannot export it, OpInfo has no sample, or the audit did not
# finish. Everything else, a stop in to_edge included, is the lowering's success or failure.
INELIGIBLE = ("not-exportable", "no-sample", "timeout")
FAMILIES = ("nn.functional", "linalg", "fft", "special", "masked")
CORE = "core"

# Stack segments, bottom to top: key, legend label, colour, the emoji square that stands for it in the legend.
SEGMENTS = (
    ("stock", "clean stock", "#2e7d32", "🟩"),
    ("fixed", "made clean by shimkit", "#42a5f5", "🟦"),
    ("missing", "missing kernels", "#ffb300", "🟨"),
    ("stops", "stops before the backend (to_edge)", "#e53935", "🟥"),
    ("other", "other (error, limitation, wrong, ...)", "#757575", "⬛"),
)
STOPS = ("pre-backend", "stopped")


def family(op: str, families: Sequence[str] = FAMILIES) -> str:
    """The OpInfo family of ``op``: the longest of ``families`` it starts with (as a dotted prefix), else core."""
    for prefix in sorted(families, key=len, reverse=True):
        if op == prefix or op.startswith(prefix + "."):
            return prefix
    return CORE


def suite(model: str) -> str:
    """The suite of an audited model's name: ``metal/x`` -> ``metal``, ``path/file.py:fn`` -> ``file.py``."""
    if ":" in model:
        return Path(model.split(":", 1)[0]).name or model
    if "/" in model:
        return model.split("/", 1)[0]
    return "zoo"


def segment(stock: str | None, shimkit: str | None) -> str:
    """The stack segment of one op or model. With both runs known, the shimkit run decides and "clean" splits
    by the stock run; with one run only, that run decides."""
    status = shimkit if shimkit is not None else stock
    if status == "clean":
        return "fixed" if shimkit is not None and stock not in (None, "clean") else "stock"
    if status == "missing":
        return "missing"
    if status in STOPS:
        return "stops"
    return "other"


def count(rows: Iterable[tuple[str, str | None, str | None]]) -> dict[str, dict[str, int]]:
    """Per group, the count of each segment, plus "clean_stock" and "clean_shimkit" (the stock run's and the
    shimkit run's clean counts, whatever the other run says) and "total". Rows: (group, stock, shimkit)."""
    groups: dict[str, dict[str, int]] = {}
    for group, stock, shimkit in rows:
        counts = groups.setdefault(group, {key: 0 for key, *_ in SEGMENTS} | {
            "clean_stock": 0, "clean_shimkit": 0, "total": 0})
        counts[segment(stock, shimkit)] += 1
        counts["clean_stock"] += stock == "clean"
        counts["clean_shimkit"] += shimkit == "clean"
        counts["total"] += 1
    return groups


def sweep_rows(data: dict[str, Any], dtype: str | None = "float32",
               families: Sequence[str] = FAMILIES) -> list[tuple[str, str | None, str | None]]:
    """The sweep's (family, stock, shimkit) rows, leaving out what was never audited (and other dtypes)."""
    return [(family(r["op"], families), r["stock"], r["shimkit"]) for r in data["results"]
            if (dtype is None or r.get("dtype") == dtype) and r["stock"] not in INELIGIBLE]


def audit_rows(reports: Sequence[dict[str, Any]]) -> list[tuple[str, str | None, str | None]]:
    """(suite, stock, shimkit) rows from ``shimkit audit --json`` reports, matched by model name: a report with
    ``"plugins": false`` is the stock run, any other the shimkit run."""
    stock: dict[str, str] = {}
    shimkit: dict[str, str] = {}
    for report in reports:
        into = stock if report.get("plugins") is False else shimkit
        for model in report.get("models", []):
            into[model["name"]] = model["status"]
    names = list(dict.fromkeys([*shimkit, *stock]))
    return [(suite(name), stock.get(name), shimkit.get(name)) for name in names]


def _order(groups: dict[str, dict[str, int]], first: Sequence[str]) -> list[str]:
    known = [g for g in first if g in groups]
    return known + sorted((g for g in groups if g not in known), key=lambda g: (-groups[g]["total"], g))


def to_mermaid(groups: dict[str, dict[str, int]], title: str, order: Sequence[str] = (), share: bool = False,
               stock_run: bool = True, shimkit_run: bool = True) -> str:
    """The Markdown: a fenced ``xychart-beta`` block, its legend and a table of the counts.

    ``stock_run``/``shimkit_run`` say which runs the data has; a segment that cannot be told apart (made
    clean by shimkit, without a stock run) is left out of the chart and the legend."""
    names = _order(groups, order)
    keys = [key for key, *_ in SEGMENTS if (stock_run and shimkit_run) or key != "fixed"]
    labels = {key: label for key, label, *_ in SEGMENTS}
    if not stock_run:
        labels["stock"] = "clean with shimkit"
    elif not shimkit_run:
        labels["stock"] = "clean (stock run only)"

    def value(counts: dict[str, int], upto: int) -> float:
        height = sum(counts[k] for k in keys[:upto + 1])
        return round(100 * height / counts["total"], 1) if share and counts["total"] else height

    # Overlapping bars, tallest first: series i is the sum of the segments 0..i, drawn in reverse.
    series = [[value(groups[g], i) for g in names] for i in range(len(keys))][::-1]
    colours = [next(c for k, _, c, _ in SEGMENTS if k == key) for key in keys][::-1]
    top = 100 if share else max((groups[g]["total"] for g in names), default=1) or 1
    axis = ", ".join(json.dumps(f"{g} ({groups[g]['total']})") for g in names)
    config = {"themeVariables": {"xyChart": {"plotColorPalette": ", ".join(colours)}}}
    lines = [BEGIN, "", "```mermaid", f"%%{{init: {json.dumps(config)}}}%%", "xychart-beta horizontal",
             f"    title {json.dumps(title)}", f"    x-axis [{axis}]",
             f"    y-axis {json.dumps('share of the group (%)' if share else 'count')} 0 --> {top}"]
    lines += [f"    bar [{', '.join(_number(v) for v in values)}]" for values in series]
    lines += ["```", ""]
    lines.append("Stacked from the axis: " + " · ".join(
        f"{next(e for k, _, _, e in SEGMENTS if k == key)} {labels[key]}" for key in keys) + ".")
    if stock_run and shimkit_run:
        lines[-1] += (" The top of 🟦 is everything clean with shimkit; the statuses above it are the shimkit "
                      "run's.")
    lines += ["", "| group | total | clean stock | clean with shimkit | missing | stops (to_edge) | other |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for g in names:
        c = groups[g]
        stock_clean = c["clean_stock"] if stock_run else "-"
        shimkit_clean = c["clean_shimkit"] if shimkit_run else "-"
        lines.append(f"| {g} | {c['total']} | {stock_clean} | {shimkit_clean} | {c['missing']} | {c['stops']} "
                     f"| {c['other']} |")
    return "\n".join(lines)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def insert(markdown: str, block: str) -> str:
    """``markdown`` with ``block`` (which starts with BEGIN and, once :func:`finish`-ed, ends with END) between
    the markers, replacing what was there; without markers, after the first section (before the second
    ``## `` heading), else at the end."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if pattern.search(markdown):
        return pattern.sub(lambda _: block, markdown, count=1)
    if not markdown.strip():
        return block + "\n"
    headings = [m.start() for m in re.finditer(r"^## ", markdown, re.M)]
    if len(headings) >= 2:
        at = headings[1]
        return markdown[:at] + block + "\n\n" + markdown[at:]
    return markdown.rstrip("\n") + "\n\n" + block + "\n"


def finish(chart: str, sources: Sequence[str], command: str) -> str:
    """The chart with the sentence that says how it was drawn (from which files, by which command), and the end
    marker. A source in angle brackets (``<this audit>``) is not a file and is written without them."""
    named = ", ".join(s[1:-1] if s.startswith("<") else f"`{s}`" for s in sources)
    return (f"{chart}\n\nThis chart is drawn from {named} by `{command}`; rerunning that command replaces the "
            f"block between the chart markers.\n\n{END}")


def chart_sweep(data: dict[str, Any], source: str = "benchmarks/results/coverage.json", share: bool = False,
                dtype: str | None = "float32", families: Sequence[str] = FAMILIES,
                command: str = ".venv/bin/python benchmarks/chart_coverage.py") -> str:
    """The finished block for a coverage sweep's JSON (as loaded)."""
    groups = count(sweep_rows(data, dtype, families))
    total = sum(c["total"] for c in groups.values())
    what = f"{dtype} ops" if dtype else "(op, dtype) pairs"
    title = f"OpInfo {what} through the Metal lowering, by family ({total} audited)"
    return finish(to_mermaid(groups, title, order=(*families, CORE), share=share), [source], command)


def chart_audit(reports: Sequence[dict[str, Any]], sources: Sequence[str], share: bool = False,
                command: str = ".venv/bin/python benchmarks/chart_coverage.py --audit ...") -> str:
    """The finished block for ``shimkit audit --json`` reports (as loaded)."""
    rows = audit_rows(reports)
    stock_run = any(stock is not None for _, stock, _ in rows)
    shimkit_run = any(shimkit is not None for _, _, shimkit in rows)
    title = f"Audited models by suite ({len(rows)} models)"
    chart = to_mermaid(count(rows), title, share=share, stock_run=stock_run, shimkit_run=shimkit_run)
    return finish(chart, sources, command)
