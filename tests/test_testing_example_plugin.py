"""The example third-party plugin checked with the public toolkit only."""

import shimkit_example_plugin.plugin as example_plugin
import torch
from hypothesis import given
from shimkit_example_plugin._kernels import logaddexp as compiled_logaddexp

from shimkit.passes.decompose import DecomposeInPlace
from shimkit.testing import assert_eliminates, assert_plugin_matches_reference, assert_preserves_semantics, graphs


def test_logaddexp_compiled_kernel_and_decomposition_match_torch(register_plugin):
    def kernel(a, b):
        return torch.from_numpy(compiled_logaddexp(a.numpy(), b.numpy()))

    register_plugin(example_plugin)
    assert_plugin_matches_reference("example-logaddexp", kernels={"aten::logaddexp.default": kernel})


@given(graphs(("aten::logaddexp.default", "aten::neg.default", "aten::add_.Tensor")))
def test_logaddexp_decomposition_in_graphs_keeps_meaning(program):
    decompose = DecomposeInPlace({"aten::logaddexp.default": example_plugin.logaddexp_decomposition})
    assert_preserves_semantics(decompose, program)
    assert_eliminates(decompose, program, ["aten::logaddexp.default"])
