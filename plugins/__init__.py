"""shimkit's built-in op plugins, written with exactly the hooks a third party uses.

Each module in :data:`BUILTIN_MODULES` is handed to the registry as a plugin by
:mod:`shimkit.backend`; block one with ``SHIMKIT_BLOCK_PLUGINS=<module>`` like any other plugin.
"""

BUILTIN_PACKAGE = "shimkit.plugins"

BUILTIN_MODULES = (
    "mm",
    "bmm",
    "mm_plus_mm",
    "convolution",
    "topk",
    "sdpa",
    "torchao_linear",
    "metal_custom_ops",
    "addmm",
    "view_copy",
    "cumsum",
    "cumprod",
    "kthvalue",
    "cummax",
    "logcumsumexp",
    "searchsorted",
    "histc",
    "window_functions",
    "aten_composites",
    "sort",
    "baddbmm",
    "addmv",
    "upsample_aa",
    "bilinear",
    "adaptive_avg_pool3d",
    "masked_scatter",
    "cdist",
    "linear_cross_entropy",
    "metal_pointwise",
    "metal_generated",
    "linalg",
    "nonzero",
    "random",
    "real_fft",
    "combinations",
    "matrix_exp",
    "histogramdd",
    "embedding_bag",
    "complex_fft",
    "grouped_conv1d",
    "conv_transpose",
    "cuda_runtime",
    "core_passes",
)
