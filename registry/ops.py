"""One canonical spelling for an operator overload: ``"namespace::name.overload"``.

Plugins may name ops as ``torch.ops.aten.addmm.default``, as an edge-dialect op
(``exir_ops.edge.aten.addmm.default``), as an ``OpOverloadPacket`` (meaning its ``default``
overload), or as a string (``"aten::addmm"``, ``"aten.addmm.default"``, ``"metal::gather_qmv"``).
Everything in the registry is keyed by the canonical string so that edge and core ATen spellings of
the same op collide as they should.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from shimkit.registry.errors import UnknownOpError


def canonical_op_name(op: Any) -> str:
    """Return ``"ns::name.overload"`` for any accepted spelling of an operator overload.

    >>> canonical_op_name(torch.ops.aten.split_copy.Tensor)
    'aten::split_copy.Tensor'
    >>> canonical_op_name("aten::addmm")
    'aten::addmm.default'
    """
    inner = getattr(op, "_op", None)  # EdgeOpOverload wraps the ATen overload
    if isinstance(inner, torch._ops.OpOverload):
        op = inner
    if isinstance(op, torch._ops.OpOverload):
        return f"{op._schema.name}.{op._overloadname or 'default'}"
    if isinstance(op, torch._ops.OpOverloadPacket):
        return f"{op._qualified_op_name}.default"
    if isinstance(op, str):
        text = op.strip()
        if "::" in text:
            namespace, rest = text.split("::", 1)
        elif text.count(".") >= 1:
            namespace, rest = text.split(".", 1)
        else:
            raise UnknownOpError(f"op name {op!r} has no namespace (expected e.g. 'aten::addmm')")
        name, _, overload = rest.partition(".")
        if not namespace or not name:
            raise UnknownOpError(f"op name {op!r} is malformed (expected 'ns::name[.overload]')")
        return f"{namespace}::{name}.{overload or 'default'}"
    raise UnknownOpError(
        f"cannot interpret {op!r} (of type {type(op).__name__}) as an operator overload"
    )


def resolve_op(name: str) -> torch._ops.OpOverload:
    """Return the ``OpOverload`` for a canonical name, raising :class:`UnknownOpError` if absent."""
    canonical = canonical_op_name(name)
    namespace, rest = canonical.split("::", 1)
    op_name, overload = rest.split(".", 1)
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
        return getattr(packet, overload)
    except (AttributeError, RuntimeError) as error:
        raise UnknownOpError(
            f"operator {canonical} is not registered with torch (is the library that defines it "
            f"imported?)"
        ) from error


def try_resolve_op(name: str) -> torch._ops.OpOverload | None:
    """Like :func:`resolve_op`, but ``None`` for an op no loaded library defines.

    Such an op cannot occur in any graph of this process (e.g. torchao's mps ops off macOS, but the 4-bit ones the torchao-linear plugin defines), so tables
    keyed by ``OpOverload`` simply leave it out.
    """
    try:
        return resolve_op(name)
    except UnknownOpError:
        return None


def node_op_name(target: Any) -> str | None:
    """Canonical name of an FX ``call_function`` target, or ``None`` if it is not an operator."""
    try:
        return canonical_op_name(target)
    except UnknownOpError:
        return None


def through_aten_composite(op: Any) -> Callable[..., Any]:
    """A decomposition of a ``CompositeImplicitAutograd`` op that runs ATen's own composite kernel.

    ExecuTorch's AOTI partitioner keeps composite ops whole, so ``torch.cdist`` reaches Inductor as
    ``aten::cdist`` and is expanded there, after shimkit's passes, into ``_cdist_forward``. A plugin
    that decomposes ``_cdist_forward`` also lists ``aten::cdist`` with this decomposition: shimkit's
    pass traces the composite with the other decompositions active, so the expansion arrives with
    ``_cdist_forward`` already decomposed. Eager, it is ATen's result exactly.

    >>> cdist = through_aten_composite("aten::cdist")
    >>> cdist(torch.zeros(1, 2), torch.ones(1, 2)).tolist()
    [[1.4142135381698608]]
    """
    overload = resolve_op(op) if isinstance(op, str) else op
    if not torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), "CompositeImplicitAutograd"):
        raise ValueError(f"{canonical_op_name(overload)} has no CompositeImplicitAutograd kernel to decompose through")

    def decomposition(*args: Any, **kwargs: Any) -> Any:
        return overload.decompose(*args, **kwargs)

    decomposition.__qualname__ = f"through_aten_composite({canonical_op_name(overload)})"
    return decomposition
