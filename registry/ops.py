"""One canonical spelling for an operator overload: ``"namespace::name.overload"``.

Plugins may name ops as ``torch.ops.aten.addmm.default``, as an edge-dialect op
(``exir_ops.edge.aten.addmm.default``), as an ``OpOverloadPacket`` (meaning its ``default``
overload), or as a string (``"aten::addmm"``, ``"aten.addmm.default"``, ``"metal::gather_qmv"``).
Everything in the registry is keyed by the canonical string so that edge and core ATen spellings of
the same op collide as they should.
"""

from __future__ import annotations

from typing import Any

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

    Such an op cannot occur in any graph of this process (e.g. torchao's mps ops off macOS), so tables
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
