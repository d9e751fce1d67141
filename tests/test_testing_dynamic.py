"""shimkit.testing checks plugin decompositions traced with dynamic dimensions at other sizes."""

import pytest
import torch

from shimkit.testing import PropertyFailure, assert_decomposition_dynamic, assert_plugin_matches_reference
from shimkit.backend import get_registry

CUMSUM = "aten::cumsum.default"


def example_step_count_cumsum(self, dim, *, dtype=None):
    """The bug this exists for: a scan whose step count is read from the traced size as a number."""
    values = self.to(dtype) if dtype is not None else self
    length = values.shape[dim]
    shift = 1
    while shift < length:  # under symbolic tracing: a guard on the example length
        head = values.narrow(dim, 0, shift)
        tail = values.narrow(dim, shift, length - shift) + values.narrow(dim, 0, length - shift)
        values = torch.cat([head, tail], dim)
        shift *= 2
    return values


def test_a_decomposition_baking_the_example_length_is_caught():
    x = torch.randn(3, 16)
    with pytest.raises(PropertyFailure, match=r"dynamic-shape decomposition of aten::cumsum.default.*branches"):
        assert_decomposition_dynamic(CUMSUM, example_step_count_cumsum, torch.cumsum, (x, 1))


def test_a_guard_free_wrong_decomposition_is_caught_at_another_size():
    def four_steps(self, dim, *, dtype=None):
        values, length = self, self.shape[dim]
        positions = torch.arange(length)
        for shift in (1, 2, 4, 8):
            source = positions - shift
            earlier = values.index_select(dim, source.clamp(min=0))
            values = values + torch.where((source >= 0).reshape(1, length), earlier, torch.zeros(()))
        return values

    with pytest.raises(PropertyFailure, match=r"at input sizes \(\d+, 33\)"):
        assert_decomposition_dynamic(CUMSUM, four_steps, torch.cumsum, (torch.randn(3, 16), 1))


@pytest.mark.parametrize("plugin", sorted(entry.name for entry in get_registry().op_plugins()
                                          if entry.record.decompositions and entry.record.references))
def test_every_builtin_decomposition_holds_at_dynamic_sizes(plugin):
    assert_plugin_matches_reference(plugin)
