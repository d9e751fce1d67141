"""Auditing many models in one process does not grow the heap without bound.

Before the fix 30 audits of ``seed_split_linear`` left about 32,000 more live objects (every past
export's shape environment, fake tensors and graphs, pinned by upstream caches). What may remain is
torch's own bounded bookkeeping (the last 64 compilation metrics, say): a small constant.
"""

import gc

from shimkit.audit import run_audit
from shimkit.registry import PluginRegistry

WARM_UP, AUDITS = 3, 12
# Each audit may leave a few records in torch's bounded logs (CompilationMetrics, its traceback,
# context-variable nodes: about 14 objects); a leak pins thousands (a shape environment alone).
ALLOWED_PER_AUDIT = 40


def live_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


def test_repeated_audits_leave_no_growing_heap():
    registry = PluginRegistry(env={"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"})
    for _ in range(WARM_UP):
        run_audit(["seed_split_linear"], registry=registry)
    before = live_objects()
    for _ in range(AUDITS):
        assert run_audit(["seed_split_linear"], registry=registry).models[0].status == "clean"
    growth = live_objects() - before
    assert growth <= ALLOWED_PER_AUDIT * AUDITS, f"{growth} more live objects after {AUDITS} audits"
