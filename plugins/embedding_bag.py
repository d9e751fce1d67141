"""``aten::_embedding_bag_forward_only`` (``nn.EmbeddingBag``, ``F.embedding_bag`` in inference: their
composite calls it when no gradient is needed) as a gather and segment reductions (``index_add``,
``scatter_reduce``) that Inductor writes as Metal code.

ATen's CPU and CUDA kernels have no c-shim on mps, so every embedding bag was a missing kernel. The bags
are read from ``offsets`` as ATen defines them: position ``p`` belongs to the last bag starting at or before
it (empty bags hold nothing), ``include_last_offset`` drops the final offset as a bag, and entries equal to
a non-negative ``padding_idx`` count nowhere. Modes: sum (optionally weighted by ``per_sample_weights``),
mean (an empty bag is 0) and max (an empty bag is 0; ``max_indices`` holds, per bag and column, the
embedding row of the first maximum, as ATen's loop keeps the first).

The other three results only serve the backward. Where ATen defines them they are ATen's: the bag of
each position (``offset2bag``, empty on ATen's sum fast path without padding), the bag sizes, and for mean
its bag sizes again as ``max_indices``. In sum mode ATen leaves ``bag_size`` and ``max_indices`` uninitialized
(``at::empty``); they are zeros here, and the checks compare them only where ATen defines them.

Only static sizes are decomposed (a dynamic one is declined and stays a missing kernel): the checks at other
sizes feed random offsets, which ATen itself does not validate.
"""

from __future__ import annotations

import torch

from shimkit.registry import DecompositionDeclined, OpCall, OpPlugin, hookimpl, through_aten_composite

FORWARD_ONLY = "aten::_embedding_bag_forward_only.default"
COMPOSITES = ("aten::embedding_bag.padding_idx", "aten::embedding_bag.default")
MODES = {0: "sum", 1: "mean", 2: "max"}


def embedding_bag_decomposition(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                                per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    if any(isinstance(size, torch.SymInt) for t in (weight, indices, offsets) for size in t.shape):
        raise DecompositionDeclined("embedding_bag is decomposed at static sizes only: the bag of each position "
                                    "comes from offsets' values, which a check at other sizes cannot draw validly")
    if indices.dim() != 1 or offsets.dim() != 1:
        raise DecompositionDeclined("embedding_bag with indices or offsets that are not 1-D (nn.functional "
                                    "flattens 2-D input before it reaches the op)")
    if mode not in MODES:
        raise RuntimeError(f"embedding_bag: unknown mode {mode}")
    if per_sample_weights is not None and mode != 0:
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{MODES[mode]}'). Please open a feature "
                                  f"request on GitHub.")
    positions, width = indices.shape[0], weight.shape[1]
    bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    long = dict(dtype=torch.int64, device=weight.device)
    starts = torch.zeros(positions + 1, **long).index_add(0, offsets[:bags].to(torch.int64),
                                                           torch.ones(bags, **long))
    bag = starts[:positions].cumsum(0) - 1
    counted = indices != padding_idx if padding_idx >= 0 else torch.ones(positions, dtype=torch.bool,
                                                                           device=weight.device)
    rows = weight[indices]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(-1).to(rows.dtype)
    sizes = torch.zeros(bags, **long).index_add(0, bag, counted.to(torch.int64))
    if mode == 2:
        spread = bag.unsqueeze(-1).expand(positions, width)
        candidates = torch.where(counted.unsqueeze(-1), rows, float("-inf"))
        largest = torch.full((bags, width), float("-inf"), dtype=rows.dtype, device=rows.device)
        largest = largest.scatter_reduce(0, spread, candidates, "amax")
        reached = counted.unsqueeze(-1) & (candidates == largest.gather(0, spread))
        order = torch.arange(positions, **long).unsqueeze(-1).expand(positions, width)
        first = torch.full((bags, width), positions, **long).scatter_reduce(
            0, spread, torch.where(reached, order, positions), "amin")
        empty = (sizes == 0).unsqueeze(-1)
        output = torch.where(empty, 0.0, largest).to(weight.dtype)
        padded = torch.cat([indices.to(torch.int64), torch.zeros(1, **long)])
        max_indices = torch.where(empty, 0, padded[first.clamp(max=positions)])
    else:
        summed = torch.zeros(bags, width, dtype=rows.dtype, device=rows.device).index_add(
            0, bag, torch.where(counted.unsqueeze(-1), rows, 0.0))
        if mode == 1:
            output = summed / sizes.clamp(min=1).unsqueeze(-1).to(summed.dtype)
        else:
            output = summed
        output = output.to(weight.dtype)
    if mode == 0:
        fast_path = padding_idx < 0
        offset2bag = torch.zeros(0, **long) if fast_path else bag
        unset = torch.zeros(offsets.shape[0], **long)
        return output, offset2bag, unset, unset.clone()
    return output, bag, sizes, (max_indices if mode == 2 else sizes.clone())


