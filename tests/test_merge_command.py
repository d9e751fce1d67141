"""`shimkit merge`: a subcommand of its own (it was `shimkit audit merge`, a magic first model name), its
arguments checked before torch is imported, and the --report Markdown it shares with `shimkit audit`."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shimkit.audit.cli import MESSAGE_CELL_WIDTH, configure_parser, run, shorten

SHIMKIT = str(Path(sys.executable).with_name("shimkit"))  # the console script pip installed
URL = "https://github.com/pytorch/executorch/blob/main/backends/apple/metal/README.md#supported-operators"

FAILING_MODEL = textwrap.dedent(f"""
    import torch

    class Refuses(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("this model refuses to be exported on purpose, read the guide at {URL} "
                               "before trying again with another configuration of the model")

    def model():
        return Refuses(), (torch.ones(2),)
""")

MERGE_MODEL = textwrap.dedent("""
    import torch

    class Merge(torch.nn.Module):
        def forward(self, a, b):
            return torch.cat([a, b]) * 2

    def model():
        return Merge(), (torch.ones(2), torch.ones(3))
""")


def audit(*argv: str) -> tuple[int, str, str]:
    """``shimkit audit ARGV`` in this process (its imports are paid once for the module)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(configure_parser(argparse.ArgumentParser()).parse_args(["--quiet", "--no-cache", *argv]),
               stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


def shimkit(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SHIMKIT, *argv], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    """Real `shimkit audit --json` reports: two shards with plugins (cumsum and seed_split_linear clean), the
    same models stock (cumsum missing), and a model whose forward raises with a URL in a long message."""
    folder = tmp_path_factory.mktemp("reports")
    (folder / "refuses.py").write_text(FAILING_MODEL)
    made = {}
    for name, argv in {"shard1": ["--shard", "1/2", "seed_split_linear", "cumsum"],
                       "shard2": ["--shard", "2/2", "seed_split_linear", "cumsum"],
                       "stock": ["--no-plugins", "seed_split_linear", "cumsum"],
                       "refuses": [f"{folder / 'refuses.py'}:model"]}.items():
        code, out, err = audit("-j", "1", "--json", *argv)
        assert code in (0, 1, 2) and out, err
        made[name] = folder / f"{name}.json"
        made[name].write_text(out)
    return made


def test_merge_is_a_subcommand_that_combines_shards(reports, tmp_path):
    result = shimkit("merge", str(reports["shard1"]), str(reports["shard2"]), "--json")
    assert result.returncode == 0, result.stderr
    merged = json.loads(result.stdout)
    assert [m["name"] for m in merged["models"]] == ["seed_split_linear", "cumsum"]
    assert merged["summary"]["clean"] == 2 and merged["exit_code"] == 0 and merged["plugins"] is True
    assert "deprecated" not in result.stderr

    text = shimkit("merge", str(reports["shard1"]), str(reports["shard2"]))
    assert text.returncode == 0 and "cumsum: CLEAN" in text.stdout

    stock = shimkit("merge", str(reports["stock"]))
    assert stock.returncode == 1 and "cumsum: MISSING" in stock.stdout  # the exit status is the audit's


def test_merge_writes_the_markdown_report_with_a_stock_column_only_when_known(reports, tmp_path):
    with_stock, without = tmp_path / "with.md", tmp_path / "without.md"
    result = shimkit("merge", str(reports["shard1"]), str(reports["shard2"]), "--report", str(with_stock),
                     "--stock", str(reports["stock"]))
    assert result.returncode == 0, result.stderr
    table = with_stock.read_text()
    assert "| model | shimkit | missing kernels | stock |" in table
    assert "| `cumsum` | clean |  | missing |" in table
    assert "2 of 2 clean with shimkit; 1 stock." in table

    assert shimkit("merge", str(reports["shard1"]), str(reports["shard2"]), "--report", str(without)).returncode == 0
    table = without.read_text()
    assert "| model | shimkit | missing kernels |\n" in table and "stock" not in table.split("<!-- chart:begin")[0].split("\n", 2)[2]
    assert "2 of 2 clean with shimkit." in table


def test_merge_refuses_reports_that_do_not_go_together(reports, tmp_path):
    mixed = shimkit("merge", str(reports["shard1"]), str(reports["stock"]))
    assert mixed.returncode == 2 and "merge reports of one setting" in mixed.stderr and not mixed.stdout
    not_stock = shimkit("merge", str(reports["shard1"]), "--report", str(tmp_path / "r.md"),
                        "--stock", str(reports["shard2"]))
    assert not_stock.returncode == 2 and "--stock takes `--no-plugins` reports" in not_stock.stderr
    assert not (tmp_path / "r.md").exists()


def _imported(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "shimkit", *argv], capture_output=True,
                          text=True, timeout=300, cwd=cwd)
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, modules


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: REPORT"),
    (["missing.json"], "missing.json: not a readable JSON report (No such file or directory)"),
    (["other.json"], "other.json: not a `shimkit audit --json` report"),
    (["broken.json"], "broken.json: not a readable JSON report"),
    (["SHARD", "--report", "no/such/folder/r.md"], "cannot be written"),
    (["SHARD", "--report", "."], "is a folder, not a file to write"),
    (["SHARD", "--stock", "SHARD"], "--stock fills the stock column of --report FILE"),
    (["SHARD", "--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_arguments_are_refused_with_merges_usage_before_torch_is_imported(reports, tmp_path, argv, message):
    (tmp_path / "other.json").write_text(json.dumps({"tool": "something else"}))
    (tmp_path / "broken.json").write_text("{not json")
    argv = [str(reports["shard1"]) if a == "SHARD" else a for a in argv]
    done, modules = _imported(["merge", *argv], tmp_path)
    assert done.returncode == 2
    assert "usage: shimkit merge" in done.stderr and message in done.stderr
    assert "torch" not in modules and "executorch" not in modules


def test_audit_merge_still_merges_for_one_release_with_a_deprecation_on_stderr(reports):
    result = shimkit("audit", "merge", str(reports["shard1"]), str(reports["shard2"]), "--json")
    assert result.returncode == 0
    assert [m["name"] for m in json.loads(result.stdout)["models"]] == ["seed_split_linear", "cumsum"]
    assert "`shimkit audit merge A.json ...` is deprecated" in result.stderr and "shimkit merge" in result.stderr


def test_a_model_named_merge_is_audited_not_taken_for_the_merge_command(tmp_path, monkeypatch):
    from shimkit.audit.loader import _load_file_factory
    from shimkit.audit.zoo import ZOO, ZooModel

    (tmp_path / "merge.py").write_text(MERGE_MODEL)
    loaded = _load_file_factory(f"{tmp_path / 'merge.py'}:model")
    monkeypatch.setitem(ZOO, "merge", ZooModel("merge", lambda: (loaded.model, loaded.example_inputs),
                                               "a zoo-like model named merge"))
    code, out, err = audit("-j", "1", "--json", "merge", f"{tmp_path / 'merge.py'}:model")
    assert code == 0, err
    assert [m["name"] for m in json.loads(out)["models"]] == ["merge", f"{tmp_path / 'merge.py'}:model"]
    assert "deprecated" not in err

    monkeypatch.delitem(ZOO, "merge")  # no model of that name: an unknown model, not "merge needs reports"
    code, out, err = audit("-j", "1", "--json", "merge")
    assert code == 2 and "'merge' is not a zoo model" in json.loads(out)["models"][0]["failure"]["message"]


def test_the_markdown_report_cuts_a_long_message_after_a_word_and_never_inside_a_url(reports, tmp_path):
    table = tmp_path / "refuses.md"
    result = shimkit("merge", str(reports["refuses"]), "--report", str(table))
    assert result.returncode == 2, result.stderr
    (row,) = [line for line in table.read_text().splitlines() if line.startswith("| `") and "refuses.py" in line]
    cell = row.removesuffix(" |").split(" | ")[2]
    assert URL in cell and cell.endswith(f"{URL} …")  # the whole link, the words after it left out
    assert "before trying again" not in cell

    message = json.loads(reports["refuses"].read_text())["models"][0]["failure"]["message"].splitlines()[0]
    assert URL in message and len(message) > MESSAGE_CELL_WIDTH


@pytest.mark.parametrize("text, width, expected", [
    ("short enough", 120, "short enough"),
    ("one two three four", 12, "one two …"),  # never "one two thre"
    (f"see {URL} now", 20, f"see {URL} …"),  # a URL crossing the width is kept whole
    (f"{'word ' * 30}{URL}", 120, f"{'word ' * 24}…"),  # ... or left out when the words fill the width
    ("x" * 200, 120, "x" * 120 + " …"),  # one word longer than the cell: no boundary to cut at
    ("spaced    out   words", 17, "spaced out words"),  # whole once its spaces are joined
])
def test_shorten_cuts_between_words(text, width, expected):
    assert shorten(text, width) == expected
    assert "://" not in expected or URL in expected
