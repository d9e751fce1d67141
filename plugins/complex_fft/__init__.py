"""Complex values as real pairs: the ``complex_pairs`` graph pass (``passes/complex_pairs.py``), and the FFT
kernel it calls for long transforms on mps.

Metal and Inductor's Metal code have no complex dtype. CUDA has one, but the pass runs there too: it runs
before ``to_edge`` (``BackendConfig.prepare_for_edge``), whose verifier rejects complex programs on every
device (``polar`` and ``complex`` are not core ATen; ``view_as_complex`` of a parameter fails its autograd
check; on the H100 the three complex zoo models failed there, stock and with shimkit, until it did). A
complex graph output stays complex through one ``view_as_complex`` of its real pair, which the Metal audit
names as a missing kernel.

Short transforms are DFTs as real matrix products, which Inductor compiles. From ``FFT_KERNEL_FROM``
points on, where a device has this plugin's shim (mps), the pass writes ``shimkit::fft_c2c`` instead:
``kernel/fft.metal`` (mixed-radix Stockham, Bluestein for other lengths: ``fft.py``) behind the c-shim
``aoti_torch_mps_fft_c2c``, dispatched by ``kernel/fft_shim_mps.mm`` on the Mac (and on Linux inside whole
programs) exactly as :func:`~shimkit.plugins.complex_fft.fft.launch_fft_c2c` dispatches it through
``shimkit.metal``. On the CPU the op is ``torch.fft`` itself.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from shimkit.passes.complex_pairs import ComplexPairs
from shimkit.plugins.complex_fft.fft import launch_fft_c2c
from shimkit.registry import Kernel, MslKernel, OpPlugin, PassSpec, Shim, hookimpl

FFT_C2C = "shimkit::fft_c2c"
# A DFT matmul costs O(n) per point and its two n x n angle matrices; the kernel O(log n) per point and a
# dispatch per radix. STFT frames of 64 to 200 points stay matmuls, Whisper's 400 and longer take the kernel.
FFT_KERNEL_FROM = 256


def _check_fft_c2c(self: Tensor, normalization: int) -> None:
    if self.dtype != torch.float32 or self.dim() < 2 or self.shape[-1] != 2:
        raise ValueError(f"{FFT_C2C}: self must be float32 real pairs [..., n, 2], got {self.dtype} of shape "
                         f"{list(self.shape)}")
    if self.shape[-2] == 0:
        raise ValueError(f"{FFT_C2C}: a transform of 0 points")
    if normalization not in (0, 1, 2):
        raise ValueError(f"{FFT_C2C}: normalization must be ATen's fft_norm_mode 0, 1 or 2, got {normalization}")


@torch.library.custom_op(FFT_C2C, mutates_args=())
def fft_c2c(self: Tensor, inverse: bool, normalization: int) -> Tensor:
    """The DFT over dim -2 of ``self``'s complex values as real pairs (``[..., n, 2]``, ``view_as_real``'s
    layout), inverse or not, scaled as ATen's ``_fft_c2c`` scales for ``normalization``: a new contiguous
    tensor of ``self``'s shape."""
    _check_fft_c2c(self, normalization)
    if self.numel() == 0:  # MKL refuses a transform of no rows
        return self.new_empty(self.shape)
    values = torch.view_as_complex(self.contiguous())
    spectrum = torch.ops.aten._fft_c2c(values, [values.dim() - 1], normalization, not inverse)
    return torch.view_as_real(spectrum).contiguous()


@fft_c2c.register_fake
def _fft_c2c_fake(self: Tensor, inverse: bool, normalization: int) -> Tensor:
    _check_fft_c2c(self, normalization)
    return self.new_empty(self.shape)


KERNEL = Kernel(
    name="fft",
    directory=str(Path(__file__).resolve().parent / "kernel"),
    runtime_sources=("fft.metal", "fft_shim_mps.mm"),
    msl=MslKernel(source="fft.metal", function="fft_stockham_pass", dtypes=("float",), launch=launch_fft_c2c),
    uses_sdk=False,
)


def fft_c2c_calls():
    """Rows of real pairs: every radix, Bluestein's lengths (a prime factor above 13), one point; both
    directions and every normalization."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    lengths = st.integers(1, 40) | st.sampled_from([64, 97, 256, 300, 1000])
    shapes = st.tuples(st.integers(0, 3), lengths).map(lambda s: (*s, 2))
    return st.builds(lambda x, inverse, normalization: (torch.from_numpy(x), inverse, normalization),
                     shapes.flatmap(lambda shape: hnp.arrays("float32", shape,
                                                             elements=st.floats(-1, 1, width=32))),
                     st.booleans(), st.sampled_from([0, 1, 2]))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="complex_fft",
        ops=(FFT_C2C,),
        shims=(Shim(op=FFT_C2C, device="mps", symbol="aoti_torch_mps_fft_c2c", recorded_names=(FFT_C2C,),
                    c_prototype="AOTITorchError aoti_torch_mps_fft_c2c(AtenTensorHandle self, int32_t inverse, "
                                "int64_t normalization, AtenTensorHandle* ret0)",
                    kernel=KERNEL),),
        references={FFT_C2C: torch.ops.shimkit.fft_c2c.default},
        input_strategies={FFT_C2C: fft_c2c_calls},
        doc="FFTs of any length over complex values as real pairs (shimkit::fft_c2c): mixed-radix Stockham "
            "and Bluestein MSL kernels, written by complex_pairs for transforms of 256 points and more.",
    )


@hookimpl
def shimkit_passes():
    yield PassSpec(
        name="complex_pairs",
        factory=lambda capabilities: ComplexPairs(
            complex_outputs="view_as_complex",
            fft_kernel=torch.ops.shimkit.fft_c2c.default if capabilities.has_shim(FFT_C2C) else None,
            fft_kernel_from=FFT_KERNEL_FROM),
        devices=("mps", "cuda"),
        stage="pre_edge",
        doc="Complex values carried as view_as_real-packed real tensors; FFTs as exact-angle DFT matmuls, or "
            "shimkit::fft_c2c from 256 points where the device has its kernel.",
    )
