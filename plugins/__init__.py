"""shimkit's built-in op plugins, written with exactly the hooks a third party uses.

Each module in :data:`BUILTIN_MODULES` is registered as a plugin by the registry; block one with
``SHIMKIT_BLOCK_PLUGINS=<module>`` like any other plugin.
"""

BUILTIN_MODULES = (
    "mm",
    "bmm",
    "convolution",
    "topk",
    "sdpa",
    "torchao_linear",
    "metal_custom_ops",
    "addmm",
    "view_copy",
    "cumsum",
    "baddbmm",
    "core_passes",
)
