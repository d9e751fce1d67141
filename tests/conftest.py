import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=60, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", deadline=None, max_examples=30)
settings.register_profile("deep", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("SHIMKIT_HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
