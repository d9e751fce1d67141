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


def test_a_complex_output_is_named_at_its_source_line_with_the_runtimes_reason(tmp_path):
    """Everything before the output is made real (the DFT of a 2-D input is one real product: four would
    become Inductor's mm_plus_mm under max_autotune, a kernel the Metal runtime lacks); the output's
    view_as_complex is the one missing kernel, named at the user's line, with why no plugin can help."""
    from shimkit.audit import run_audit

    spec = _write_model(tmp_path, """
        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.fft.fft(x) * 2  # the complex output

        def make():
            return Model(), (torch.randn(3, 16),)
    """) + ":make"
    document = to_json(run_audit([spec], plugins=True))
    (model,) = document["models"]
    assert model["missing"] == ["at::_ops::view_as_complex::call"]
    (kernel,) = [k for k in model["kernels"] if k["status"] == "missing"]
    assert "# the complex output" in kernel["nodes"][0]["source"]["code"]
    assert "Metal runtime has no complex dtype" in kernel["fixes"][0]
    assert "torch.view_as_real" in kernel["fixes"][0]
