"""The backends ``shimkit audit --backend`` lowers for: Metal on fake mps tensors, CUDA on a real GPU.

Both are ExecuTorch AOTInductor backends configured from the same registry; they differ in where the
lowering runs. Metal's runs on Linux on fake mps tensors and compiles nothing
(:mod:`shimkit.audit.fake_mps`). CUDA's is the real thing: Inductor's CUDA codegen, Triton autotuning and
nvcc, so it needs a CUDA GPU, and says so instead of failing inside Inductor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class TargetUnavailableError(RuntimeError):
    """This machine cannot lower for the target (the message says what is missing)."""


@dataclass(frozen=True)
class Target:
    """One backend the audit lowers for.

    >>> TARGETS["cuda"].device, TARGETS["cuda"].backend
    ('cuda', 'CudaBackend')
    """

    name: str
    device: str  # the registry's device name
    backend: str  # the ExecuTorch backend class
    partitioner: str
    module: str  # where both classes live, below executorch.backends
    fake_device: bool  # lowers on fake tensors, on any machine

    def classes(self) -> tuple[Any, Any]:
        """The backend and partitioner classes (importing them imports the backend's dependencies)."""
        import importlib

        backend = importlib.import_module(f"executorch.backends.{self.module}_backend")
        partitioner = importlib.import_module(f"executorch.backends.{self.module}_partitioner")
        return getattr(backend, self.backend), getattr(partitioner, self.partitioner)

    def check_available(self) -> None:
        """Raise :class:`TargetUnavailableError` where this machine cannot lower for the target."""
        if self.fake_device:
            return
        import importlib.util

        import torch

        if not torch.cuda.is_available():
            raise TargetUnavailableError(
                f"--backend {self.name} lowers for real (Inductor's CUDA codegen, Triton, nvcc) and needs a "
                f"CUDA GPU; this torch ({torch.__version__}) sees none (torch.cuda.is_available() is False). "
                f"Run it on a machine with one (docs/cuda.md)")
        if importlib.util.find_spec("triton") is None:
            raise TargetUnavailableError(f"--backend {self.name} needs triton (ExecuTorch's {self.backend} "
                                         f"imports it and Inductor generates CUDA kernels with it)")


TARGETS = {
    "metal": Target("metal", "mps", "MetalBackend", "MetalPartitioner", "apple.metal.metal", fake_device=True),
    "cuda": Target("cuda", "cuda", "CudaBackend", "CudaPartitioner", "cuda.cuda", fake_device=False),
}
METAL = TARGETS["metal"]
