"""The gallery of broken passes: the ci profile catches every one; the correct passes pass the same check."""

import math
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import Phase, given, settings

from shimkit.registry import OpPlugin
from shimkit.testing import PropertyFailure, assert_plugin_matches_reference
from shimkit.testing.gallery import GALLERY, naive_logaddexp
from shimkit.testing.pytest_plugin import PROFILES

# Finding is what is tested here; shrinking a found bug is tested once in test_testing_properties.
CI_FIND = settings(settings.get_profile("ci"), database=None, phases=[Phase.explicit, Phase.generate])


@pytest.mark.parametrize("bug", GALLERY, ids=[b.name for b in GALLERY])
def test_ci_profile_catches_the_broken_pass(bug):
    @CI_FIND
    @given(bug.programs)
    def search(program):
        bug.check(bug.broken(), program)

    with pytest.raises(PropertyFailure):
        search()


@pytest.mark.parametrize("bug", [b for b in GALLERY if b.correct], ids=[b.name for b in GALLERY if b.correct])
def test_the_correct_pass_satisfies_the_same_property(bug):
    @given(bug.programs)
    def check(program):
        bug.check(bug.correct(), program)

    check()


def _logaddexp_plugin(decomposition):
    from shimkit_example_plugin.plugin import logaddexp_inputs

    op = "aten::logaddexp.default"
    return OpPlugin(name="logaddexp-under-test", ops=(op,), decompositions={op: decomposition},
                    references={op: torch.logaddexp}, input_strategies={op: logaddexp_inputs})


def test_ci_profile_catches_an_overflowing_plugin_decomposition():
    with pytest.raises(PropertyFailure, match="decomposition of aten::logaddexp.default"):
        assert_plugin_matches_reference(_logaddexp_plugin(naive_logaddexp), settings=CI_FIND)


def test_naive_logaddexp_is_wrong_only_where_it_overflows():
    small = torch.tensor([0.5, -3.0])
    torch.testing.assert_close(naive_logaddexp(small, small.flip(0)), torch.logaddexp(small, small.flip(0)))
    assert math.isinf(naive_logaddexp(torch.tensor(1e4), torch.tensor(0.0)).item())


def test_the_ci_profile_is_shimkits_though_hypothesis_registers_one_of_its_own():
    # Hypothesis ships a `ci` profile (100 examples, loaded when CI is set): shimkit's replaces it, while a
    # `ci` profile a project registered itself is left alone. In fresh interpreters: profiles are global.
    load = "from shimkit.testing.pytest_plugin import activate_profile; activate_profile('ci'); "
    show = "print(settings.default.max_examples)"
    shimkits = subprocess.run([sys.executable, "-c", f"from hypothesis import settings; {load}{show}"],
                              capture_output=True, text=True, check=True, env={**os.environ, "CI": "true"})
    assert shimkits.stdout.split() == [str(PROFILES["ci"]["max_examples"])]
    own = "settings.register_profile('ci', max_examples=7); "
    projects = subprocess.run([sys.executable, "-c", f"from hypothesis import settings; {own}{load}{show}"],
                              capture_output=True, text=True, check=True, env={**os.environ, "CI": "true"})
    assert projects.stdout.split() == ["7"]
