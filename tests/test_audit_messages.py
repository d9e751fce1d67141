"""Audit failures are reported whole: the line that answers the question is often not the first."""

import textwrap

from shimkit.audit.loader import load_model
from shimkit.audit.report import render_text, to_json
from shimkit.audit.runner import AuditRun, audit_loaded


def _write_model(tmp_path, body):
    path = tmp_path / "model.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return str(path)


def test_a_failure_message_is_reported_whole(tmp_path):
    spec = _write_model(tmp_path, """
        class Model(torch.nn.Module):
            def forward(self, x):
                raise ValueError("these inputs are wrong:\\n  x: the answer is on the second line")

        def make():
            return Model(), (torch.randn(2),)
    """) + ":make"
    audit = audit_loaded(load_model(spec), config=None)
    assert audit.status == "error"
    assert "the answer is on the second line" in audit.failure.message
    text = render_text(to_json(AuditRun([audit], False, None, None)))
    assert "the answer is on the second line" in text
