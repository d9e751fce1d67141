"""Auditing many models in one process does not grow the heap without bound.

Before the fix 30 audits of ``seed_split_linear`` left about 32,000 more live objects (every past
export's shape environment, fake tensors and graphs, pinned by upstream caches). What may remain is
torch's own bounded bookkeeping (the last 64 compilation metrics, say): a small constant.

The audits run in a fresh interpreter: pytest's own log and warning capture keeps records for the
length of a test, which would be counted as growth here.
"""

import json
import subprocess
import sys

WARM_UP, AUDITS = 3, 12
# Each audit may leave a few records in torch's bounded logs (CompilationMetrics, its traceback,
# context-variable nodes: about 14 objects); a leak pins thousands (a shape environment alone).
ALLOWED_PER_AUDIT = 40

SCRIPT = f"""
import gc, json
from shimkit.audit import run_audit
from shimkit.backend import new_registry

registry = new_registry(env={{"SHIMKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}})
for _ in range({WARM_UP}):
    run_audit(["seed_split_linear"], registry=registry)
gc.collect()
before = len(gc.get_objects())
statuses = [run_audit(["seed_split_linear"], registry=registry).models[0].status for _ in range({AUDITS})]
gc.collect()
print(json.dumps({{"growth": len(gc.get_objects()) - before, "statuses": statuses}}))
"""


def test_repeated_audits_leave_no_growing_heap():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["statuses"] == ["clean"] * AUDITS
    assert result["growth"] <= ALLOWED_PER_AUDIT * AUDITS, f"{result['growth']} more live objects"
