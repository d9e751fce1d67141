"""The bundled zoo through the whole audit: clean with shimkit's plugins, upstream's gaps with
``--no-plugins``, the JSON document's schema, fix hints and the CLI's exit codes.

Each zoo pass is audited once per module and shared by the tests that read it; the module's tests run
in one xdist worker (tests/conftest.py, ONE_WORKER_FILES), so that is once per run.
"""

import argparse
import io
import json

import pytest
import torch

from shimkit.audit import SCHEMA_VERSION, run_audit, to_json
from shimkit.audit.cli import configure_parser, run
from shimkit.audit.zoo import ZOO
from shimkit.backend import new_registry

def shimkit_registry(**env):
    """shimkit's built-in plugins only (third-party entry points would make the zoo's result depend
    on the machine); ``env`` adds e.g. SHIMKIT_BLOCK_PLUGINS."""
    return new_registry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1", **env})


@pytest.fixture(scope="module")
def with_plugins():
    return to_json(run_audit(list(ZOO), plugins=True, registry=shimkit_registry(), check_numerics=True))


@pytest.fixture(scope="module")
def stock():
    return to_json(run_audit([*ZOO, "no_such_model"], plugins=False, registry=shimkit_registry()))


def _by_name(document):
    return {model["name"]: model for model in document["models"]}


def test_whole_zoo_audits_clean_with_shimkit_plugins(with_plugins):
    problems = {m["name"]: (m["status"], m["missing"], m["failure"] and m["failure"]["message"])
                for m in with_plugins["models"] if m["status"] != "clean"}
    assert not problems
    assert with_plugins["exit_code"] == 0
    for model in with_plugins["models"]:
        for kernel in model["kernels"]:
            assert kernel["provider"]["plugin"], kernel  # every kernel names the plugin providing it


def test_whole_zoo_computes_what_eager_computes_at_every_checked_size(with_plugins):
    for model in with_plugins["models"]:
        numerics = model["numerics"]
        assert numerics["ok"] and numerics["unavailable"] is None, (model["name"], numerics)
        assert numerics["checks"] and all(check["ok"] for check in numerics["checks"])
    dynamic = _by_name(with_plugins)["position_ids_dynamic"]["numerics"]["checks"]
    assert [c["sizes"] for c in dynamic] == [{"input_ids.shape[1]": n} for n in (16, 2, 64, 17)]


def test_no_plugins_shows_upstreams_cumsum_and_baddbmm_gaps(stock):
    models = _by_name(stock)
    (cumsum,) = [k for k in models["cumsum"]["kernels"] if k["status"] == "missing"]
    assert cumsum["op"] == "aten::cumsum.default"
    # torch 2.13 records the c-shim fallback by its ATen call, 2.14 by the shim symbol.
    assert cumsum["name"] in ("at::_ops::cumsum::call", "aoti_torch_mps_cumsum")
    assert models["baddbmm"]["missing"] == ["aoti_torch_mps_baddbmm_out"]
    for model, line in (("cumsum", "torch.cumsum(self.proj(x)"), ("baddbmm", "torch.baddbmm(")):
        (kernel,) = [k for k in models[model]["kernels"] if k["status"] == "missing"]
        sources = [n["source"] for n in kernel["nodes"]]
        assert sources and sources[0]["file"].endswith("audit/zoo/ops.py")
        assert line in sources[0]["code"]
        assert models[model]["upstream_errors"][0].startswith("Method forward missing fallback kernels (1 total):")
    # The dynamic-shape zoo model computes position ids with cumsum: the same upstream gap.
    assert [k["op"] for k in models["position_ids_dynamic"]["kernels"] if k["status"] == "missing"] == [
        "aten::cumsum.default"]
    assert models["position_ids_dynamic"]["status"] == "missing"
    assert models["sorted_routing"]["missing"] == ["at::_ops::sort_stable::call"]
    # Complex values inside: the edge verifier rejects each program before any backend sees it; the iSTFT
    # head's first stop is an op outside core ATen (polar), a finding in the model.
    spectral = ("stft_magnitude", "istft_head", "rfft2_global_filter")
    assert {name: models[name]["status"] for name in spectral} == {
        "stft_magnitude": "error", "istft_head": "stopped", "rfft2_global_filter": "error"}
    # Real in, real out: the FNet mixer passes the verifier and misses the transforms themselves.
    assert models["fnet_mixer"]["status"] == "missing"
    assert {"aten::_fft_r2c.default", "aten::_fft_c2c.default"} <= {
        k["op"] for k in models["fnet_mixer"]["kernels"] if k["status"] == "missing"}
    others = {name: m["status"] for name, m in models.items()
              if name not in ("cumsum", "baddbmm", "position_ids_dynamic", "sorted_routing", "no_such_model",
                              "fnet_mixer", *spectral)}
    assert set(others.values()) == {"clean"}, others


def test_no_plugins_fix_hints_point_at_the_plugins_that_close_the_gaps(stock):
    models = _by_name(stock)
    for model, plugin in (("cumsum", "cumsum"), ("baddbmm", "baddbmm"), ("sorted_routing", "sort")):
        (kernel,) = [k for k in models[model]["kernels"] if k["status"] == "missing"]
        assert any(f"plugin {plugin!r}" in fix and "without --no-plugins" in fix for fix in kernel["fixes"])


