"""Uniformity: the values of a split kernel that every thread of a threadgroup holds alike.

POCL's work-group loops keep a variable that every work-item computes alike as one value for the group
(``VariableUniformityAnalysis``), and run a loop or branch whose condition is such a value as ordinary
control flow around the loops over the threads. The work-group loops do the same with what this module finds: a
uniform variable is one value in the group function, its assignments run once per group, and an ``if`` or
loop with a barrier whose condition is uniform runs at group level, with no per-thread mask. The tree
reduction ``for (uint s = size / 2; s > 0; s /= 2) { ...; threadgroup_barrier(...); }`` becomes one C++
loop around one loop over the threads, instead of three loops over the threads per step.

A value is uniform when it is built by operators, casts and literals from

* constants (enumerators, ``const`` variables outside the function, template arguments),
* the kernel's buffer pointers (the pointer, not what it points to), ``constant`` buffer references and
  thread parameters that are one per group (``threads_per_threadgroup``, ``threadgroup_position_in_grid``,
  ...), or an inlined function's parameters bound to such values (the ``seeds``),
* and uniform variables.

A variable is uniform when it has an arithmetic or pointer type, its address is never taken nor is it
bound to a reference, and each assignment to it (its initialisation included) is a whole statement that
runs at group level (a direct statement of a block with a split point, or the init or step of a loop with
one), under uniform control (every ``if`` and loop around it has a uniform condition), and assigns a
uniform value. The last two depend on which variables are uniform: the analysis starts from every
candidate and drops those that break a rule until none does. Memory (device or threadgroup) is never
uniform: another thread may write it between two barriers.

A variable that is not uniform is *recomputable* when its initialisation is its one assignment (and its
address is never taken nor bound to a reference) and its value is built the same way from thread
parameters (positions, indices), the seeds, constants, uniform variables assigned once and recomputable
variables: every region that names it computes it again from the thread's position instead of reading a
per-thread array that the first region filled (Inductor's ``int x0 = xindex;`` and ``auto r0_index =
thread_pos.y;``: four stores per thread in a row sum's first pass and loads in its last).
"""

from __future__ import annotations

from typing import Any, Callable

import shimkit.metal.cursors as cursors

ARITHMETIC = {"BOOL", "CHAR_U", "UCHAR", "CHAR16", "CHAR32", "USHORT", "UINT", "ULONG", "ULONGLONG", "CHAR_S",
              "SCHAR", "WCHAR", "SHORT", "INT", "LONG", "LONGLONG", "FLOAT", "DOUBLE", "POINTER"}
LITERALS = {"INTEGER_LITERAL", "FLOATING_LITERAL", "CXX_BOOL_LITERAL_EXPR", "CHARACTER_LITERAL", "CXX_UNARY_EXPR"}
PURE_UNARY = {"-", "+", "!", "~"}
ASSIGNMENTS = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
STEPS = {"++", "--"}
LOOPS = {"FOR_STMT", "WHILE_STMT", "DO_STMT"}


def written(statement):
    """The variable a statement assigns, where the statement is one assignment (``v = e``, ``v += e``,
    ``++v``, ``v--``) to a variable named alone; else None."""
    expression = cursors.unwrapped(statement)
    kind = cursors.kind(expression)
    children = cursors.operands(expression)
    if kind in ("BINARY_OPERATOR", "COMPOUND_ASSIGNMENT_OPERATOR") and len(children) == 2:
        if cursors.operator(expression) not in ASSIGNMENTS:
            return None
        target = children[0]
    elif kind == "UNARY_OPERATOR" and len(children) == 1 and cursors.operator(expression) in STEPS:
        target = children[0]
    else:
        return None
    target = cursors.unwrapped(target)
    if cursors.kind(target) != "DECL_REF_EXPR" or target.referenced is None:
        return None
    return target.referenced


