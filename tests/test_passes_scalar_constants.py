"""inline_scalar_constants: 0-d constants ExecuTorch made of scalar operands become scalars again, only where
that changes no result (dtype and values), checked against the program before the pass."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shimkit.passes.scalar_constants import InlineScalarConstants

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.bool,
          torch.float64]
OPS = [torch.div, torch.mul, torch.add, torch.sub]


class Binary(torch.nn.Module):
    def __init__(self, op, constant):
        super().__init__()
        self.op = op
        self.register_buffer("constant", constant)

    def forward(self, x):
        return self.op(x, self.constant)


def _operand(dtype, shape):
    if dtype == torch.bool:
        return torch.arange(int(torch.tensor(shape).prod())).reshape(shape) % 2 == 0
    return (torch.arange(int(torch.tensor(shape).prod())).reshape(shape) % 7 + 1).to(dtype)


@settings(max_examples=60)
@given(op=st.sampled_from(OPS), tensor_dtype=st.sampled_from(DTYPES), constant_dtype=st.sampled_from(DTYPES),
       value=st.sampled_from([0.5, 3.0, -2.0, 7.0]), rank=st.integers(0, 2))
def test_the_pass_changes_no_result(op, tensor_dtype, constant_dtype, value, rank):
    constant = torch.tensor(value).to(constant_dtype)
    x = _operand(tensor_dtype, (3,) * rank)
    model = Binary(op, constant)
    try:
        expected = model(x)
    except RuntimeError:  # an op ATen refuses for these dtypes (sub of bools)
        return
    program = torch.export.export(model, (x,))
    result = InlineScalarConstants()(program)
    got = program.module()(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)  # dtype included
    inlined = not any(n.op == "placeholder" and n.name == "b_constant" and n.users
                      for n in program.graph.nodes)
    assert result.modified == inlined


def test_a_float_divisor_beside_a_float_tensor_is_inlined():
    program = torch.export.export(Binary(torch.div, torch.tensor(5.5)), (torch.ones(2, 3),))
    assert InlineScalarConstants()(program).modified
    (div,) = [n for n in program.graph.nodes if n.op == "call_function"]
    assert div.args[1] == 5.5


@pytest.mark.parametrize("constant, x", [
    (torch.tensor(2.5, dtype=torch.float64), torch.ones(3, dtype=torch.int64)),  # would change the result dtype
    (torch.tensor(True), torch.ones(3)),
    (torch.tensor([2.0]), torch.ones(3)),                                        # not 0-d
])
def test_constants_that_would_promote_differently_are_left(constant, x):
    program = torch.export.export(Binary(torch.mul, constant), (x,))
    assert not InlineScalarConstants()(program).modified
