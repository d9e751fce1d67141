"""An untrusted ``.pt2`` runs no code (docs/audit.md, "What the audit trusts"): the entries
``torch.export.load`` would unpickle are refused, naming the way to trust the file, and the crafted payloads
here, which create a file when unpickled, create none. With ``--trust-pickle`` the same archive is loaded
as torch loads it (the file appears), and the environment is left as it was."""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from shimkit.audit.cli import configure_parser, run
from shimkit.audit.loader import TRUST_PICKLE_ENV


class _CreatesFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def _archive(tmp_path: Path, entry: str) -> tuple[Path, Path]:
    """A saved Linear whose ``entry`` ("weights": the weight's payload marked pickled; "inputs": the
    example inputs) is replaced by a pickle that creates the returned marker file."""
    marker = tmp_path / f"pwned-{entry}"
    clean = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(3, 2), (torch.ones(1, 3),)), clean)
    payload = pickle.dumps(_CreatesFile(marker))
    crafted = tmp_path / f"crafted-{entry}.pt2"
    with zipfile.ZipFile(clean) as source, zipfile.ZipFile(crafted, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if entry == "weights" and name.endswith("model_weights_config.json"):
                config = json.loads(data)
                config["config"]["weight"]["use_pickle"] = True
                data = json.dumps(config).encode()
            elif entry == "weights" and name.endswith("data/weights/weight_0"):
                data = payload
            elif entry == "inputs" and name.endswith("data/sample_inputs/model.pt"):
                data = payload
            target.writestr(name, data)
    return crafted, marker


def _audit(*argv: str) -> tuple[int, dict]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(configure_parser(argparse.ArgumentParser()).parse_args(["--quiet", "--json", "--no-cache", *argv]),
               stdout=stdout, stderr=stderr)
    return code, json.loads(stdout.getvalue())


@pytest.mark.parametrize("entry", ["weights", "inputs"])
def test_a_pickle_in_a_pt2_is_refused_and_runs_nothing(tmp_path, entry):
    crafted, marker = _archive(tmp_path, entry)
    code, document = _audit(str(crafted))
    (model,) = document["models"]
    assert code != 0 and model["status"] == "error", model
    assert "only unpickling can read" in model["failure"]["message"]
    assert "--trust-pickle" in model["failure"]["message"]
    assert not marker.exists()


def test_trusting_the_file_unpickles_it_as_torch_would_and_restores_the_environment(tmp_path):
    crafted, marker = _archive(tmp_path, "weights")
    assert TRUST_PICKLE_ENV not in os.environ
    _audit("--trust-pickle", "-j", "1", str(crafted))
    assert marker.exists()  # the refusal above is what kept it from running
    assert TRUST_PICKLE_ENV not in os.environ


def test_a_pt2_of_plain_tensors_loads_untrusted(tmp_path):
    path = tmp_path / "plain.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(3, 2), (torch.ones(1, 3),)), path)
    code, document = _audit(str(path))
    assert code == 0 and document["models"][0]["status"] == "clean", document["models"][0]
