"""shimkit's own tests load a hypothesis profile from its pytest plugin (shimkit.testing.pytest_plugin):
``ci`` when CI is set, else ``dev``; SHIMKIT_HYPOTHESIS_PROFILE or --shimkit-profile override."""

from shimkit.testing.pytest_plugin import activate_profile

activate_profile()
