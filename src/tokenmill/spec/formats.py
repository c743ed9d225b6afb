"""Weight storage formats and their exact byte counts.

A checkpoint's size is decided by how each tensor is stored, so bytes are computed per tensor from
its shape (rows = output features, cols = input features, as in ``torch.nn.Linear.weight``):

- BF16/FP16: 2 B per parameter; FP32: 4 B.
- FP8 (e4m3): 1 B per parameter plus an fp32 scale per ``block`` (DeepSeek-style 128×128 blocks), or
  per output row when no block size is given.
- MXFP4 (OCP MX): blocks of 32 E2M1 values share one E8M0 scale: 17 B per 32 parameters.
- NVFP4: blocks of 16 E2M1 values share one E4M3 scale: 9 B per 16 parameters (the per-tensor fp32
  global scale is 4 B and is ignored here).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tokenmill.errors import TokenmillError


class WeightFormat(StrEnum):
    """How a tensor's parameters are stored on disk and in GPU memory."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    FP8 = "fp8"
    MXFP4 = "mxfp4"
    NVFP4 = "nvfp4"

    @classmethod
    def parse(cls, value: str, what: str = "--expert-format") -> WeightFormat:
        """Parse a user-given format name, with a one-line error listing the allowed names."""
        aliases = {
            "bfloat16": "bf16",
            "float16": "fp16",
            "half": "fp16",
            "float32": "fp32",
            "fp8_e4m3": "fp8",
            "e4m3": "fp8",
            "float8_e4m3fn": "fp8",
        }
        key = aliases.get(value.lower(), value.lower())
        try:
            return cls(key)
        except ValueError:
            allowed = "|".join(f.value for f in cls)
            raise TokenmillError(f"{what} must be one of {allowed} (got {value!r})") from None


@dataclass(frozen=True, slots=True)
class Storage:
    """A format plus the block geometry of its scales (FP8 only)."""

    fmt: WeightFormat
    fp8_block: tuple[int, int] | None = (128, 128)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tensor_bytes(shape: tuple[int, ...], storage: Storage) -> int:
    """Exact bytes of one tensor of ``shape`` stored as ``storage`` (scales included)."""
    if not shape:
        raise ValueError("tensor shape must not be empty")
    cols = shape[-1]
    rows = 1
    for dim in shape[:-1]:
        rows *= dim
    params = rows * cols
    fmt = storage.fmt
    if fmt in (WeightFormat.BF16, WeightFormat.FP16):
        return 2 * params
    if fmt is WeightFormat.FP32:
        return 4 * params
    if fmt is WeightFormat.MXFP4:
        return rows * _ceil_div(cols, 32) * 17
    if fmt is WeightFormat.NVFP4:
        return rows * _ceil_div(cols, 16) * 9
    # FP8: data plus fp32 scales.
    if storage.fp8_block is None:
        return params + 4 * rows
    block_rows, block_cols = storage.fp8_block
    return params + 4 * _ceil_div(rows, block_rows) * _ceil_div(cols, block_cols)


BF16 = Storage(WeightFormat.BF16)
FP32 = Storage(WeightFormat.FP32)
