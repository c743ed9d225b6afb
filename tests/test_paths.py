"""`paths.hf_cached_config`: a model's config.json found in the Hugging Face hub cache, and
`--model org/name` answered from it (no network)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.cli_helpers import cli
from tokenmill.paths import hf_cached_config, hf_hub_cache
from tokenmill.spec import load_model

GLM = Path(__file__).parent / "spec" / "fixtures" / "glm_4_5_config.json"
MIXTRAL = Path(__file__).parent / "spec" / "fixtures" / "mixtral_8x7b_config.json"


def snapshot(hub: Path, repo: str, commit: str, config: Path, mtime: float) -> Path:
    """A hub-cache snapshot as huggingface_hub lays it out: models--org--name/snapshots/<commit>/."""
    folder = hub / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
    folder.mkdir(parents=True)
    path = folder / "config.json"
    shutil.copy(config, path)
    os.utime(path, (mtime, mtime))
    return path


def test_the_cache_dir_follows_huggingface_hubs_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_hub_cache() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hf_hub_cache() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hf_hub_cache() == tmp_path / "hub"


def test_refs_main_names_the_snapshot_else_the_newest(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    old = snapshot(tmp_path, "zai-org/GLM-4.5", "aaa", GLM, 1_000)
    new = snapshot(tmp_path, "zai-org/GLM-4.5", "bbb", GLM, 2_000)
    assert hf_cached_config("zai-org/GLM-4.5") == new
    refs = tmp_path / "models--zai-org--GLM-4.5" / "refs"
    refs.mkdir()
    (refs / "main").write_text("aaa")
    assert hf_cached_config("zai-org/GLM-4.5") == old
    (refs / "main").write_text("gone")  # a ref to a snapshot no longer there: the newest
    assert hf_cached_config("zai-org/GLM-4.5") == new


@pytest.mark.parametrize("ref", ["GLM-4.5", "a/b/c", "/abs/x", "../x", "zai-org/", "zai-org/GLM-4.6"])
def test_anything_not_a_cached_org_name_is_not_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ref: str) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot(tmp_path, "zai-org/GLM-4.5", "aaa", GLM, 1_000)
    assert hf_cached_config(ref) is None


def test_model_by_hugging_face_id_from_the_cache(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The model takes the repository's name (not the snapshot's commit hash); a launch command's
    --model-path finds it the same way; an id the cache lacks is refused naming the cache."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot(tmp_path, "mistralai/Mixtral-8x7B-v0.1", "0123abcd", MIXTRAL, 1_000)
    m = load_model("mistralai/Mixtral-8x7B-v0.1")
    assert (m.name, m.model_type, m.num_layers) == ("Mixtral-8x7B-v0.1", "mixtral", 32)
    code, out, _ = cli(capsys, "plan", "--launch", "vllm serve mistralai/Mixtral-8x7B-v0.1 -tp 2", "--gpu", "h100")
    assert code == 0 and out.startswith("Mixtral-8x7B-v0.1 on 2×")
    code, _, err = cli(capsys, "plan", "--model", "mistralai/Mixtral-8x22B-v0.1")
    assert code == 2 and err.count("\n") == 1
    assert f"nor a model in the Hugging Face cache ({tmp_path})" in err
