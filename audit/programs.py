"""How an exporter hands over a program of several methods and lowers it: :class:`Program` and :class:`Lowering`,
which a MODEL factory returns (:mod:`shimkit.audit.loader`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping


@dataclass(frozen=True)
class Lowering:
    """How an exporter lowers its program, where it departs from stock ``to_edge_transform_and_lower``: the
    ``EdgeCompileConfig`` fields it sets and the ``transform_passes`` it runs. The audit lowers each method so,
    stock and with shimkit's plugins (whose edge exceptions are added to the config, not put in its place).

    >>> from executorch.exir.passes.remove_noop_pass import RemoveNoopPass      # doctest: +SKIP
    >>> Lowering({"_skip_dim_order": True}, (RemoveNoopPass(),))               # doctest: +SKIP
    """

    compile_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    transform_passes: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        import dataclasses

        from executorch.exir import EdgeCompileConfig

        known = {f.name for f in dataclasses.fields(EdgeCompileConfig)}
        unknown = sorted(set(self.compile_options) - known)
        if unknown:
            raise ValueError(f"Lowering: {', '.join(map(repr, unknown))} is not an EdgeCompileConfig field "
                             f"(fields: {', '.join(sorted(known))})")
        for each in self.transform_passes:
            if not callable(each):
                raise ValueError(f"Lowering: transform pass {each!r} is not callable")
        object.__setattr__(self, "compile_options", MappingProxyType(dict(self.compile_options)))
        object.__setattr__(self, "transform_passes", tuple(self.transform_passes))


@dataclass(frozen=True)
class Program:
    """A program of several methods as an exporter makes and lowers it: ``methods`` maps each method name to
    ``(model, example_inputs[, dynamic_shapes])`` or to an ``ExportedProgram``; ``lowering`` is the exporter's
    lowering. A factory returns one where a plain dict of methods would lose how the exporter lowers them.

    >>> def whisper():                                                           # doctest: +SKIP
    ...     exported = Seq2SeqLMExportableModule(model).export()  # {"encoder": ..., "text_decoder": ...}
    ...     return Program(exported, Lowering({"_skip_dim_order": True}))
    """

    methods: Mapping[str, Any]
    lowering: Lowering = field(default_factory=Lowering)
