"""shimkit.testing strategies: dtypes, shapes, layouts and schema-derived op arguments."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from shimkit.registry import OpPlugin
from shimkit.testing import (VIEW_COPY_OPS, VIEW_OPS, INPLACE_OPS, MATMUL_OPS, POINTWISE_OPS, UnsupportedOpError,
                             broadcastable_shape_pairs, dtypes, op_arguments, op_spec, tensor_recipes, tensors)


@given(dtypes("mps", kinds=("float", "int", "bool")))
def test_mps_dtypes_leave_out_float64(dtype):
    assert dtype is not torch.float64


def test_dtypes_reject_unknown_device_and_kind():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        dtypes("tpu")
    with pytest.raises(ValueError, match="unknown dtype kinds"):
        dtypes(kinds=("complex",))


@given(broadcastable_shape_pairs())
def test_broadcastable_pairs_broadcast(pair):
    torch.broadcast_shapes(*pair)


@given(tensor_recipes(allow_overlap=True))
def test_recipe_builds_its_shape_and_rebuilds_from_its_expression(recipe):
    tensor = recipe.build()
    assert tuple(tensor.shape) == recipe.shape
    again = eval(recipe.expression(), {"torch": torch})
    assert again.stride() == tensor.stride() and again.storage_offset() == tensor.storage_offset()
    assert torch.equal(again, tensor)
    assert recipe.build().data_ptr() != tensor.data_ptr()  # fresh storage every time


def test_tensors_cover_the_layouts_kernels_get_wrong():
    seen = set()

    @settings(max_examples=200, derandomize=True, database=None)
    @given(tensors(shape=(2, 3, 2, 2), allow_overlap=True))
    def collect(tensor):
        seen.add("non-contiguous" if not tensor.is_contiguous() else "contiguous")
        if tensor.storage_offset():
            seen.add("offset")
        if 0 in tensor.stride():
            seen.add("expanded")
        if tensor.is_contiguous(memory_format=torch.channels_last) and not tensor.is_contiguous():
            seen.add("channels-last")

    collect()
    assert seen >= {"contiguous", "non-contiguous", "offset", "expanded", "channels-last"}


@pytest.mark.parametrize("op", VIEW_COPY_OPS + VIEW_OPS + INPLACE_OPS + POINTWISE_OPS + MATMUL_OPS
                         + ("aten::cat.default", "aten::sum.dim_IntList"))
def test_derived_arguments_are_valid_calls(op, shimkit_registry):
    overload = op_spec(op).op

    @given(op_arguments(op))
    def call(arguments):
        args, kwargs = arguments
        overload(*args, **kwargs)

    call()


def test_split_sizes_sum_to_the_split_side():
    @given(op_arguments("aten::split_with_sizes_copy.default"))
    def check(arguments):
        (tensor, sizes, *dim), _ = arguments
        assert sum(sizes) == tensor.shape[dim[0] if dim else 0]

    check()


def test_an_argument_without_a_rule_names_itself_and_the_fix():
    with pytest.raises(UnsupportedOpError, match=r"as_strided_copy: no rule for argument `List\[int\] size`.*"
                                                 r"input_strategies"):
        op_spec("aten::as_strided_copy.default")


def test_plugin_input_strategies_take_precedence(shimkit_registry, register_plugin):
    pinned = torch.tensor([7.0, 7.0])
    register_plugin(OpPlugin(
        name="pinned-erf", ops=("aten::erf.default",), decompositions={"aten::erf.default": torch.erf},
        input_strategies={"aten::erf.default": lambda: st.just((pinned,))}))

    @given(op_arguments("aten::erf.default"))
    def check(arguments):
        (tensor,), _ = arguments
        assert torch.equal(tensor, pinned)

    check()
