"""Programs of several methods (issue 68, part 1): a factory returning a dict of method name to a model and its
inputs, or to the ``ExportedProgram`` an exporter made, is audited a method at a time, one report row per method
named ``MODEL#method``; each method's numerics are checked on the inputs it declares; ``MODEL#method`` names one;
the cache, ``-j`` workers and ``shimkit merge`` keep methods apart."""

from __future__ import annotations

import argparse
import io
import json
import textwrap

import pytest

from shimkit.audit.cli import configure_parser, run
from shimkit.audit.loader import ModelLoadError, load_methods, load_model, split_method

PROGRAM = textwrap.dedent("""
    import torch
    from torch.export import Dim


    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 16)

        def forward(self, features):
            return torch.relu(self.proj(features))


    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(32, 16)
            self.register_buffer("cache", torch.zeros(1, 12, 16))

        def forward(self, tokens, position, encoded):
            self.cache.index_copy_(1, position, self.embed(tokens))
            return self.cache.cumsum(1)[:, position] + encoded.mean(1, keepdim=True)


    def program():
        # As optimum-executorch's export() returns them: one method made by hand, one exported already.
        length = Dim("length", min=1, max=11)
        return {
            "encoder": (Encoder(), (torch.randn(1, 6, 8),), ({1: Dim("frames", min=2, max=20)},)),
            "text_decoder": torch.export.export(
                Decoder(), (torch.tensor([[3, 4, 5]]), torch.arange(3), torch.randn(1, 6, 16)),
                dynamic_shapes=({1: length}, {0: length}, None), strict=False),
        }


    def badly_named():
        return {"text-decoder": (torch.nn.ReLU(), (torch.ones(2),))}


    def none():
        return {}
""")


@pytest.fixture(scope="module")
def program_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("methods") / "seq2seq.py"
    path.write_text(PROGRAM)
    return path


def audit(*argv: str) -> tuple[int, dict, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(configure_parser(argparse.ArgumentParser()).parse_args(["--json", *argv]), stdout=stdout,
               stderr=stderr)
    return code, json.loads(stdout.getvalue()), stderr.getvalue()


def test_every_method_is_a_row_checked_on_its_own_inputs(program_file, tmp_path):
    spec = f"{program_file}:program"
    code, report, progress = audit("--check-numerics", "--cache-dir", str(tmp_path), spec)
    assert code == 0, report
    rows = [(m["name"], m["method"], m["status"]) for m in report["models"]]
    assert rows == [(f"{spec}#encoder", "encoder", "clean"), (f"{spec}#text_decoder", "text_decoder", "clean")]
    encoder, decoder = report["models"]
    assert [list(c["sizes"]) for c in encoder["numerics"]["checks"]] == [["features.shape[1]"]] * 4
    assert [c["sizes"]["tokens.shape[1]"] for c in decoder["numerics"]["checks"]] == [3, 1, 11, 4]
    assert "2 methods" in progress and f"{spec}#text_decoder: clean" in progress

    # The cache keeps each method's entry under its own program.
    code, again, progress = audit("--check-numerics", "--cache-dir", str(tmp_path), spec)
    assert [(m["name"], m["cached"]) for m in again["models"]] == [(f"{spec}#encoder", True),
                                                                  (f"{spec}#text_decoder", True)]
    assert again["models"][1]["numerics"] == decoder["numerics"]


def test_one_method_is_named_with_a_hash(program_file):
    code, report, _ = audit("--no-cache", f"{program_file}:program#text_decoder")
    assert code == 0 and [m["method"] for m in report["models"]] == ["text_decoder"]
    code, report, _ = audit("--no-cache", f"{program_file}:program#decoder")
    failure = report["models"][0]["failure"]
    assert code != 0 and failure["phase"] == "load"
    assert "has no method 'decoder'; its methods: encoder, text_decoder" in failure["message"]


def test_workers_and_merge_keep_methods_apart(program_file, tmp_path):
    spec = f"{program_file}:program"
    shards = []
    for index in (1, 2):
        # The first shard (the program and cumsum) runs in two workers.
        code, report, _ = audit("--no-cache", "-j", "2", "--shard", f"{index}/2", spec, "seed_split_linear", "cumsum")
        path = tmp_path / f"shard{index}.json"
        path.write_text(json.dumps(report))
        shards.append(str(path))
    stdout, stderr = io.StringIO(), io.StringIO()
    from shimkit.audit.cli import configure_merge_parser, run_merge

    assert run_merge(configure_merge_parser(argparse.ArgumentParser()).parse_args(["--json", *shards]),
                     stdout=stdout, stderr=stderr) == 0
    merged = json.loads(stdout.getvalue())
    assert [(m["name"], m["method"]) for m in merged["models"]] == [
        (f"{spec}#encoder", "encoder"), (f"{spec}#text_decoder", "text_decoder"), ("cumsum", None),
        ("seed_split_linear", None)]
    assert merged["summary"]["clean"] == 4


def test_loading_says_what_is_wrong_with_a_program_of_methods(program_file):
    with pytest.raises(ModelLoadError, match=r"program of 2 methods \(encoder, text_decoder\): name one as "):
        load_model(f"{program_file}:program")
    with pytest.raises(ModelLoadError, match="method name 'text-decoder' is not an identifier"):
        load_methods(f"{program_file}:badly_named")
    with pytest.raises(ModelLoadError, match="a dict of no methods"):
        load_methods(f"{program_file}:none")
    with pytest.raises(ModelLoadError, match="is a program of one method; name it without '#forward'"):
        load_methods("seed_split_linear#forward")
    assert [m.name for m in load_methods("seed_split_linear")] == ["seed_split_linear"]


@pytest.mark.parametrize("spec, split", [
    ("seq2seq.py:program#text_decoder", ("seq2seq.py:program", "text_decoder")),
    ("dir#1/model.py:make", ("dir#1/model.py:make", None)),
    ("model.pt2", ("model.pt2", None)),
    ("#encoder", ("#encoder", None)),
])
def test_a_method_is_what_follows_the_last_hash_when_it_is_an_identifier(spec, split):
    assert split_method(spec) == split
