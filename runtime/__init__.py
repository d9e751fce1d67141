"""shimkit's Linux stand-in of ExecuTorch's Metal runtime, and what a runtime build is generated from.

* :mod:`shimkit.runtime.program`: a whole generated Metal program (the C++ wrapper AOTInductor writes for
  ``MetalBackend``) compiled against the stand-in and run on the CPU (:class:`MetalProgram`);
* ``runtime/native/``: the stand-in itself in C++ (the AOTI mps ABI over :mod:`shimkit.metal`, the
  ``aoti_torch_*`` tensor functions over ExecuTorch tensors, CPU implementations of the runtime's own
  fallback kernels), built on demand with the plugins' adapters;
* :mod:`shimkit.runtime.sources`: what the stand-in compiles and how (its core, its own fallbacks and the
  c-shims each exports, the flags), without importing torch, so that ``shimkit audit --execute`` can
  compile the core while it imports torch;
* :mod:`shimkit.runtime.generated`: the C++ and CMake a runtime build takes from a backend's configuration
  (the plugins' MSL adapter source, the kernel source lists), here and on a Mac.

It sits above the registry (it builds what a ``BackendConfig`` derived), below the audit that runs it.
"""
