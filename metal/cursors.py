"""Small readers of libclang's cursors that the work-group loop passes (``loops/``) share."""

from __future__ import annotations

from typing import Iterator

# Expressions around an operand that change neither its value nor which variable it names (implicit
# conversions show as UNEXPOSED_EXPR in libclang's binding).
TRANSPARENT = {"UNEXPOSED_EXPR", "PAREN_EXPR"}
CASTS = {"CXX_STATIC_CAST_EXPR", "CSTYLE_CAST_EXPR", "CXX_FUNCTIONAL_CAST_EXPR"}


def kind(node) -> str:
    """A cursor's or type's kind; "OTHER" for one this libclang binding has no name for (the type
    ``_Float16`` is 32)."""
    try:
        return node.kind.name
    except ValueError:
        return "OTHER"


def walk(cursor, into_lambdas: bool = False) -> Iterator:
    """Every cursor under ``cursor``, depth first (not into lambdas unless asked)."""
    for child in cursor.get_children():
        yield child
        if into_lambdas or child.kind.name != "LAMBDA_EXPR":
            yield from walk(child, into_lambdas)


def operands(expression) -> list:
    """An expression's operands: its children but the type and template names libclang lists with them."""
    return [c for c in expression.get_children() if not kind(c).endswith("_REF")]


def unwrapped(expression):
    """An expression without the implicit conversions and parentheses libclang wraps around it, nor casts
    to its own type (c10's `static_cast<opmath_t<T>>(val)` of a float)."""
    while True:
        children = operands(expression)
        if len(children) != 1:
            return expression
        if kind(expression) in TRANSPARENT or (
                kind(expression) in CASTS
                and expression.type.get_canonical().spelling == children[0].type.get_canonical().spelling):
            expression = children[0]
        else:
            return expression


def operator(expression) -> str:
    """The operator of a binary, compound-assignment or unary operator expression, read from its tokens
    (this libclang binding has no accessor for it)."""
    tokens = list(expression.get_tokens())
    children = operands(expression)
    if kind(expression) == "UNARY_OPERATOR":
        if not tokens or not children:
            return ""
        # prefix: the first token; postfix (x++): the last
        first = tokens[0]
        return first.spelling if first.extent.start.offset < children[0].extent.start.offset else tokens[-1].spelling
    if len(children) != 2:
        return ""
    after = children[0].extent.end.offset
    return next((t.spelling for t in tokens if t.extent.start.offset >= after), "")


def for_parts(statement):
    """(init, condition, step, body) of a ``for`` statement, each None where missing, placed by the
    semicolons in its parentheses (libclang leaves the missing parts out of its children); None for a
    range-based ``for``."""
    tokens = list(statement.get_tokens())
    depth, semicolons, close = 0, [], None
    for token in tokens[1:]:
        if token.spelling in "([{":
            depth += 1
        elif token.spelling in ")]}":
            depth -= 1
            if depth == 0:
                close = token.extent.start.offset
                break
        elif token.spelling == ";" and depth == 1:
            semicolons.append(token.extent.start.offset)
    if len(semicolons) != 2 or close is None:
        return None
    children = list(statement.get_children())
    init = condition = step = None
    for child in children[:-1]:
        at = child.extent.start.offset
        if at < semicolons[0]:
            init = child
        elif at < semicolons[1]:
            condition = child
        elif at < close:
            step = child
    return init, condition, step, children[-1]
