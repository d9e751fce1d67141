"""shimkit: make PyTorch models lower cleanly to AOTInductor-based ExecuTorch backends.

The subpackages are the architecture: :mod:`shimkit.registry` (op plugins and what is derived from
them), :mod:`shimkit.passes` (FX graph passes and pipelines), :mod:`shimkit.plugins` (the built-in op
plugins), :mod:`shimkit.audit` (Metal lowering predicted on Linux) and :mod:`shimkit.csrc` (kernel
sources and the build helper for ``shimkit._C``).
"""

from shimkit._versions import check_versions

__version__ = "0.1.0"
VERSIONS = check_versions()
