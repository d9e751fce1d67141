"""Work-group loops: kernels with barriers and simdgroup functions compiled into loops over their threads.

A kernel that reaches ``threadgroup_barrier`` or a simdgroup function cannot run its threads one after
another: each thread must stop at the barrier until all have arrived. POCL (``WorkitemLoops``), MCUDA
("deep fission") and COX (hierarchical collapsing) compile such a kernel into one loop over the group's
threads per region between two barriers, with every variable live across a barrier stored per thread. This
package does that at the source level, on Clang's AST of the translated kernel (libclang): the AST has the
statements, the variables with their types and every call resolved to its declaration, which is what the
split needs; the C++ it writes goes to the same host compiler as the rest of the library.

For each cooperative kernel it writes a *group function* beside the kernel: same buffer parameters, plus
the group's threads. In it,

* every variable declared in a block that contains a split point is an array over the group's threads
  (``auto& acc = storage[t]`` in each region), and so is a buffer parameter the kernel reassigns, but for
  a variable every thread holds alike (``uniformity``): that is one value, assigned once per group;
* statements between split points form a region: ``group.region(mask, [&](t) { ... })``;
* ``if`` / ``for`` / ``while`` / ``do`` that contain a split point run as plain C++ at group level where
  their condition is uniform, and otherwise with a per-thread mask (a thread that leaves the loop or
  takes the other branch sits out); ``return`` takes the thread out of every later region;
* two regions with nothing between them run as one loop (an inlined function's last region and its
  caller's next statements; a condition's region and the first region of its branch);
* a statement with a simdgroup function (``acc = simd_sum(acc)``, ``if (simd_any(p))``) splits around its
  call: the call is evaluated for every thread, the lanes of each simdgroup combine, then the statement
  runs with the results (``shimkit_metal/loops.h``, the COX treatment of warp functions). A call of
  sync.h's own functions on plain operands is written directly: its operands go to per-thread arrays and
  ``metal::lanes`` combines them, with no lane records and no second evaluation of the call.

What it cannot split runs on cooperative fibers as before, and the kernel says why
(:attr:`shimkit.metal.MetalKernel.execution` is ``"fibers"``, ``fibers_because`` the reason): a call to a
function of the source that itself reaches a barrier (c10's ``threadgroup_sum``: only the kernel's own body
is split, no inlining), ``goto`` / ``switch`` / ``break`` / ``continue`` across a split loop, a split point
inside an expression with another one, ``auto`` variables of dependent type, references or directly
initialised variables live across a split, and a simdgroup call whose operands have side effects.

The passes, in POCL's manner one idea per module, share one record (``state.GroupState``): ``source``
(libclang's AST and the source it maps to), ``cache`` (the precompiled header and the store's key),
``reach`` and ``uniformity`` (analyses), ``parameters``, ``text`` and ``returns`` (what a statement is in a
region), ``bindings``, ``fragments`` and ``regions`` (parallel regions), ``collectives``, ``declarations``,
``inlining``, ``group_reductions`` (c10's two-stage reductions as one group-level step),
``control_flow``, ``early_return``, and ``writer``, which walks the body; ``split`` runs them over a
translation.
"""

from __future__ import annotations

from shimkit.metal.loops.split import Split, group_function, split_kernels, split_translation
from shimkit.metal.loops.state import Unsplittable

__all__ = ["Split", "Unsplittable", "group_function", "split_kernels", "split_translation"]
