"""Checkpoint loading: strict name/shape/dtype checks with one-line errors, and accepted variants."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.runtime.models import checkpoints  # noqa: E402
from tests.runtime.models.engine import TinyEngine  # noqa: E402
from tokenmill.errors import TokenmillError  # noqa: E402
from tokenmill.runtime.models import load_model  # noqa: E402


def edited_copy(src: Path, dst: Path, edit: Any) -> Path:
    """Copy a single-file checkpoint, rewriting its tensors through ``edit(dict)``."""
    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    tensors = safetensors_torch.load_file(str(src / "model.safetensors"))
    edit(tensors)
    safetensors_torch.save_file(tensors, str(dst / "model.safetensors"))
    return dst


def load_error(path: Path) -> str:
    with pytest.raises(TokenmillError) as info:
        load_model(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def logits(model: Any, ids: list[int]) -> Any:
    return TinyEngine(model, dtype=next(model.parameters()).dtype).generate(ids, 1)[1][0]


def test_unknown_tensor(kimi_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    name = "model.layers.2.self_attn.bogus_proj.weight"
    path = edited_copy(kimi_ckpt[0], tmp_path / "c", lambda t: t.update({name: torch.zeros(2, 2)}))
    assert name in load_error(path)


def test_wrong_shape(kimi_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    name = "model.layers.1.self_attn.kv_b_proj.weight"
    path = edited_copy(kimi_ckpt[0], tmp_path / "c", lambda t: t.update({name: t[name][:, :-1].contiguous()}))
    message = load_error(path)
    assert name in message and "shape" in message


def test_missing_tensor(kimi_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    name = "model.layers.2.self_attn.dt_bias"
    path = edited_copy(kimi_ckpt[0], tmp_path / "c", lambda t: t.pop(name))
    message = load_error(path)
    assert name in message and "missing" in message


def test_wrong_dtype_class(kimi_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    name = "model.norm.weight"
    path = edited_copy(kimi_ckpt[0], tmp_path / "c", lambda t: t.update({name: t[name].to(torch.int32)}))
    message = load_error(path)
    assert name in message and "I32" in message


def test_missing_files_and_config(kimi_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    assert "config.json" in load_error(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert "model_type" in load_error(tmp_path)
    shutil.copy(kimi_ckpt[0] / "config.json", tmp_path / "config.json")
    assert "model.safetensors" in load_error(tmp_path)


def test_index_naming_a_missing_shard(deepseek_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    path = tmp_path / "c"
    shutil.copytree(deepseek_ckpt[0], path)
    shard = sorted(path.glob("model-*.safetensors"))[-1]
    shard.unlink()
    assert shard.name in load_error(path)


def test_an_index_without_a_weight_map_or_not_utf8_is_one_line(deepseek_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    path = tmp_path / "c"
    shutil.copytree(deepseek_ckpt[0], path)
    index = path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}}))
    assert load_error(path).endswith("not a safetensors index (no weight_map of tensor names to files)")
    index.write_bytes(b"\xff\xfe")
    assert load_error(path).endswith("model.safetensors.index.json: not a UTF-8 JSON file (byte 0)")


def test_mtp_layers_are_skipped(deepseek_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    """DeepSeek's multi-token-prediction layer (index num_hidden_layers) is ignored, as transformers does."""
    path = tmp_path / "c"
    shutil.copytree(deepseek_ckpt[0], path)
    safetensors_torch.save_file({"model.layers.3.eh_proj.weight": torch.zeros(4, 8)}, str(path / "mtp.safetensors"))
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.3.eh_proj.weight"] = "mtp.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    load_model(path)


def test_moonshot_dense_prefix_is_accepted(kimi_ckpt: tuple[Path, Any], tmp_path: Path) -> None:
    """transformers saves Kimi's dense layer as block_sparse_moe.*; Moonshot's files say mlp.*."""

    def rename(t: dict[str, Any]) -> None:
        for name in [n for n in t if n.startswith("model.layers.0.block_sparse_moe.")]:
            t[name.replace("block_sparse_moe", "mlp")] = t.pop(name)

    path = edited_copy(kimi_ckpt[0], tmp_path / "c", rename)
    ids = list(range(1, 40))
    torch.testing.assert_close(logits(load_model(path), ids), logits(load_model(kimi_ckpt[0]), ids))


def test_bf16_checkpoint_runs_in_bf16_and_fp32(tmp_path: Path) -> None:
    ref = checkpoints.kimi_linear(tmp_path, dtype=torch.bfloat16)
    ids = list(range(3, 90))
    with torch.no_grad():
        expected = ref(torch.tensor([ids])).logits[0, -1]  # the fp32 model of the same (rounded) weights
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 0.05)):
        model = load_model(tmp_path, dtype=dtype)
        assert next(model.parameters()).dtype == dtype
        got = logits(model, ids)
        assert float((got - expected).abs().max() / expected.abs().max()) < tol
