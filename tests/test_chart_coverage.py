"""The coverage chart (shimkit.audit.chart): the counts it draws, that benchmarks/chart_coverage.py's rerun
replaces its block in the Markdown, and that the `--report` Markdown and the sweep's Markdown carry it."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from shimkit.audit import chart

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("chart_coverage", ROOT / "benchmarks" / "chart_coverage.py")
assert _spec is not None and _spec.loader is not None
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)


def _row(op: str, stock: str, shimkit: str, dtype: str = "float32") -> dict[str, str]:
    return {"op": op, "dtype": dtype, "stock": stock, "shimkit": shimkit, "stock_detail": "", "shimkit_detail": ""}


SWEEP = {"results": [
    _row("nn.functional.relu", "clean", "clean"),
    _row("nn.functional.gelu", "clean", "clean"),
    _row("nn.functional.pdist", "missing", "clean"),       # fixed by shimkit
    _row("nn.functional.rrelu", "missing", "missing"),
    _row("linalg.det", "missing", "clean"),
    _row("linalg.qr", "pre-backend", "pre-backend"),
    _row("linalg.pinv", "pre-backend", "pre-backend"),
    _row("fft.fft", "error", "error"),
    _row("special.i0e", "pre-backend", "clean"),
    _row("special.zeta", "pre-backend", "limitation"),
    _row("add", "clean", "clean"),
    _row("sort", "missing", "clean"),
    _row("unique", "pre-backend", "pre-backend"),
    _row("view_as_real", "no-sample", "no-sample"),       # never audited: left out
    _row("nonzero_static", "not-exportable", "not-exportable"),
    _row("add", "clean", "missing", dtype="float16"),     # another dtype: left out by default
]}


def _table(text: str) -> dict[str, list[int]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[1].isdigit():
            rows[cells[0]] = [int(c) for c in cells[1:]]
    return rows


def _bars(text: str) -> list[list[float]]:
    return [[float(v) for v in m.group(1).split(",")] for m in re.finditer(r"^\s*bar \[([^\]]*)\]", text, re.M)]


def test_counts_per_family():
    text = chart.chart_sweep(SWEEP)
    # group: total, clean stock, clean with shimkit, missing, stops (to_edge), other
    assert _table(text) == {
        "nn.functional": [4, 2, 3, 1, 0, 0],
        "linalg": [3, 0, 1, 0, 2, 0],
        "fft": [1, 0, 0, 0, 0, 1],
        "special": [2, 0, 1, 0, 0, 1],
        "core": [3, 1, 2, 0, 1, 0],
    }
    assert '"nn.functional (4)", "linalg (3)", "fft (1)", "special (2)", "core (3)"' in text
    # Overlapping bars, tallest first: total, then down to the clean-stock segment alone.
    assert _bars(text) == [
        [4, 3, 1, 2, 3],   # + other
        [4, 3, 0, 1, 3],   # + stops
        [4, 1, 0, 1, 2],   # + missing
        [3, 1, 0, 1, 2],   # clean with shimkit
        [2, 0, 0, 0, 1],   # clean stock
    ]
    assert "13 audited" in text
    assert text.startswith(chart.BEGIN) and text.endswith(chart.END)
    assert "```mermaid" in text and "xychart-beta" in text


def test_every_dtype_and_shares():
    every = _table(chart.chart_sweep(SWEEP, dtype=None))
    assert every["core"] == [4, 2, 2, 1, 1, 0]   # float16 `add`: clean stock, missing with shimkit
    shares = _bars(chart.chart_sweep(SWEEP, share=True))
    assert shares[0] == [100, 100, 100, 100, 100]
    assert shares[-1] == [50, 0, 0, 0, 33.3]


def test_rerun_replaces_the_block(tmp_path):
    doc = tmp_path / "coverage.md"
    doc.write_text("# Op coverage\n\n## Totals\n\n| a | b |\n\n## Fixed by shimkit\n\n- x\n")
    data = tmp_path / "coverage.json"
    data.write_text(json.dumps(SWEEP))
    assert script.main(["--json", str(data), "--markdown", str(doc)]) == 0
    first = doc.read_text()
    assert first.count(chart.BEGIN) == 1 and first.count(chart.END) == 1
    # Put after the first section, before the next heading; what was there is kept.
    assert first.index("## Totals") < first.index(chart.BEGIN) < first.index(chart.END) < first.index("## Fixed")
    assert first.endswith("## Fixed by shimkit\n\n- x\n")

    assert script.main(["--json", str(data), "--markdown", str(doc)]) == 0
    assert doc.read_text() == first                     # same data: same file, not a second block

    SWEEP2 = {"results": SWEEP["results"] + [_row("linalg.inv", "missing", "clean")]}
    data.write_text(json.dumps(SWEEP2))
    assert script.main(["--json", str(data), "--markdown", str(doc)]) == 0
    second = doc.read_text()
    assert second.count(chart.BEGIN) == 1 and second.count("```mermaid") == 1
    assert _table(second)["linalg"] == [4, 0, 2, 0, 2, 0]
    assert second.replace(second[second.index(chart.BEGIN):second.index(chart.END)], "") == \
        first.replace(first[first.index(chart.BEGIN):first.index(chart.END)], "")


def test_audit_reports_by_suite():
    stock = {"plugins": False, "models": [
        {"name": "metal/whisper", "status": "clean"},
        {"name": "metal/llama", "status": "missing"},
        {"name": "tools/cuda_models.py:gru", "status": "error"},
        {"name": "conformer_block", "status": "clean"},
    ]}
    shimkit = {"plugins": True, "models": [
        {"name": "metal/whisper", "status": "clean"},
        {"name": "metal/llama", "status": "clean"},
        {"name": "tools/cuda_models.py:gru", "status": "stopped"},
        {"name": "conformer_block", "status": "wrong"},
    ]}
    text = chart.chart_audit([stock, shimkit], ["stock.json", "shimkit.json"])
    assert _table(text) == {
        "metal": [2, 1, 2, 0, 0, 0],
        "cuda_models.py": [1, 0, 0, 0, 1, 0],
        "zoo": [1, 1, 0, 0, 0, 1],
    }
    only = chart.chart_audit([shimkit], ["shimkit.json"])
    assert "made clean by shimkit" not in only          # no stock run: that segment cannot be told apart
    assert len(_bars(only)) == 4
    assert _table(only.replace("| - |", "| 0 |"))["metal"] == [2, 0, 2, 0, 0, 0]


def _model(name: str, status: str) -> dict:
    return {"name": name, "status": status, "missing": ["aoti_torch_mps_x"] if status == "missing" else [],
            "failure": None, "kernels": []}


def _report(plugins: bool, statuses: dict[str, str]) -> dict:
    models = [_model(name, status) for name, status in statuses.items()]
    return {"plugins": plugins, "models": models, "plugin_conflicts": [],
            "summary": {"models": len(models), "clean": sum(m["status"] == "clean" for m in models)}}


def test_the_report_markdown_carries_the_chart():
    from shimkit.audit.cli import coverage_table

    shimkit = _report(True, {"metal/whisper": "clean", "metal/llama": "clean", "conformer_block": "missing"})
    stock = _report(False, {"metal/whisper": "clean", "metal/llama": "missing", "conformer_block": "missing"})
    text = coverage_table(shimkit, stock)
    block = text[text.index(chart.BEGIN):text.index(chart.END) + len(chart.END)]
    assert _table(block) == {"metal": [2, 1, 2, 0, 0, 0], "zoo": [1, 0, 0, 1, 0, 0]}
    assert "made clean by shimkit" in block and "`shimkit audit --report`" in block
    assert text.index("clean with shimkit;") < text.index(chart.BEGIN)   # under the summary line
    alone = coverage_table(shimkit, None)
    assert "made clean by shimkit" not in alone
    assert _table(alone.replace("| - |", "| 0 |"))["metal"] == [2, 0, 2, 0, 0, 0]


def test_the_sweeps_markdown_keeps_the_chart_when_regenerated(tmp_path):
    from shimkit.audit.coverage import OpResult, to_markdown

    results = [OpResult(**{k: v for k, v in row.items()}) for row in SWEEP["results"]]
    doc = tmp_path / "coverage.md"
    doc.write_text(to_markdown(results, seconds=1.0, jobs=1))
    generated = doc.read_text()
    assert generated.count(chart.BEGIN) == 1 and generated.count(chart.END) == 1
    assert _table(generated[generated.index(chart.BEGIN):])["linalg"] == [3, 0, 1, 0, 2, 0]
    assert generated.index("## Totals") < generated.index(chart.BEGIN) < generated.index("## Fixed by shimkit")
    # The script's rerun from the stored JSON replaces that block in place; nothing else changes.
    data = tmp_path / "coverage.json"
    data.write_text(json.dumps(SWEEP))
    assert script.main(["--json", str(data), "--markdown", str(doc)]) == 0
    rerun = doc.read_text()
    assert rerun.count(chart.BEGIN) == 1
    outside = lambda text: text[:text.index(chart.BEGIN)] + text[text.index(chart.END):]  # noqa: E731
    assert outside(rerun) == outside(generated)
    assert _table(rerun[rerun.index(chart.BEGIN):]) == _table(generated[generated.index(chart.BEGIN):])
