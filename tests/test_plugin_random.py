"""The built-in random plugin: aoti_torch_mps_randint_low_out as an MSL kernel and uniform as rand_like,
checked by distribution against ATen (values cannot match), and end to end: Inductor's own Metal Philox code
for randn / rand / bernoulli, run on the CPU, drawing from seeds this kernel made."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import Phase, settings

import shimkit.plugins.random as random_plugin
from shimkit._patching import ScopedPatches
from shimkit.audit.coverage import audit_op
from shimkit.metal.inductor import inductor_metal_on_cpu
from shimkit.registry import Kernel, MslKernel, OpPlugin, RandomReference, Shim
from shimkit.testing import PropertyFailure, assert_plugin_matches_reference, assert_same_distribution
from shimkit.testing.kernels import msl_kernel

INT64_MIN, INT64_MAX = random_plugin.INT64_MIN, random_plugin.INT64_MAX


@pytest.fixture(scope="module")
def randint():
    return msl_kernel(random_plugin.KERNEL, "long")


@pytest.mark.parametrize("low, high", [(0, 1), (-3, 4), (5, 2**32 + 5), (INT64_MIN, INT64_MAX),
                                       (INT64_MAX - 2, INT64_MAX)])
def test_values_cover_exactly_low_to_high(randint, low, high):
    out = torch.empty(4096, dtype=torch.int64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        values = randint(low, high, [4096], out=out)
    assert values is out
    assert int(values.min()) >= low and int(values.max()) < high
    if high - low <= 7:
        assert sorted(values.unique().tolist()) == list(range(low, high))
    else:  # a wide range: spread over both halves, no repeats to speak of
        middle = low + (high - low) // 2
        assert bool((values < middle).any()) and bool((values >= middle).any())
        assert values.unique().numel() > 4000


def test_calls_draw_fresh_seeds_and_a_seeded_generator_repeats(randint):
    def draw():
        return randint(INT64_MIN, INT64_MAX, [16], out=torch.empty(16, dtype=torch.int64))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        first, second = draw(), draw()
        torch.manual_seed(7)
        again = draw()
    assert not torch.equal(first, second)
    assert torch.equal(first, again)


@pytest.mark.parametrize("call, error, message", [
    (lambda k: k(3, 3, [2], out=torch.empty(2, dtype=torch.int64)), ValueError, r"from=3 >= to=3"),
    (lambda k: k(0, 5, [2], out=torch.empty(2)), TypeError, r"out must be int64"),
    (lambda k: k(0, 5, [3], out=torch.empty(2, dtype=torch.int64)), ValueError, r"shape size=\[3\]"),
    (lambda k: k(0, 5, [2, 2], out=torch.empty(2, 2, dtype=torch.int64).t()), ValueError, r"must be contiguous"),
])
def test_bad_arguments_name_the_op_and_argument(randint, call, error, message):
    with pytest.raises(error, match=message) as raised:
        call(randint)
    assert "aten::randint.low_out" in str(raised.value)


def test_uniform_with_a_generator_is_declined_not_wrong():
    with pytest.raises(Exception, match="explicit generator"):
        random_plugin.uniform_decomposition(torch.zeros(3), generator=torch.Generator())


def test_a_biased_kernel_is_caught(tmp_path, register_plugin):
    """The distribution check can fail: the same kernel drawing from only half of the range is caught."""
    source = (Path(random_plugin.KERNEL.directory) / "randint.metal").read_text()
    assert source.count("bits % range") == 1
    (tmp_path / "randint.metal").write_text(source.replace("bits % range", "bits % (range / 2 + 1)")
                                            .replace("(bits >> 32) % range", "(bits >> 32) % (range / 2 + 1)"))
    (tmp_path / "adapter.mm").write_text("// the Mac adapter is not under test here\n")
    kernel = Kernel(name="half_randint", directory=str(tmp_path), runtime_sources=("randint.metal", "adapter.mm"),
                    msl=MslKernel(source="randint.metal", function="randint_low_out", dtypes=("long",),
                                  launch=random_plugin.launch_randint_low_out), uses_sdk=False)
    register_plugin(OpPlugin(
        name="half-randint", ops=(random_plugin.RANDINT_LOW_OUT,),
        shims=(Shim(op=random_plugin.RANDINT_LOW_OUT, device="mps", symbol="aoti_torch_mps_randint_low_out",
                    recorded_names=("aoti_torch_mps_randint_low_out",), kernel=kernel),),
        references={random_plugin.RANDINT_LOW_OUT: RandomReference(torch.ops.aten.randint.low_out)},
        input_strategies={random_plugin.RANDINT_LOW_OUT: random_plugin.randint_calls}))
    # That a failure is found is the point, not its minimal form: no shrinking (most of the time it took).
    with pytest.raises(PropertyFailure, match="Kolmogorov-Smirnov"):
        assert_plugin_matches_reference("half-randint", settings=settings(max_examples=20, derandomize=True,
                                                                          deadline=None, database=None,
                                                                          phases=[Phase.explicit, Phase.generate]))


def test_the_distribution_check_rejects_a_shifted_sampler_and_a_wrong_shape():
    with pytest.raises(PropertyFailure, match="Kolmogorov-Smirnov"):
        assert_same_distribution(lambda x: torch.randn_like(x) + 0.2, RandomReference(torch.randn_like),
                                 (torch.zeros(64),))
    with pytest.raises(PropertyFailure, match="results"):
        assert_same_distribution(lambda x: torch.randn(3), RandomReference(torch.randn_like), (torch.zeros(4),))
    assert_same_distribution(lambda x: torch.randn_like(x) * 1.0, RandomReference(torch.randn_like), (torch.zeros(64),))


def test_inductor_metal_random_code_draws_like_eager_from_the_kernel_seeds(randint):
    """randn, rand and bernoulli compiled by Inductor's Metal code generator (c10::metal::randn / rand,
    Philox), run on the CPU with every seed from the plugin's MSL kernel: the numbers a Mac would draw."""
    def sample(x):
        return torch.randn_like(x), torch.rand_like(x) * 4 - 1, torch.bernoulli(x)

    seed_calls = []

    def seeds(*args, **kwargs):
        seed_calls.append(args[:2])
        return randint(*args, **kwargs)

    x = torch.full((32, 32), 0.3)
    with inductor_metal_on_cpu() as sources:
        compiled = torch.compile(sample, fullgraph=True)
        compiled(x)
        patches = ScopedPatches()
        patches.replace(torch.ops.aten.randint, "low_out", seeds)
        try:
            assert_same_distribution(compiled, RandomReference(sample), (x,))
        finally:
            patches.undo()
    assert any("c10::metal::randn" in source for source in sources)
    assert seed_calls and set(seed_calls) == {(INT64_MIN, INT64_MAX)}


@pytest.mark.parametrize("name", ["randn", "bernoulli", "nn.functional.rrelu"])
def test_the_sweep_finds_them_missing_stock_and_clean_with_shimkit(name):
    result = audit_op(name, "float32")
    assert (result.stock, result.shimkit) == ("missing", "clean"), result
