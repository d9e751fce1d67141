"""The Linux Metal runtime's fallbacks against eager torch at the sizes of real models (issue 69 part 2).

    .venv/bin/python benchmarks/bench_fallbacks.py [--repeat 3] [--only NAME ...]

Each fallback (runtime/native/fallbacks/) is called by its C symbol with real AtenTensorHandles, as the tests call
them (tests/fallback_helpers.py builds the library), and timed against the eager op that computes the same thing:

* Llama-3.2-1B's layer at a 512-token prompt (hidden 2048, 32 query and 8 key/value heads of 64, ffn 8192) and at one
  token: ``mm`` for the q/k/v/o and MLP projections (the weight transposed in memory, as a linear layer's is),
  ``addmm`` with a bias, ``bmm`` for the attention products, SDPA (causal, grouped heads), the 4-bit linear
  (``fpa4w``, group 32; eager: ``F.linear`` with the weight already dequantized, what a bf16 model runs);
* Qwen3-MoE's experts (128 of [768, 2048], 8 per token) at 64 tokens: ``gather_qmv`` (eager: each expert's
  dequantized weight applied to its tokens);
* whisper-tiny's encoder on 10 s of audio (1000 frames): its two convolutions (80 -> 384 and 384 -> 384 channels,
  kernel 3, the second with stride 2), through the runtime's 2-D convolution.

Each row is run on one thread (``torch.set_num_threads(1)``, ``SHIMKIT_CPU_THREADS=1``) and on every core;
each figure is the median of ``--repeat`` calls after one warm-up. The ratio is fallback / eager (below 1: faster);
issue 69's bar is 2x on one thread. float32 unless the row says bf16.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fallback_helpers import H, call, int_array, last_error, library, optional, steal  # noqa: E402

from shimkit.testing.kernels import AOTI_TORCH_SUCCESS, tensor_handles  # noqa: E402

HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, PROMPT = 2048, 8192, 32, 8, 64, 512


def random(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)), dtype=torch.float32).to(dtype)


def checked(status: int) -> None:
    if status != AOTI_TORCH_SUCCESS:
        raise RuntimeError(last_error())


def mm_case(m: int, k: int, n: int, dtype=torch.float32):
    x, weight = random(m, k, dtype=dtype), random(n, k, dtype=dtype)
    out = torch.empty(m, n, dtype=dtype)

    def fallback():
        with tensor_handles(out, x, weight.t()) as handles:
            checked(call("aoti_torch_mps_mm_out", *handles))
    return fallback, lambda: torch.mm(x, weight.t())


def addmm_case(m: int, k: int, n: int):
    x, weight, bias = random(m, k), random(n, k), random(n)
    out = torch.empty(m, n)

    def fallback():
        with tensor_handles(out, bias, x, weight.t()) as handles:
            checked(call("aoti_torch_mps_addmm_out", *handles, 1.0, 1.0))
    return fallback, lambda: torch.addmm(bias, x, weight.t())


def bmm_case(batch: int, m: int, k: int, n: int):
    a, b = random(batch, m, k), random(batch, k, n)
    out = torch.empty(batch, m, n)

    def fallback():
        with tensor_handles(out, a, b) as handles:
            checked(call("aoti_torch_mps_bmm_out", *handles))
    return fallback, lambda: torch.bmm(a, b)


def sdpa_case(length: int, dtype=torch.float32):
    q = random(1, HEADS, length, HEAD_DIM, dtype=dtype)
    k, v = random(1, KV_HEADS, length, HEAD_DIM, dtype=dtype), random(1, KV_HEADS, length + 1, HEAD_DIM, dtype=dtype)
    v = v[:, :, :length]

    def fallback():
        out, weights = H(), H()
        with tensor_handles(q, k, v) as handles:
            checked(call("aoti_torch_mps__scaled_dot_product_attention_math_for_mps_v2", *handles, optional(None), 0.0,
                         1, optional(None), None, 1, ctypes.byref(out), ctypes.byref(weights)))
        steal(out), steal(weights)
    return fallback, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def int4_weights(n: int, k: int, group: int, experts: int | None = None, dtype=torch.float32):
    lead = () if experts is None else (experts,)
    generator = torch.Generator().manual_seed(n + k)
    packed = torch.randint(0, 256, (*lead, n, k // 2), generator=generator, dtype=torch.uint8)
    scales = (torch.rand(*lead, n, k // group, generator=generator) / 8).to(dtype)
    zeros = (torch.rand(*lead, n, k // group, generator=generator) - 0.5).to(dtype)
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(*lead, n, k).to(dtype)
    dense = codes * scales.repeat_interleave(group, -1) + zeros.repeat_interleave(group, -1)
    return packed, scales, zeros, dense


def linear_4bit_case(m: int, k: int, n: int, group: int = 32):
    x = random(m, k)
    packed, scales, zeros, dense = int4_weights(n, k, group)

    def fallback():
        result = H()
        with tensor_handles(x, packed, scales, zeros) as handles:
            checked(call("aoti_torch_mps__linear_fp_act_4bit_weight", handles[0], handles[1], group, handles[2],
                         handles[3], ctypes.byref(result)))
        steal(result)
    return fallback, lambda: F.linear(x, dense)


def gather_qmv_case(tokens: int, experts: int = 128, top_k: int = 8, n: int = 768, k: int = 2048, group: int = 32):
    packed, scales, zeros, dense = int4_weights(n, k, group, experts)
    x = random(tokens * top_k, k)
    indices = torch.randint(0, experts, (tokens * top_k,), generator=torch.Generator().manual_seed(7),
                            dtype=torch.int32)

    def fallback():
        result = H()
        with tensor_handles(x, packed, scales, zeros, indices) as handles:
            checked(call("aoti_torch_mps_gather_qmv", *handles, group, ctypes.byref(result)))
        steal(result)

    def eager():
        out = torch.empty(x.shape[0], n)
        for expert in indices.unique().tolist():
            rows = (indices == expert).nonzero().squeeze(1)
            out[rows] = F.linear(x[rows], dense[expert])
        return out
    return fallback, eager


def conv_case(channels_in: int, channels_out: int, length: int, stride: int):
    """Without a bias: op_convolution.mm adds one along the result's last dimension (a divergence the runtime
    refuses where the shapes do not broadcast)."""
    x, weight = random(1, channels_in, 1, length), random(channels_out, channels_in, 1, 3)

    def fallback():
        result = H()
        with tensor_handles(x, weight) as handles:
            checked(call("aoti_torch_mps_convolution", handles[0], handles[1], optional(None), int_array([1, stride]),
                         2, int_array([0, 1]), 2, int_array([1, 1]), 2, 0, int_array([0, 0]), 2, 1,
                         ctypes.byref(result)))
        steal(result)
    return fallback, lambda: F.conv2d(x, weight, None, (1, stride), (0, 1))


CASES: dict[str, Callable[[], tuple[Callable, Callable]]] = {
    "mm q_proj 512x2048 @ 2048x2048": lambda: mm_case(PROMPT, HIDDEN, HIDDEN),
    "mm k_proj 512x2048 @ 2048x512": lambda: mm_case(PROMPT, HIDDEN, KV_HEADS * HEAD_DIM),
    "mm gate_proj 512x2048 @ 2048x8192": lambda: mm_case(PROMPT, HIDDEN, FFN),
    "mm down_proj 512x8192 @ 8192x2048": lambda: mm_case(PROMPT, FFN, HIDDEN),
    "mm gate_proj bf16": lambda: mm_case(PROMPT, HIDDEN, FFN, torch.bfloat16),
    "mm decode 1x2048 @ 2048x8192": lambda: mm_case(1, HIDDEN, FFN),
    "addmm 512x2048 @ 2048x2048 + bias": lambda: addmm_case(PROMPT, HIDDEN, HIDDEN),
    "bmm scores 32 x 512x64 @ 64x512": lambda: bmm_case(HEADS, PROMPT, HEAD_DIM, PROMPT),
    "bmm values 32 x 512x512 @ 512x64": lambda: bmm_case(HEADS, PROMPT, PROMPT, HEAD_DIM),
    "sdpa causal 32/8 heads x 512": lambda: sdpa_case(PROMPT),
    "linear_4bit 512x2048 @ 8192x2048": lambda: linear_4bit_case(PROMPT, HIDDEN, FFN),
    "linear_4bit decode 1x2048 @ 8192x2048": lambda: linear_4bit_case(1, HIDDEN, FFN),
    "gather_qmv 64 tokens x 8 of 128 experts": lambda: gather_qmv_case(64),
    "conv 80->384 x 3000, k3": lambda: conv_case(80, 384, 3000, 1),
    "conv 384->384 x 3000, k3 s2": lambda: conv_case(384, 384, 3000, 2),
}


def timed(function: Callable, repeat: int) -> float:
    function()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="rows whose name contains one of these")
    args = parser.parse_args()
    library()
    cores = os.cpu_count() or 1
    print(f"{'fallback':44} {'1 thread: eager':>15} {'fallback':>9} {'ratio':>6}   "
          f"{cores} threads: {'eager':>7} {'fallback':>9} {'ratio':>6}")
    for name, make in CASES.items():
        if args.only and not any(word in name for word in args.only):
            continue
        fallback, eager = make()
        row = []
        for threads in (1, cores):
            torch.set_num_threads(threads)
            os.environ["SHIMKIT_CPU_THREADS"] = str(threads)
            eager_s, fallback_s = timed(eager, args.repeat), timed(fallback, args.repeat)
            row.append((eager_s, fallback_s))
        (e1, f1), (en, fn) = row
        print(f"{name:44} {e1 * 1e3:13.1f}ms {f1 * 1e3:7.1f}ms {f1 / e1:6.2f}   "
              f"{'':>10}{en * 1e3:7.1f}ms {fn * 1e3:7.1f}ms {fn / en:6.2f}", flush=True)


if __name__ == "__main__":
    main()
