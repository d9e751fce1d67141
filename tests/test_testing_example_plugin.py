"""The example third-party plugin checked with the public toolkit only."""

import shimkit_example_plugin.plugin as example_plugin
from shimkit.testing import assert_plugin_matches_reference


def test_logaddexp_decomposition_matches_torch(register_plugin):
    register_plugin(example_plugin)
    assert_plugin_matches_reference("example-logaddexp")