def test_blocked_plugin_is_named_as_the_fix():
    registry = shimkit_registry(SHIMKIT_BLOCK_PLUGINS="cumsum")
    document = to_json(run_audit(["cumsum"], plugins=True, registry=registry))
    (kernel,) = [k for k in document["models"][0]["kernels"] if k["status"] == "missing"]
    assert any("plugin 'cumsum'" in fix and "has a decomposition" in fix and "is blocked" in fix
               for fix in kernel["fixes"])
    assert document["exit_code"] == 1


TOP = {"schema_version", "tool", "versions", "backend", "device", "plugins", "status", "exit_code", "summary", "models"}
SUMMARY = {"models", "clean", "missing", "wrong", "stopped", "unchecked", "limitation", "error", "interrupted",
           "missing_kernels", "cached"}
MODEL = {"name", "method", "status", "partitions", "kernels", "missing", "upstream_errors", "failure", "timings_s",
         "numerics", "declines", "decompositions", "precision", "renamed", "cached"}
KERNEL = {"name", "mechanism", "op", "status", "provider", "nodes", "fixes"}
PROVIDER = {"plugin", "source", "op", "claims"}
NODE = {"name", "target", "source", "stack_trace"}
SOURCE = {"file", "line", "function", "code"}
FAILURE = {"kind", "phase", "message", "op", "node", "source", "fixes", "traceback"}
TIMINGS = {"export", "to_edge", "backend_passes", "inductor", "codegen", "numerics", "total"}


def test_json_document_has_the_documented_schema(stock):
    document = json.loads(json.dumps(stock))  # serialisable as is
    assert document["schema_version"] == SCHEMA_VERSION == 1
    assert set(document) == TOP
    assert set(document["summary"]) == SUMMARY
    assert set(document["versions"]) == {"shimkit", "torch", "executorch"}
    assert document["status"] == "incomplete" and document["exit_code"] == 2  # the unknown model
    for model in document["models"]:
        assert set(model) == MODEL
        assert model["status"] in ("clean", "missing", "stopped", "limitation", "error")
        assert set(model["timings_s"]) == TIMINGS
        assert all(isinstance(v, float) for v in model["timings_s"].values())
        if model["failure"] is not None:
            assert set(model["failure"]) == FAILURE
        for kernel in model["kernels"]:
            assert set(kernel) == KERNEL
            assert kernel["mechanism"] in ("c-shim", "proxy-executor")
            assert kernel["status"] in ("supported", "missing")
            assert (kernel["provider"] is None) == (kernel["status"] == "missing")
            if kernel["provider"] is not None:
                assert set(kernel["provider"]) == PROVIDER
            assert bool(kernel["fixes"]) == (kernel["status"] == "missing")
            for node in kernel["nodes"]:
                assert set(node) == NODE
                assert node["source"] is None or set(node["source"]) == SOURCE
    failed = _by_name(document)["no_such_model"]
    assert failed["status"] == "error" and failed["failure"]["phase"] == "load"
    assert "is not a zoo model" in failed["failure"]["message"]


def _cli(*argv):
    args = configure_parser(argparse.ArgumentParser()).parse_args(list(argv))
    stdout, stderr = io.StringIO(), io.StringIO()
    return run(args, stdout=stdout, stderr=stderr), stdout.getvalue(), stderr.getvalue()


def test_cli_exit_codes_json_and_progress():
    code, out, err = _cli("--no-plugins", "--json", "baddbmm", "seed_split_linear")
    document = json.loads(out)
    assert code == 1 == document["exit_code"]
    assert [m["status"] for m in document["models"]] == ["missing", "clean"]
    assert "[1/2] baddbmm ... missing" in err and "[2/2] seed_split_linear ... clean" in err

    code, out, _ = _cli("--no-plugins", "--quiet", "seed_split_linear")
    assert code == 0 and out.startswith("seed_split_linear: CLEAN")

    code, out, _ = _cli("--quiet", "mobilenet_v3_smal")
    assert code == 2 and "Did you mean mobilenet_v3_small" in out


def test_cli_refuses_untested_torch_and_lists_the_zoo(monkeypatch):
    code, out, _ = _cli("--list-zoo")
    assert code == 0 and all(name in out for name in ZOO)
    monkeypatch.setattr(torch, "__version__", "2.12.0")
    code, _, err = _cli("seed_split_linear")
    assert code == 2 and "torch 2.12.0 is not supported" in err


# Best to worst: a model must never end further down this list with shimkit than stock.
STATUS_RANK = ("clean", "unchecked", "missing", "limitation", "wrong", "stopped", "error")


def test_no_zoo_model_is_worse_with_shimkit_than_stock(stock, with_plugins):
    stock_status = {name: model["status"] for name, model in _by_name(stock).items()}
    for name, model in _by_name(with_plugins).items():
        assert STATUS_RANK.index(model["status"]) <= STATUS_RANK.index(stock_status[name]), (
            name, stock_status[name], model["status"])
