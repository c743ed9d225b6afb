"""A checkpoint's linear weights served in another format: what ``--weight-format`` asks for and
what the calibration file's ``gemm_quant_mode``/``moe_quant_mode`` columns record.

Why a module of its own: the same deployment is often served from one checkpoint in several
formats (Llama-3.1-70B in BF16, FP8 or NVFP4), and a prediction or a memory plan must size the
weights the engine actually holds. ``perf.measurements`` reads every calibration row through
:func:`requantize`, and ``load_model(..., weight_format=...)`` gives ``plan`` and ``predict`` the same
rule, so a row of the file and the command that predicts it size the weights alike.

The rule, as the calibration rows are read:

- ``bf16``/``fp16``: every weight 16-bit, whatever the checkpoint stores.
- ``fp8`` (per-row scales), ``fp8_block`` (128 × 128 blocks), ``nvfp4``: every linear weight but
  lm_head in that format (embeddings, norms and routers stay 16-bit, as in every checkpoint).
- A checkpoint already stored at the width asked for (DeepSeek's block FP8 for ``fp8``, gpt-oss's
  MXFP4 for ``nvfp4``) is kept as stored: it is what an engine serves for that width.
- ``moe_quant_mode`` alone: ``nvfp4`` re-formats the routed experts only, ``fp8`` the whole model.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.spec.formats import WeightFormat

#: Formats the linear weights can be asked for in ("" = the checkpoint's own)
WEIGHT_FORMATS = ("bf16", "fp16", "fp8", "fp8_block", "nvfp4")


@dataclass(frozen=True)
class Requantized:
    """A config with its ``quantization_config`` rewritten, and what that means for serving it."""

    config: dict[str, Any]
    expert_format: WeightFormat | None = None  # routed experts' own format, where it differs
    note: str | None = None  # what changed, for the spec's notes
    online_fp8: bool = False  # 16-bit checkpoint served as FP8: engines quantize it at load


def parse_weight_format(value: str, what: str = "--weight-format") -> str:
    """A user-given format name, or a one-line error naming ``what`` and the allowed names."""
    key = value.strip().lower()
    if key not in WEIGHT_FORMATS:
        raise TokenmillError(f"{what} must be one of {'|'.join(WEIGHT_FORMATS)} (got {value!r})")
    return key


def _text(config: dict[str, Any]) -> dict[str, Any]:
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else {}


def checkpoint_width(config: dict[str, Any]) -> int | None:
    """Bits of the checkpoint's quantized weights (8, 4) or None when it is 16-bit."""
    qc = config.get("quantization_config") or _text(config).get("quantization_config")
    if not isinstance(qc, dict):
        return None
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        return 8
    if method == "mxfp4":
        return 4
    fmt = str(qc.get("format", "")) + str(qc.get("quant_algo", ""))
    return 4 if "fp4" in fmt.lower() else 8


def _fp8_rules(block: bool) -> dict[str, Any]:
    return {"quant_method": "fp8", "weight_block_size": [128, 128] if block else None}


def _drop_quantization(config: dict[str, Any]) -> None:
    config.pop("quantization_config", None)
    _text(config).pop("quantization_config", None)


def requantize(config: dict[str, Any], gemm_mode: str, moe_mode: str = "") -> Requantized:
    """``config`` (not modified) with its linear weights in ``gemm_mode``/``moe_mode`` (module doc)."""
    modes = {gemm_mode, moe_mode} - {""}
    if not modes:
        return Requantized(config)
    asked = "/".join(sorted(modes))
    stored = checkpoint_width(config)
    if modes <= {"bf16", "fp16"}:  # 16-bit weights, whatever the checkpoint stores
        out = copy.deepcopy(config)
        _drop_quantization(out)
        note = None if stored is None else f"weights sized as {asked} (the checkpoint stores {stored}-bit weights)"
        return Requantized(out, note=note)
    width = 4 if any("fp4" in m for m in modes) else 8
    if stored == width:
        return Requantized(config, note=f"{asked}: the checkpoint's own {width}-bit weights, kept as stored")
    out = copy.deepcopy(config)
    _drop_quantization(out)
    expert_fmt: WeightFormat | None = None
    if gemm_mode == "nvfp4":
        out["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    elif gemm_mode.startswith("fp8"):
        out["quantization_config"] = _fp8_rules("block" in gemm_mode or "block" in moe_mode)
    if moe_mode == "nvfp4" and gemm_mode != "nvfp4":
        expert_fmt = WeightFormat.NVFP4
    elif moe_mode.startswith("fp8") and not gemm_mode:
        out["quantization_config"] = _fp8_rules("block" in moe_mode)
    source = "16-bit" if stored is None else f"{stored}-bit"
    online = stored is None and modes == {"fp8"}
    how = "the engines quantize it at load" if online else f"serve a checkpoint stored as {asked}"
    return Requantized(out, expert_fmt, f"weights sized as {asked} from the {source} checkpoint ({how})", online)
