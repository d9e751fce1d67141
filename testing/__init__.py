"""shimkit.testing: hypothesis strategies, random graphs and properties for pass and kernel tests.

>>> from hypothesis import given
>>> from shimkit.passes.view_replacement import ReplaceViewCopyWithView
>>> from shimkit.testing import INPLACE_OPS, VIEW_COPY_OPS, assert_preserves_semantics, graphs
>>> @given(graphs(VIEW_COPY_OPS + INPLACE_OPS))
... def test_view_replacement_keeps_meaning(program):
...     assert_preserves_semantics(ReplaceViewCopyWithView(), program)

The names below load on first use: ``shimkit.testing.pytest_plugin`` is imported by every pytest run
in an environment where shimkit is installed, and must not pull in torch or hypothesis there.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "strategies": ("ALL_DTYPES", "DEVICE_DTYPES", "FLOAT_DTYPES", "INT_DTYPES", "TensorRecipe",
                   "broadcastable_shape_pairs", "broadcastable_shapes", "dtypes", "shapes", "small_values",
                   "special_values", "tensor_recipes", "tensors"),
    "opspecs": ("SELF", "OpSpec", "TensorArg", "UnsupportedOpError", "op_arguments", "op_spec"),
    "programs": ("INPLACE_OPS", "MATMUL_OPS", "POINTWISE_OPS", "VIEW_COPY_OPS", "VIEW_OPS", "Program",
               "graphs"),
    "properties": ("PropertyFailure", "apply", "assert_decomposition_dynamic", "assert_eliminates", "assert_idempotent",
                   "assert_matches_reference", "assert_meta_consistent", "assert_plugin_matches_reference",
                   "assert_preserves_semantics", "assert_same_distribution", "meta_problems", "observe"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'shimkit.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"shimkit.testing.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
