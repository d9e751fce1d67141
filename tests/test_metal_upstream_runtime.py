"""``--execute`` computes what ExecuTorch's Metal runtime computes on a Mac (issue 66): the stand-in reproduces
upstream's ``op_*.mm`` where they differ from ATen and says so (runtime/native/fallbacks/, docs/metal.md "The
stand-in and upstream"), and shimkit's plugins are what makes such a model right. Each test here fails if the
reproduction is taken out, or if shimkit's fix is switched off."""

from __future__ import annotations

import textwrap

import pytest
import torch

import shimkit.backend
from shimkit.audit.loader import load_model
from shimkit.audit.options import AuditOptions
from shimkit.audit.runner import audit_loaded
from shimkit.backend import get_registry, inductor_options


def _execute(spec: str, *, plugins: bool):
    config = get_registry().backend_config("mps") if plugins else None
    return audit_loaded(load_model(spec), config=config, options=AuditOptions(numerics="execute"))


def _write_model(tmp_path, body: str) -> str:
    path = tmp_path / "model.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return f"{path}:make"


def test_a_divergence_the_call_meets_is_wrong_even_where_the_numbers_agree(tmp_path):
    """All ones and no padding: NHWC memory read as NCHW holds the same values, and every output is the same number,
    so only the call itself shows what a Mac does."""
    spec = _write_model(tmp_path, """
        class Ones(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.first = torch.nn.Conv2d(4, 4, 3, bias=False)
                self.second = torch.nn.Conv2d(4, 4, 3, bias=False)
                torch.nn.init.ones_(self.first.weight)
                torch.nn.init.ones_(self.second.weight)

            def forward(self, x):
                return self.second(self.first(x))

        def make():
            return Ones(), (torch.ones(1, 4, 8, 8),)
    """)
    audit = _execute(spec, plugins=False)
    assert audit.status == "wrong"
    (check,) = audit.numerics.checks
    assert max(check.max_errors) == 0.0
    assert "reads its channels-last input as a contiguous NCHW buffer" in check.error
    assert "the numbers agree at these inputs" in check.error


def test_the_zoos_cnn_is_wrong_on_the_stock_runtime_with_the_cause():
    audit = _execute("mobilenet_v2", plugins=False)
    assert audit.status == "wrong"
    assert all("aoti_torch_mps_convolution reads its channels-last input" in check.error
               for check in audit.numerics.checks)


# Inductor's layout optimisation hands both convolutions channels-last operands.
CONVOLUTIONS = """
    class Convolutions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.second = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)

        def forward(self, x):
            return self.second(self.first(x).relu())

    def make():
        torch.manual_seed(0)
        return Convolutions(), (torch.randn(1, 3, 12, 12),)
    """


def test_the_convolution_plugins_dense_operands_are_what_keeps_the_program_right(tmp_path, monkeypatch):
    """The mutant: without the derivation from ``Shim.dense_operands`` shimkit's program is wrong as stock's is."""
    config = get_registry().backend_config("mps")
    assert inductor_options(config)["layout_optimization"] is False
    monkeypatch.setattr(shimkit.backend, "_LAID_OUT_BY_INDUCTOR", frozenset())
    assert "layout_optimization" not in inductor_options(config)
    spec = _write_model(tmp_path, CONVOLUTIONS)
    audit = _execute(spec, plugins=True)
    assert audit.status == "wrong" and "pytorch/executorch#22951" in audit.numerics.checks[0].error


@pytest.mark.parametrize("operands, refused", [((), None), (("input", "weight"), None), ("input", "one string"),
                                                (("x y",), "argument names"),
                                                (("input", "mat2"), r"\['mat2'\] are not arguments of aten::convolution")])
def test_a_shims_dense_operands_are_argument_names(operands, refused):
    from shimkit.registry import InvalidPluginRecord, Shim

    make = lambda: Shim(op="aten::convolution", device="mps", symbol="aoti_torch_mps_convolution",  # noqa: E731
                        provided_by_runtime=True, dense_operands=operands)
    if refused is None:
        assert make().dense_operands == tuple(operands)
    else:
        with pytest.raises(InvalidPluginRecord, match=refused):
            make()


