"""Start-up stays cheap: the commands people wait on do not import what they never use.

The time itself is measured in benchmarks/bench_startup.py (a ratio to ``import torch``); this test
guards its cause, which does not depend on the machine: ``shimkit plugins`` and ``shimkit config`` run
without importing Inductor or Dynamo (about a second of ``import torch._inductor``).
"""

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch._inductor", "torch._dynamo")
PROBE = """
import json, runpy, sys
sys.argv = ["shimkit", *json.loads(sys.argv[1])]
try:
    runpy.run_module("shimkit", run_name="__main__")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m in {heavy})), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["plugins"], ["plugins", "--json"], ["config", "mps"]])
def test_command_does_not_import_inductor(argv):
    env = dict(os.environ, SHIMKIT_DISABLE_PLUGIN_AUTOLOAD="1")
    result = subprocess.run([sys.executable, "-c", PROBE.format(heavy=set(HEAVY)), json.dumps(argv)],
                            env=env, capture_output=True, text=True, check=True)
    imported = json.loads(result.stderr.strip().splitlines()[-1])
    assert imported == [], f"shimkit {' '.join(argv)} imported {imported}"
