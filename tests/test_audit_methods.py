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
import torch

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


    SEEN = []  # what the exporter's transform pass saw, a list per lowering


    class Seen(torch.fx.passes.infra.pass_base.PassBase):
        def call(self, graph_module):
            SEEN.append(sorted({str(n.target) for n in graph_module.graph.nodes if n.op == "call_function"}))
            return torch.fx.passes.infra.pass_base.PassResult(graph_module, False)


    class Half(torch.nn.Module):
        def forward(self, x):
            return (x.to(torch.float16) * 2).to(torch.float32)


    def recipe():
        # As optimum-executorch's Metal recipe lowers its methods: its own EdgeCompileConfig fields and passes.
        from shimkit.audit.programs import Lowering, Program

        return Program({"forward": (Half(), (torch.ones(4),))}, Lowering({"_skip_dim_order": True}, (Seen(),)))


    def misspelt_recipe():
        from shimkit.audit.programs import Lowering, Program

        return Program({"forward": (Half(), (torch.ones(4),))}, Lowering({"skip_dim_order": True}))


    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("cache", torch.zeros(1, 8, 4))
            self.register_buffer("scale", torch.tensor(2.0), persistent=False)
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, input_ids, cache_position):
            self.cache.index_copy_(1, cache_position, self.proj(input_ids))
            return self.cache.cumsum(1) * self.scale


    def keywords():
        # As optimum-executorch exports a causal LM: keyword inputs, a non-persistent buffer, a cache it writes.
        length = Dim("length", min=1, max=7)
        return {"forward": torch.export.export(
            Step(), (), {"input_ids": torch.randn(1, 3, 4), "cache_position": torch.arange(3)},
            dynamic_shapes={"input_ids": {1: length}, "cache_position": {0: length}}, strict=False)}


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


def test_a_program_is_lowered_as_its_exporter_lowers_it(program_file):
    from shimkit.audit.runner import audit_loaded
    from shimkit.backend import backend_config

    (loaded,) = load_methods(f"{program_file}:recipe")
    assert loaded.name.endswith("#forward") and dict(loaded.lowering.compile_options) == {"_skip_dim_order": True}
    (seen,) = loaded.lowering.transform_passes
    runs = type(seen).call.__globals__["SEEN"]  # the factory file's own list
    for config in (backend_config("mps"), None):  # with shimkit's plugins, then stock
        result = audit_loaded(loaded, config=config)
        assert result.failure is None, result.failure
    assert len(runs) == 2  # the exporter's pass ran in both lowerings
    for ops in runs:  # _skip_dim_order: the casts stay _to_copy, as the recipe's edge program has them
        assert any("aten._to_copy.default" in op for op in ops) and not any("dim_order" in op for op in ops), ops


def test_a_lowering_names_what_is_not_an_edge_compile_config_field(program_file):
    with pytest.raises(ModelLoadError, match=r"'skip_dim_order' is not an EdgeCompileConfig field .*_skip_dim_order"):
        load_methods(f"{program_file}:misspelt_recipe")


def test_an_exported_method_with_keyword_inputs_is_called_with_them_in_order(program_file, tmp_path):
    (loaded,) = load_methods(f"{program_file}:keywords")
    assert loaded.exported.example_inputs[1] == {}  # flat and positional, as ExecuTorch's runtime calls a method
    assert list(loaded.exported.graph_signature.user_inputs) == ["input_ids", "cache_position"]
    assert {str(r.lower) for r in loaded.exported.range_constraints.values()} == {"1"}
    code, report, _ = audit("--check-numerics", "--cache-dir", str(tmp_path), f"{program_file}:keywords")
    (entry,) = report["models"]
    assert code == 0 and entry["status"] == "clean", entry
    checked = entry["numerics"]["checks"]
    assert len(checked) > 1 and any("input_ids.shape[1]" in c["sizes"] for c in checked), checked