TRANSPOSED_SELF = """
    class TransposedSelf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(6, 5))

        def forward(self, x):
            return torch.mm(x.t(), self.weight) * 2.0

    def make():
        torch.manual_seed(0)
        return TransposedSelf(), (torch.randn(6, 4),)
"""


def test_mm_reads_a_transposed_self_as_dense_stock_and_the_mm_plugins_dense_operands_make_it_right(tmp_path,
                                                                                                     monkeypatch):
    """op_mm.mm reads self through sizes() alone; Inductor hands it ``x.t()`` as a view. With shimkit the mm
    plugin's ``dense_operands=("self",)`` derives a contiguous copy; the mutant without that derivation is wrong
    again, with the cause."""
    spec = _write_model(tmp_path, TRANSPOSED_SELF)
    stock = _execute(spec, plugins=False)
    assert stock.status == "wrong"
    assert "aoti_torch_mps_mm_out reads its strided self as a dense [M, K] buffer" in stock.numerics.checks[0].error
    assert "model.py:9" in stock.numerics.checks[0].error  # the user's line
    assert _execute(spec, plugins=True).status == "clean"
    monkeypatch.setattr(shimkit.backend, "dense_operands", lambda config: {})
    mutant = _execute(spec, plugins=True)
    assert mutant.status == "wrong" and "reads its strided self" in mutant.numerics.checks[0].error


def test_a_channels_last_model_input_is_wrong_with_the_runtimes_cause(tmp_path):
    """metal_backend.cpp copies each input into a new contiguous tensor; the program was compiled for the
    caller's channels-last strides. No shim is at fault and shimkit does not fix it yet: the verdict says so."""
    spec = _write_model(tmp_path, """
        def make():
            torch.manual_seed(0)
            return torch.nn.Conv2d(3, 8, 3, padding=1), (torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last),)
    """)
    audit = _execute(spec, plugins=True)
    assert audit.status == "wrong"
    error = audit.numerics.checks[0].error
    assert "MetalBackend::execute hands the program each input as a new contiguous tensor" in error
    assert "input 0 [1, 3, 8, 8] strides [192, 1, 24, 3]" in error
    assert "aoti_torch_mps_convolution" not in error  # the plugin's dense operands keep the shim itself right


@pytest.mark.parametrize("body, stock_error", [
    ("""
        class TransposedTopk(torch.nn.Module):
            def forward(self, x):
                return torch.topk(x.transpose(0, 1) * 2.0, 3, dim=0, largest=False)
     """, "aoti_torch_mps_topk reads its strided self as a dense buffer"),
    ("""
        class FirstRows(torch.nn.Module):
            def forward(self, x):
                q = x * 2.0
                return torch.bmm(q[:, :1], q[:, 1:].transpose(1, 2))
     """, "Expected strides=[8,8,1] for shape=[3,1,8]"),
], ids=["topk_of_a_transposed_view", "bmm_of_a_one_row_slice"])
def test_what_op_topk_mm_and_op_bmm_mm_read_or_refuse_stock_shimkit_hands_them_dense(tmp_path, body, stock_error):
    """op_topk.mm reads self through sizes() alone (the topk plugin's ``dense_operands``); op_bmm.mm refuses any
    stride but ``[d1*d2, d2, 1]``, a size-1 dim's included (the bmm plugin's pass copies such a view)."""
    name = body.split("class ")[1].split("(")[0]
    spec = _write_model(tmp_path, body + f"""
        def make():
            torch.manual_seed(0)
            return {name}(), (torch.randn(3, 6, 8),)
    """)
    stock = _execute(spec, plugins=False)
    assert stock.status == "wrong" and stock_error in stock.numerics.checks[0].error, stock.numerics.checks
    assert _execute(spec, plugins=True).status == "clean"