def embedding_bag_reference(op):
    """ATen's op with sum mode's uninitialized ``bag_size`` and ``max_indices`` read as zeros."""
    def reference(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
        output, offset2bag, bag_size, max_indices = op(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                                                       per_sample_weights, include_last_offset, padding_idx)
        if mode == 0:
            bag_size, max_indices = torch.zeros_like(bag_size), torch.zeros_like(max_indices)
        return output, offset2bag, bag_size, max_indices

    return reference


def embedding_bag_calls():
    """Tables of 1 to 6 rows and 1 to 4 columns (ATen fails on none; values with ties), 0 to 10 indices in
    1 to 4 bags (empty ones too), every mode, per-sample weights in sum mode, padding or not, the last offset
    or not."""
    from hypothesis import strategies as st

    from shimkit.plugins.shared import float32_tensors

    def call(rows, width, positions, cuts, mode, weighted, padding, last, data):
        weight = data.draw(float32_tensors((rows, width), st.sampled_from([-1.0, 0.0, 0.5, 2.0]) |
                                           st.floats(-4, 4, width=32)))
        indices = torch.tensor(data.draw(st.lists(st.integers(0, rows - 1), min_size=positions,
                                                  max_size=positions)), dtype=torch.int64)
        offsets = [0] + sorted(data.draw(st.lists(st.integers(0, positions), min_size=cuts - 1,
                                                  max_size=cuts - 1)))
        if last:
            offsets.append(positions)
        psw = (data.draw(float32_tensors((positions,), st.floats(0, 2, width=32)))
               if weighted and mode == 0 else None)
        return OpCall((weight, indices, torch.tensor(offsets, dtype=torch.int64), False, mode, False, psw, last,
                       padding % rows if padding is not None else -1))

    return st.builds(call, st.integers(1, 6), st.integers(1, 4), st.integers(0, 10), st.integers(1, 4),
                     st.sampled_from([0, 1, 2]), st.booleans(), st.none() | st.integers(0, 5), st.booleans(),
                     st.data())


def composite_calls():
    return embedding_bag_calls().map(lambda call: OpCall(call.args[:8] + ((call.args[8] if call.args[8] >= 0
                                                                            else None),)))


@hookimpl
def shimkit_op_plugins():
    yield OpPlugin(
        name="embedding-bag",
        ops=(FORWARD_ONLY, *COMPOSITES),
        decompositions={FORWARD_ONLY: embedding_bag_decomposition,
                        **{op: through_aten_composite(op) for op in COMPOSITES}},
        decomposition_devices=("mps",),
        references={FORWARD_ONLY: embedding_bag_reference(torch.ops.aten._embedding_bag_forward_only.default),
                    "aten::embedding_bag.padding_idx":
                        embedding_bag_reference(torch.ops.aten.embedding_bag.padding_idx),
                    "aten::embedding_bag.default": embedding_bag_reference(
                        lambda *args: torch.ops.aten.embedding_bag.default(*args[:8]))},
        input_strategies={FORWARD_ONLY: embedding_bag_calls,
                          "aten::embedding_bag.padding_idx": composite_calls,
                          "aten::embedding_bag.default": lambda: embedding_bag_calls().filter(
                              lambda call: call.args[8] < 0).map(lambda call: OpCall(call.args[:8]))},
        doc="embedding_bag (sum, mean, max; per-sample weights, padding) as a gather and segment reductions.",
    )