def assigned_value(statement):
    """The value an assignment statement assigns (None for ``++`` / ``--``)."""
    expression = cursors.unwrapped(statement)
    children = cursors.operands(expression)
    return children[1] if len(children) == 2 else None


class Uniformity:
    """The uniform variables of one function body (the kernel's, or an inlined function's).

    ``group_level(statement)``: whether a compound statement, ``if`` or loop contains a split point (its
    statements are then written at group level); ``seeds(declaration)``: whether a declaration from
    outside the body (a parameter) is uniform.

    Example: in ``for (uint s = size / 2; s > 0; s /= 2) { if (t < s) p[t] += p[t + s]; barrier(); }``
    with ``size`` a ``threads_per_threadgroup`` parameter, ``s`` is uniform and so is ``s > 0``; ``t < s``
    is not (``t`` is the thread's position)."""

    def __init__(self, body, group_level: Callable[[Any], bool], seeds: Callable[[Any], bool],
                 threads: Callable[[Any], bool] = lambda declared: False) -> None:
        self.group_level, self.seeds, self.threads = group_level, seeds, threads
        self.variables: set[int] = set()   # hashes of the uniform variables' declarations
        self.locals: set[int] = set()      # hashes of every variable the body declares
        # for each candidate: (conditions it is assigned under, the assigned value or None)
        writes: dict[int, list[tuple[tuple, object]]] = {}
        sanctioned: dict[int, int] = {}    # hash -> assignments at group level, by statement
        self._collect(body, (), writes, sanctioned)
        touched = self._touched(body)      # hash -> every assignment or address-of of the variable
        # Only the body's own variables: a parameter it reassigns is a per-thread copy in every region.
        candidates = {h for h in writes if h in self.locals and touched.get(h, 0) == sanctioned.get(h, 0)}
        self.variables = candidates
        changed = True
        while changed:
            changed = False
            for variable in sorted(self.variables):
                if not all(all(self.uniform(c) for c in conditions) and (value is None or self.uniform(value))
                           for conditions, value in writes[variable]):
                    self.variables.discard(variable)
                    changed = True
        self._once = {h for h in self.variables if touched.get(h, 0) == 1}  # uniform, assigned by its initialisation
        self.recomputable: set[int] = {h for h in writes if h in self.locals and h not in self.variables
                                       and touched.get(h, 0) == sanctioned.get(h, 0) == 1 and len(writes[h]) == 1
                                       and writes[h][0][1] is not None}
        changed = True
        while changed:
            changed = False
            for variable in sorted(self.recomputable):
                if not self._recomputed(writes[variable][0][1]):
                    self.recomputable.discard(variable)
                    changed = True

    def uniform(self, expression) -> bool:
        """Whether ``expression`` has one value for the whole group (see the module's docstring)."""
        return expression is not None and self._built_from(expression, self._uniform_declaration, fields=False)

    def _recomputed(self, expression) -> bool:
        """Whether ``expression`` gives a thread the same value wherever it is evaluated after the
        declarations it names (see the module's docstring): a field of a value (``thread_pos.x``) too."""
        return self._built_from(expression, self._recomputed_declaration, fields=True)

    def _built_from(self, expression, declaration: Callable[[Any], bool], fields: bool) -> bool:
        """Whether ``expression`` is built by operators, casts and literals from the declarations that
        ``declaration`` accepts (and, with ``fields``, fields of such values, not through a pointer)."""
        kind = cursors.kind(expression)
        children = cursors.operands(expression)

        def built(child) -> bool:
            return self._built_from(child, declaration, fields)

        if kind in LITERALS:
            return True
        if kind in cursors.TRANSPARENT or kind in cursors.CASTS:
            return len(children) == 1 and built(children[0])
        if kind == "BINARY_OPERATOR":
            return (len(children) == 2 and cursors.operator(expression) not in ASSIGNMENTS | {","}
                    and all(built(c) for c in children))
        if kind == "UNARY_OPERATOR":
            return len(children) == 1 and cursors.operator(expression) in PURE_UNARY and built(children[0])
        if kind == "CONDITIONAL_OPERATOR":
            return len(children) == 3 and all(built(c) for c in children)
        if kind == "MEMBER_REF_EXPR" and fields:
            return (len(children) == 1 and cursors.kind(children[0].type.get_canonical()) != "POINTER"
                    and built(children[0]))
        if kind == "DECL_REF_EXPR":
            return declaration(expression.referenced)
        return False

    def _recomputed_declaration(self, declared) -> bool:
        if declared is None:
            return False
        if declared.hash in self.locals:
            return declared.hash in self.recomputable or declared.hash in self._once
        return self.threads(declared) or self._uniform_declaration(declared)

    def _uniform_declaration(self, declared) -> bool:
        if declared is None:
            return False
        kind = cursors.kind(declared)
        if declared.hash in self.locals:
            return declared.hash in self.variables
        if kind in ("ENUM_CONSTANT_DECL", "TEMPLATE_NON_TYPE_PARAMETER"):
            return True
        if kind == "VAR_DECL":
            parent = declared.semantic_parent
            outside = parent is None or cursors.kind(parent) not in ("FUNCTION_DECL", "FUNCTION_TEMPLATE",
                                                                     "CXX_METHOD", "LAMBDA_EXPR")
            return outside and declared.type.is_const_qualified()
        return self.seeds(declared)

    def _collect(self, block, conditions: tuple, writes: dict, sanctioned: dict) -> None:
        """The candidates declared at group level in ``block`` and their assignments there."""
        for statement in block.get_children():
            self._statement(statement, conditions, writes, sanctioned)

    def _statement(self, statement, conditions: tuple, writes: dict, sanctioned: dict) -> None:
        kind = cursors.kind(statement)
        self._declare_all(statement)
        if not self.group_level(statement):
            if kind == "DECL_STMT":
                self._declarations(statement, conditions, writes, sanctioned)
            else:
                self._assignment(statement, conditions, writes, sanctioned)
            return
        children = list(statement.get_children())
        if kind == "COMPOUND_STMT":
            self._collect(statement, conditions, writes, sanctioned)
        elif kind == "IF_STMT" and len(children) in (2, 3):
            for branch in children[1:]:
                self._branch(branch, conditions + (children[0],), writes, sanctioned)
        elif kind in LOOPS:
            condition, init, step, body = self._loop_parts(statement, children)
            inside = conditions + (condition,)
            if init is not None:
                if cursors.kind(init) == "DECL_STMT":
                    self._declarations(init, conditions, writes, sanctioned)
                else:
                    self._assignment(init, conditions, writes, sanctioned)
            if step is not None:
                self._assignment(step, inside, writes, sanctioned)
            self._branch(body, inside, writes, sanctioned)

    def _branch(self, statement, conditions: tuple, writes: dict, sanctioned: dict) -> None:
        if cursors.kind(statement) == "COMPOUND_STMT":
            self._collect(statement, conditions, writes, sanctioned)
        else:
            self._statement(statement, conditions, writes, sanctioned)

    @staticmethod
    def _loop_parts(statement, children: list):
        """(condition, init, step, body) of a loop; a loop without a condition (or a range-based for) has
        the placeholder ``None``, which is not uniform."""
        kind = cursors.kind(statement)
        if kind == "WHILE_STMT":
            return (children[0] if len(children) == 2 else None), None, None, children[-1]
        if kind == "DO_STMT":
            return (children[1] if len(children) == 2 else None), None, None, children[0]
        parts = cursors.for_parts(statement)
        if parts is None:
            return None, None, None, children[-1]
        init, condition, step, body = parts
        return condition, init, step, body

    def _declare_all(self, statement) -> None:
        for node in [statement, *cursors.walk(statement, into_lambdas=True)]:
            if cursors.kind(node) == "VAR_DECL":
                self.locals.add(node.hash)

    def _declarations(self, statement, conditions: tuple, writes: dict, sanctioned: dict) -> None:
        for variable in statement.get_children():
            if cursors.kind(variable) != "VAR_DECL" or cursors.kind(variable.type.get_canonical()) not in ARITHMETIC:
                continue
            if variable.storage_class is not None and variable.storage_class.name == "STATIC":
                continue  # threadgroup memory (static storage in the translation): memory, not a value
            values = [c for c in cursors.operands(variable)]
            writes.setdefault(variable.hash, []).append((conditions, values[-1] if values else None))
            if values:
                sanctioned[variable.hash] = sanctioned.get(variable.hash, 0) + 1

    def _assignment(self, statement, conditions: tuple, writes: dict, sanctioned: dict) -> None:
        variable = written(statement)
        if variable is None:
            return
        writes.setdefault(variable.hash, []).append((conditions, assigned_value(statement)))
        sanctioned[variable.hash] = sanctioned.get(variable.hash, 0) + 1

    @staticmethod
    def _assigned_variable(target):
        """The variable an assignment to (or the address of) ``target`` may change: ``v`` of ``v``,
        ``v.x``, ``v[i]`` for an array ``v``; None through a pointer (what changes is memory)."""
        while True:
            kind = cursors.kind(target)
            children = cursors.operands(target)
            if kind == "DECL_REF_EXPR":
                return target.referenced
            through_pointer = bool(children) and cursors.kind(children[0].type.get_canonical()) == "POINTER"
            if kind in ("ARRAY_SUBSCRIPT_EXPR", "MEMBER_REF_EXPR") and children and not through_pointer:
                target = children[0]
            elif (kind in cursors.TRANSPARENT or kind in cursors.CASTS) and len(children) == 1:
                target = children[0]
            else:
                return None

    @staticmethod
    def _touched(body) -> dict[int, int]:
        """How many times each variable is assigned, initialised, stepped or has its address taken (or is
        bound to a reference, or captured by a lambda) anywhere in the body: a candidate all of whose
        touches are assignments at group level stays a candidate."""
        counts: dict[int, int] = {}

        def touch(declared) -> None:
            if declared is not None:
                counts[declared.hash] = counts.get(declared.hash, 0) + 1

        for node in cursors.walk(body, into_lambdas=True):
            kind = cursors.kind(node)
            if kind == "VAR_DECL":
                if any(True for _ in cursors.operands(node)):
                    touch(node)
                if cursors.kind(node.type) in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
                    for reference in cursors.walk(node):
                        if cursors.kind(reference) == "DECL_REF_EXPR":
                            touch(reference.referenced)
            elif kind in ("BINARY_OPERATOR", "COMPOUND_ASSIGNMENT_OPERATOR", "UNARY_OPERATOR"):
                operator = cursors.operator(node)
                if operator in ASSIGNMENTS or operator in STEPS or (kind == "UNARY_OPERATOR" and operator == "&"):
                    operands = cursors.operands(node)
                    if operands:
                        touch(Uniformity._assigned_variable(operands[0]))
            elif kind == "CALL_EXPR":
                declared = node.referenced
                parameters = ([c for c in declared.get_children() if cursors.kind(c) == "PARM_DECL"]
                              if declared is not None else [])
                for index, argument in enumerate(node.get_arguments()):
                    target = cursors.unwrapped(argument)
                    if cursors.kind(target) != "DECL_REF_EXPR":
                        continue
                    parameter = parameters[index] if index < len(parameters) else None
                    by_value = parameter is not None and (
                        cursors.kind(parameter.type) not in ("LVALUEREFERENCE", "RVALUEREFERENCE")
                        or parameter.type.get_pointee().is_const_qualified())
                    if not by_value:
                        touch(target.referenced)
            elif kind == "LAMBDA_EXPR":
                for reference in cursors.walk(node, into_lambdas=True):
                    if cursors.kind(reference) == "DECL_REF_EXPR":
                        touch(reference.referenced)
        return counts
