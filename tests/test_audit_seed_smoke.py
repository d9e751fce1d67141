"""Smoke test of the fake-mps method itself: it must reproduce, on Linux, the exact error the seed
issue reported from a Mac. The seed's fix (split_copy -> split in ReplaceViewCopyWithViewPass) is in
ExecuTorch 1.5.1, so removing that mapping brings the Mac error back; the audit must then say what
upstream says, character for character."""

import torch
from executorch.backends.aoti.passes import replace_view_copy_with_view
from executorch.exir.dialects._ops import ops as exir_ops

from shimkit.audit import audit_loaded, load_model
from shimkit.audit.recorder import PROXY_EXECUTOR

SEED_MAC_ERROR = (
    "Method forward missing fallback kernels (1 total):\n"
    "  - aten::split_copy.Tensor\n"
    "Please add them to the AOTI backend."
)


def test_seed_reproduces_the_mac_error_without_the_split_copy_mapping(monkeypatch):
    targets = replace_view_copy_with_view._VIEW_TARGETS
    monkeypatch.delitem(targets, torch.ops.aten.split_copy.Tensor)
    monkeypatch.delitem(targets, exir_ops.edge.aten.split_copy.Tensor)

    audit = audit_loaded(load_model("seed_split_linear"), config=None)

    assert audit.failure is None
    assert audit.upstream_errors == [SEED_MAC_ERROR]
    assert [(k.name, k.mechanism) for k in audit.missing] == [("aten::split_copy.Tensor", PROXY_EXECUTOR)]
    (node,) = audit.missing[0].graph_nodes
    assert node.source is not None
    assert node.source.file.endswith("audit/zoo/ops.py")
    assert node.source.code == "a, b = torch.split(x, 4, dim=1)"


def test_seed_lowers_clean_with_executorch_1_5_split_mapping():
    audit = audit_loaded(load_model("seed_split_linear"), config=None)

    assert audit.status == "clean"
    assert [k.name for k in audit.kernels] == ["aoti_torch_mps_mm_out"]
    assert audit.upstream_errors == []
