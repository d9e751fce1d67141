"""One audit's settings, as one record: built once from the command line or the Python API and passed whole
to every model's audit (in this process or a worker), to its cache key and to its numerics check.

>>> options = AuditOptions(numerics="execute", float64="float32")
>>> options.numerics, options.target.name, bool(AuditOptions().numerics)
(<Numerics.EXECUTE: 'execute'>, 'metal', False)
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from shimkit.audit.targets import METAL, TARGETS, Target
from shimkit.passes.float64 import DEFAULT_POLICY, check_policy


class Numerics(str, enum.Enum):
    """What is checked beyond the kernels: nothing, the programs handed to Inductor run on the CPU (or, for
    CUDA, compiled on the GPU), or the generated Metal programs themselves, compiled and executed."""

    OFF = "off"
    CHECK = "check"
    EXECUTE = "execute"

    def __bool__(self) -> bool:
        return self is not Numerics.OFF

    @classmethod
    def of(cls, value: "Numerics | bool | str") -> "Numerics":
        """``True``/``False`` (``--check-numerics``), a member, or its value."""
        if isinstance(value, bool):
            return cls.CHECK if value else cls.OFF
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"numerics must be one of {', '.join(m.value for m in cls)} or a bool; "
                             f"got {value!r}") from None


@dataclass(frozen=True)
class AuditOptions:
    """``plugins``: shimkit's registry-derived backend (``False``: the stock one). ``numerics``: see
    :class:`Numerics` (a bool or a value is accepted). ``target``: a :class:`Target` or its name. ``float64``: a
    policy of :mod:`shimkit.passes.float64`. ``speedups``: :mod:`shimkit.audit.speed` (same reports, faster)."""

    plugins: bool = True
    numerics: Numerics = Numerics.OFF
    target: Target = METAL
    float64: str = DEFAULT_POLICY
    speedups: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "numerics", Numerics.of(self.numerics))
        if isinstance(self.target, str):
            if self.target not in TARGETS:
                raise ValueError(f"target must be one of {', '.join(TARGETS)}; got {self.target!r}")
            object.__setattr__(self, "target", TARGETS[self.target])
        check_policy(self.float64)
        if self.numerics is Numerics.EXECUTE and not self.target.fake_device:
            raise ValueError(f"numerics='execute' runs generated Metal programs; the {self.target.name} target "
                             "checks numerics on its device with numerics='check'")

    def key(self) -> str:
        """What of these settings decides a model's report (``speedups`` does not), for the audit cache."""
        return f"plugins={self.plugins} numerics={self.numerics.value} target={self.target.name} float64={self.float64}"

    def stock(self) -> "AuditOptions":
        """The same settings for the stock backend."""
        return dataclasses.replace(self, plugins=False)
