"""A measurement row for tests: one aggregated Llama-3.1-8B point on H100 under vLLM, overridable."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

#: The preset configs, named as in ``../shared/models/`` (``<org>--<name>_config.json``)
MODELS = Path(str(resources.files("tokenmill.spec") / "presets"))


def row(**kw: str) -> dict[str, str]:
    base = {
        "id": "r1",
        "silicon_data_source": "x; silicon_concurrency=8",
        "backend": "vllm",
        "model_path": "meta-llama/Llama-3.1-8B-Instruct",
        "system": "h100_sxm",
        "precision": "",
        "mode": "agg",
        "isl": "1024",
        "osl": "128",
        "gemm_quant_mode": "",
        "moe_quant_mode": "",
        "batch_size": "8",
        "tp_size": "1",
        "pp_size": "1",
        "attention_dp_size": "",
        "moe_tp_size": "1",
        "moe_ep_size": "1",
        "silicon_ttft_ms": "60",
        "silicon_tpot_ms": "7",
    }
    base.update(kw)
    conc = re.search(r"silicon_concurrency=(\d+)", base["silicon_data_source"])
    if conc and "batch_size" not in kw:  # the file's aggregated rows: batch_size = the benchmark's lanes
        base["batch_size"] = conc.group(1)
    return base


def fastest_kernel(p: object) -> float:
    """The fraction of its FP8 peak the fastest kernel of an FP8-GEMM step runs at under constants
    ``p``, worked out here (not by the fit's own ``peak_fraction``), for the ceiling tests."""
    eff = [getattr(p, k) for k in ("matmul_efficiency", "moe_matmul_efficiency", "fp8_matmul_ratio")]
    gemm = max(eff[0], eff[1]) * max(1.0, eff[2])
    return float(max(gemm, p.attention_efficiency) * p.compute_scale)
