"""Bad input gets an error naming the argument, through the binding (a Python exception) and through
the C shim (a non-zero AOTITorchError plus the message), and never crashes the process."""

from __future__ import annotations

import re

import pytest
import torch

from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles
from kernel_helpers import ADDMM, addmm_shims, last_error



def good():
    return {"out": torch.empty(2, 3), "self": torch.zeros(3), "mat1": torch.ones(2, 4),
            "mat2": torch.ones(4, 3)}


BAD_INPUTS = [
    ("mat1 rank", {"mat1": torch.ones(2, 4, 1)}, "mat1 must be a matrix (2-D), got 3-D"),
    ("mat2 rank", {"mat2": torch.ones(4)}, "mat2 must be a matrix (2-D), got 1-D"),
    ("out rank", {"out": torch.empty(6)}, "out must be a matrix (2-D), got 1-D"),
    ("self rank", {"self": torch.zeros(1, 2, 3)}, "self must have at most 2 dimensions"),
    ("inner sizes", {"mat2": torch.ones(5, 3)}, "mat1 and mat2 shapes cannot be multiplied (2x4 and 5x3)"),
    ("self shape", {"self": torch.zeros(2)}, "self of shape [2] cannot be broadcast to the output shape [2, 3]"),
    ("out shape", {"out": torch.empty(3, 2)}, "out has shape [3, 2] but mat1 [2, 4] @ mat2 [4, 3] gives [2, 3]"),
    ("mat2 dtype", {"mat2": torch.ones(4, 3, dtype=torch.bfloat16)},
     "dtype mismatch: mat2 is bfloat16 but mat1 is float32"),
    ("self dtype", {"self": torch.zeros(3, dtype=torch.float16)}, "dtype mismatch: self is float16"),
    ("out dtype", {"out": torch.empty(2, 3, dtype=torch.bfloat16)}, "dtype mismatch: out is bfloat16"),
    ("unsupported dtype", {"mat1": torch.ones(2, 4, dtype=torch.float64)},
     "mat1 has dtype float64; supported: float32, bfloat16, float16"),
    ("integer dtype", {"out": torch.empty(2, 3, dtype=torch.int32)}, "out has dtype int32"),
    ("broadcast out", {"out": torch.empty(1, 3).expand(2, 3)}, "out is broadcast"),
]


@pytest.mark.parametrize("name,change,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_binding_raises_value_error_naming_the_argument(name, change, message):
    args = {**good(), **change}
    for call in (ADDMM.addmm_plan, ADDMM.addmm_reference):
        with pytest.raises(ValueError, match=re.escape(message)):
            call(args["out"], args["self"], args["mat1"], args["mat2"], beta=1.0, alpha=1.0)


@pytest.mark.parametrize("name,change,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_c_shim_returns_an_error_with_the_message(name, change, message):
    args = {**good(), **change}
    before = args["out"].clone()
    library = addmm_shims()
    with tensor_handles(args["out"], args["self"], args["mat1"], args["mat2"]) as handles:
        status = library.shimkit_ref_addmm_out(*handles, 1.0, 1.0)
    assert status != AOTI_TORCH_SUCCESS
    assert last_error().startswith("shimkit_ref_addmm_out: addmm: ")
    assert message in last_error()
    torch.testing.assert_close(args["out"], before, rtol=0, atol=0, equal_nan=True)  # nothing written


@pytest.mark.parametrize("position,name", enumerate(["out", "self", "mat1", "mat2"]))
def test_c_shim_rejects_a_null_handle(position, name):
    library = addmm_shims()
    tensors = list(good().values())
    with tensor_handles(*tensors) as handles:
        handles[position] = None
        status = library.shimkit_ref_addmm_out(*handles, 1.0, 1.0)
    assert status != AOTI_TORCH_SUCCESS
    assert last_error() == f"shimkit_ref_addmm_out: addmm: {name} is a null tensor handle"


def test_c_shim_clears_nothing_on_success_but_reports_the_latest_failure():
    library = addmm_shims()
    with tensor_handles(*good().values()) as handles:
        assert library.shimkit_ref_addmm_out(*handles, 1.0, 1.0) == AOTI_TORCH_SUCCESS
        handles[0] = None
        assert library.shimkit_ref_addmm_out(*handles, 1.0, 1.0) != AOTI_TORCH_SUCCESS
    assert "out is a null tensor handle" in last_error()


def test_binding_rejects_what_is_not_a_tensor():
    args = good()
    with pytest.raises(TypeError, match="mat1 must be a tensor"):
        ADDMM.addmm_reference(args["out"], args["self"], [[1.0]], args["mat2"])


def test_binding_rejects_a_tensor_dlpack_refuses():
    args = good()
    mat1 = torch.ones(2, 4, requires_grad=True)
    with pytest.raises(ValueError, match="mat1 cannot be borrowed through DLPack"):
        ADDMM.addmm_reference(args["out"], args["self"], mat1, args["mat2"])


def test_reference_refuses_memory_it_cannot_read():
    args = {k: v.to("meta") for k, v in good().items()}
    with pytest.raises((ValueError, NotImplementedError)):
        ADDMM.addmm_reference(args["out"], args["self"], args["mat1"], args["mat2"])
