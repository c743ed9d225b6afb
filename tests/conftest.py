"""Test settings: hypothesis runs derandomized, so CI and every developer see the same examples."""

import pytest
from hypothesis import settings

settings.register_profile("tokenmill", derandomize=True, deadline=None)
settings.load_profile("tokenmill")


@pytest.fixture(autouse=True)
def _no_hugging_face_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`--model org/name` reads the Hugging Face hub cache: every test sees an empty one, so a
    developer's downloaded models cannot change what a test gets."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.getbasetemp() / "no-hf-cache"))
