"""MODEL arguments: zoo names, file.py:factory, .pt2 — and clear errors for every way to get one wrong."""

import os

import pytest
import torch

from shimkit.audit import ModelLoadError, load_model
from shimkit.audit.zoo import ZOO


def _write(tmp_path, body, name="model.py"):
    path = tmp_path / name
    path.write_text("import torch\n" + body)
    return path


def test_every_zoo_model_loads_with_inputs_its_model_accepts():
    for name in ZOO:
        loaded = load_model(name)
        assert loaded.name == name
        with torch.no_grad():
            loaded.model.eval()(*loaded.example_inputs)


def test_zoo_factories_leave_the_global_rng_alone():
    state = torch.random.get_rng_state()
    load_model("mobilenet_v2")
    assert torch.equal(state, torch.random.get_rng_state())


def test_unknown_zoo_name_lists_the_zoo_and_suggests_a_close_name():
    with pytest.raises(ModelLoadError) as error:
        load_model("mobilenet_v3_smal")
    message = str(error.value)
    assert "'mobilenet_v3_smal' is not a zoo model" in message
    assert "Did you mean mobilenet_v3_small" in message
    assert "seed_split_linear" in message


def test_file_factory_loads_model_and_inputs(tmp_path):
    path = _write(tmp_path, "def make():\n    return torch.nn.ReLU(), torch.randn(2)\n")
    loaded = load_model(f"{path}:make")
    assert isinstance(loaded.model, torch.nn.ReLU)
    assert len(loaded.example_inputs) == 1



def test_a_factory_of_random_weights_builds_the_same_model_each_load_and_leaves_the_callers_rng(tmp_path):
    # Seeded, two audits judge the same weights and generate the same program, so builds are reused.
    path = _write(tmp_path, "def make():\n    return torch.nn.Linear(4, 3), torch.randn(2, 4)\n")
    torch.manual_seed(1234)
    state = torch.random.get_rng_state()
    first, second = load_model(f"{path}:make"), load_model(f"{path}:make")
    assert torch.equal(state, torch.random.get_rng_state())
    assert torch.equal(first.model.weight, second.model.weight)
    assert torch.equal(first.example_inputs[0], second.example_inputs[0])
    assert not torch.equal(first.model.weight, torch.nn.Linear(4, 3).weight)  # the caller's stream stays its own

@pytest.mark.parametrize("body, spec_suffix, expected", [
    ("", ":make", "no such file"),
    ("def other():\n    pass\n", ":make", "defines no callable 'make'; callables defined there: other"),
    ("def make():\n    raise ValueError('no weights here')\n", ":make",
     "the factory raised ValueError: no weights here (at "),
    ("def make():\n    return torch.nn.ReLU()\n", ":make",
     "must return (model, example_inputs) or (model, example_inputs, dynamic_shapes), or a dict of method name to "
     "those or to an ExportedProgram (or a Program of them), got ReLU"),
    ("def make():\n    return torch.nn.ReLU(), 3\n", ":make", "example_inputs must be a tensor or a tuple"),
    ("raise ImportError('broken import')\n", ":make", "importing"),
    ("def make():\n    pass\n", ":1make", "is not a Python identifier"),
])
def test_bad_file_factory_errors_say_what_is_wrong(tmp_path, body, spec_suffix, expected):
    path = tmp_path / "missing.py" if expected == "no such file" else _write(tmp_path, body)
    with pytest.raises(ModelLoadError, match=None) as error:
        load_model(f"{path}{spec_suffix}")
    assert expected in str(error.value)
    assert str(path) in str(error.value)



@pytest.mark.parametrize("body, line", [
    ("\nx = 1 +\n", "3: x = 1 +"),                                    # the parser's line
    ("import no_such_package_here\n", "2: import no_such_package_here"),  # not importlib's frame
    ("\ndef make():\n    return torch.ones(2).view(3), ()\n", "4: return torch.ones(2).view(3), ()"),  # not torch's
])
def test_a_load_error_points_at_the_users_line_not_the_import_machinery(tmp_path, body, line):
    path = _write(tmp_path, body)
    with pytest.raises(ModelLoadError) as error:
        load_model(f"{path}:make")
    assert f"(at {path}:{line})" in str(error.value)
    assert "<frozen" not in str(error.value) and "audit/loader.py" not in str(error.value)


def test_a_forward_that_raises_names_its_line_in_the_report(tmp_path):
    path = _write(tmp_path, "class M(torch.nn.Module):\n    def forward(self, x):\n        raise ValueError('boom')\n\n"
                            "def make():\n    return M(), (torch.randn(2),)\n")
    from shimkit.audit import run_audit, to_json
    from shimkit.backend import new_registry

    document = to_json(run_audit([f"{path}:make"], registry=new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})))
    failure = document["models"][0]["failure"]
    assert failure["phase"] == "export"
    assert f"(raised at {path}:" in failure["message"] and "raise ValueError('boom')" in failure["message"]

def test_python_file_without_factory_asks_for_one(tmp_path):
    path = _write(tmp_path, "")
    with pytest.raises(ModelLoadError, match="name the factory too"):
        load_model(str(path))


def test_saved_exported_program_loads(tmp_path):
    model, inputs = ZOO["seed_split_linear"].factory()
    path = tmp_path / "seed.pt2"
    torch.export.save(torch.export.export(model, inputs), str(path))
    loaded = load_model(str(path))
    assert loaded.name == "seed.pt2"
    assert isinstance(loaded.exported, torch.export.ExportedProgram)


def test_bad_pt2_is_reported(tmp_path):
    path = tmp_path / "garbage.pt2"
    path.write_bytes(b"not a zip")
    with pytest.raises(ModelLoadError, match="not a loadable ExportedProgram"):
        load_model(str(path))
    with pytest.raises(ModelLoadError, match="no such file"):
        load_model(str(tmp_path / "absent.pt2"))


def _path_case(tmp_path, case):
    if case == "missing":
        return tmp_path / "missing.pt2", "no such file"
    if case == "directory":
        (tmp_path / "folder.pt2").mkdir()
        return tmp_path / "folder.pt2", "is a directory"
    if case == "too long":
        return tmp_path / ("a" * 300 + ".pt2"), "cannot be used: File name too long"
    if case == "fifo":
        os.mkfifo(tmp_path / "pipe.pt2")
        return tmp_path / "pipe.pt2", "is not a regular file"
    if case == "not a folder":
        (tmp_path / "plain").write_text("")
        return tmp_path / "plain" / "model.py", "cannot be used: Not a directory"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing", "directory", "too long", "fifo", "not a folder"])
def test_every_path_the_os_refuses_is_exit_2_with_a_report_naming_it(tmp_path, case):
    import argparse
    import io
    import json

    from shimkit.audit.cli import configure_parser, run

    path, expected = _path_case(tmp_path, case)
    spec = f"{path}:model" if path.suffix == ".py" else str(path)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(configure_parser(argparse.ArgumentParser()).parse_args(["--quiet", "--json", "--no-cache", spec]),
               stdout=stdout, stderr=stderr)
    (model,) = json.loads(stdout.getvalue())["models"]
    assert code == 2 and model["name"] == spec and model["failure"]["phase"] == "load", model
    assert expected in model["failure"]["message"] and str(path) in model["failure"]["message"]
