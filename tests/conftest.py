"""Test settings: hypothesis runs derandomized, so CI and every developer see the same examples."""

from hypothesis import settings

settings.register_profile("tokenmill", derandomize=True, deadline=None)
settings.load_profile("tokenmill")
