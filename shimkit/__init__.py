"""shimkit: make PyTorch models lower cleanly to AOTInductor-based ExecuTorch backends.

The subpackages are the architecture: :mod:`shimkit.registry` (op plugins and what is derived from
them), :mod:`shimkit.passes` (FX graph passes and pipelines), :mod:`shimkit.plugins` (the built-in op
plugins), :mod:`shimkit.audit` (Metal lowering predicted on Linux) and :mod:`shimkit.csrc` (kernel
sources and the build helper for ``shimkit._C``).

The torch and executorch releases are checked when a subpackage that depends on them is imported
(:mod:`shimkit._versions`), not here: the pytest plugin ``shimkit.testing.pytest_plugin`` is imported by
every pytest run in an environment where shimkit is installed and must not fail there.
"""

__version__ = "0.1.0"
