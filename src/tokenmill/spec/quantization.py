"""Which storage format each tensor of a checkpoint uses, read from ``quantization_config``.

Supported: compressed-tensors (``mxfp4-pack-quantized``, ``nvfp4-pack-quantized``,
``float-quantized`` FP8) with its ``ignore`` list (``re:`` regexes or exact names), the ``fp8``
method (DeepSeek/Kimi-K2/MiniMax/Qwen FP8, with ``weight_block_size`` and
``modules_to_not_convert``), ``mxfp4`` (gpt-oss), and ModelOpt ``FP8``/``NVFP4``. Only linear
weights are ever quantized; embeddings, norms, routers and lm_head stay 16-bit in every checkpoint
we know of, so they are never treated as quantized.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.spec.formats import Storage, WeightFormat

_CT_FORMATS = {
    "mxfp4-pack-quantized": WeightFormat.MXFP4,
    "nvfp4-pack-quantized": WeightFormat.NVFP4,
    "float-quantized": WeightFormat.FP8,
}


@dataclass(frozen=True)
class QuantRules:
    """How a checkpoint stores its linear weights."""

    fmt: WeightFormat | None = None
    fp8_block: tuple[int, int] | None = None
    ignore: tuple[str, ...] = ()
    style: str = "substring"  # "ct": compressed-tensors names/regexes; "substring": HF not-convert lists
    base: WeightFormat = WeightFormat.BF16

    def is_excluded(self, name: str) -> bool:
        for pattern in self.ignore:
            if self.style == "ct":
                if pattern.startswith("re:"):
                    if re.match(pattern[3:], name):
                        return True
                elif name == pattern or name.endswith("." + pattern):
                    return True
            elif pattern in name or fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(name, pattern + ".*"):
                return True
        return False

    def storage_for(self, name: str, linear: bool) -> Storage:
        """The storage of the weight called ``name`` (a concrete module path)."""
        if self.fmt is None or not linear or "lm_head" in name or self.is_excluded(name):
            return Storage(self.base)
        return Storage(self.fmt, self.fp8_block)


def _block(value: Any, source: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return (value[0], value[1])
    raise TokenmillError(
        f"{source}: quantization_config.weight_block_size must be two positive integers (got {value!r})"
    )


def _module_names(qc: dict[str, Any], key: str, source: str) -> tuple[str, ...]:
    """A list of module names (or patterns) the quantization leaves alone; absent or null is none."""
    value = qc.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise TokenmillError(f"{source}: quantization_config.{key} must be a list of module names (got {value!r:.60})")
    return tuple(value)


def quant_rules(config: dict[str, Any], source: str, base: WeightFormat = WeightFormat.BF16) -> QuantRules:
    """Read ``quantization_config`` (absent: everything is stored as ``base``)."""
    qc = config.get("quantization_config")
    if qc is None:
        return QuantRules(base=base)
    if not isinstance(qc, dict):
        raise TokenmillError(f"{source}: quantization_config must be an object")
    method = str(qc.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        fmt_name = str(qc.get("format", ""))
        groups = qc.get("config_groups") or {}
        fp8_block: tuple[int, int] | None = None
        for group in groups.values() if isinstance(groups, dict) else []:
            fmt_name = str(group.get("format", fmt_name)) if isinstance(group, dict) else fmt_name
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict) and weights.get("strategy") == "block":
                fp8_block = _block(weights.get("block_structure"), source)
        if fmt_name not in _CT_FORMATS:
            allowed = ", ".join(sorted(_CT_FORMATS))
            raise TokenmillError(
                f"{source}: quantization_config.format {fmt_name!r} is not supported (supported: {allowed})"
            )
        ignore = _module_names(qc, "ignore", source)
        return QuantRules(_CT_FORMATS[fmt_name], fp8_block, ignore, "ct", base)
    if method == "fp8":
        not_convert = _module_names(qc, "modules_to_not_convert", source)
        return QuantRules(WeightFormat.FP8, _block(qc.get("weight_block_size"), source), not_convert, "substring", base)
    if method == "mxfp4":
        not_convert = _module_names(qc, "modules_to_not_convert", source)
        return QuantRules(WeightFormat.MXFP4, None, not_convert, "substring", base)
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        fmts = {"FP8": WeightFormat.FP8, "NVFP4": WeightFormat.NVFP4}
        if algo not in fmts:
            raise TokenmillError(
                f"{source}: quantization_config.quant_algo {algo!r} is not supported (supported: FP8, NVFP4)"
            )
        exclude = tuple(str(p) for p in (qc.get("exclude_modules") or qc.get("ignore") or []))
        return QuantRules(fmts[algo], None, exclude, "substring", base)
    raise TokenmillError(
        f"{source}: quantization_config.quant_method {method!r} is not supported "
        "(supported: compressed-tensors, fp8, mxfp4, modelopt)"
    )
