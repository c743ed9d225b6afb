"""The exact launch command for a plan: SGLang's (every flag the plan depends on) and vLLM's where
the flags exist (vLLM has no pool-ratio or radix-strategy flag; those lines are left out).

A worker wider than one node gets the multi-node flags with the node rank and the head address as
shell variables, as in the seed's 32×H200 command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenmill.plan.cache_sizes import UNIFORM_SWA_POOL
from tokenmill.plan.layout import KVDtype, PrefixCache, StateDtype
from tokenmill.spec.model import MixerKind

if TYPE_CHECKING:
    from tokenmill.plan.memory_plan import MemoryPlan

DSPARK_DRAFT_MODEL = "RadixArk/Kimi-K3-DSpark"


@dataclass(frozen=True)
class LaunchCommands:
    sglang: str
    vllm: str
    nnodes: int


def _fmt_ratio(r: float) -> str:
    return f"{r:.3g}" if r < 10 else f"{r:.4g}"


def _join(parts: list[list[str]]) -> str:
    return " \\\n  ".join(" ".join(p) for p in parts if p)


def _quantization(plan: MemoryPlan) -> list[str]:
    """A 16-bit checkpoint planned as FP8 (``--weight-format fp8``): both engines quantize it at load."""
    fmt = plan.model.quantize_on_load
    return ["--quantization", fmt] if fmt else []


def sglang_command(plan: MemoryPlan, nnodes: int) -> str:
    m, lay = plan.model, plan.layout
    path = m.hf_id or m.name
    parts: list[list[str]] = [["sglang serve", "--model-path", path, "--trust-remote-code", *_quantization(plan)]]
    par = ["--tp-size", str(lay.tp)]
    if lay.ep > 1:
        par += ["--ep-size", str(lay.ep)]
    if lay.pp > 1:
        par += ["--pp-size", str(lay.pp)]
    if lay.dp_attention > 1:
        par += ["--enable-dp-attention", "--dp-size", str(lay.dp_attention)]
    if lay.dcp > 1:
        par += ["--dcp-size", str(lay.dcp)]
    if lay.moe_a2a_backend != "none":
        par += ["--moe-a2a-backend", lay.moe_a2a_backend]
    parts.append(par)
    if nnodes > 1:
        parts.append(["--nnodes", str(nnodes), '--node-rank "$NODE_RANK"', '--dist-init-addr "$MASTER_ADDR:20000"'])
    mem = ["--mem-fraction-static", f"{lay.mem_fraction_static:g}"]
    if lay.kv_cache_dtype is KVDtype.FP8:
        mem += ["--kv-cache-dtype", "fp8_e4m3"]
    if lay.page_size != 64:
        mem += ["--page-size", str(lay.page_size)]
    if lay.swa_full_tokens_ratio is not None and m.layers_with(MixerKind.SWA) and m.model_type not in UNIFORM_SWA_POOL:
        mem += ["--swa-full-tokens-ratio", f"{lay.swa_full_tokens_ratio:g}"]
    parts.append(mem)
    if lay.prefix_cache is PrefixCache.OFF:
        parts.append(["--disable-radix-cache"])
    if m.is_hybrid:
        hyb: list[str] = []
        if plan.pools.pool_ratio is not None:
            hyb += ["--mamba-full-memory-ratio", _fmt_ratio(plan.pools.pool_ratio)]
        if lay.prefix_cache not in (PrefixCache.EXTRA_BUFFER, PrefixCache.OFF):
            hyb += ["--mamba-radix-cache-strategy", lay.prefix_cache.value]
        if lay.state_dtype is StateDtype.BF16:
            hyb += ["--mamba-ssm-dtype", "bfloat16"]
        parts.append(hyb)
    spec = lay.speculative
    if spec.algorithm == "dspark":
        parts.append(
            [
                "--speculative-algorithm DSPARK",
                "--speculative-draft-model-path",
                DSPARK_DRAFT_MODEL,
                "--speculative-dspark-block-size",
                str(spec.tokens),
            ]
        )
    elif spec.algorithm == "mtp":
        parts.append(
            [
                "--speculative-algorithm EAGLE",
                "--speculative-num-steps",
                str(spec.tokens),
                "--speculative-eagle-topk 1",
                "--speculative-num-draft-tokens",
                str(spec.num_draft_tokens),
            ]
        )
    tail: list[str] = []
    if lay.replayssm:
        tail.append("--enable-linear-replayssm-spec")
    if lay.max_running_requests is not None:
        tail += ["--max-running-requests", str(lay.max_running_requests)]
    parts.append(tail)
    parsers: list[str] = []
    if m.reasoning_parser:
        parsers += ["--reasoning-parser", m.reasoning_parser]
    if m.tool_call_parser:
        parsers += ["--tool-call-parser", m.tool_call_parser]
    parts.append(parsers)
    return _join(parts)


def vllm_command(plan: MemoryPlan, nnodes: int) -> str:
    m, lay = plan.model, plan.layout
    parts: list[list[str]] = [["vllm serve", m.hf_id or m.name, "--trust-remote-code", *_quantization(plan)]]
    par = ["--tensor-parallel-size", str(lay.attn_tp)]
    if lay.dp_attention > 1:
        par += ["--data-parallel-size", str(lay.dp_attention)]
    if lay.ep > 1:
        par += ["--enable-expert-parallel"]
    if lay.pp > 1:
        par += ["--pipeline-parallel-size", str(lay.pp)]
    if lay.dcp > 1:
        par += ["--decode-context-parallel-size", str(lay.dcp)]
    parts.append(par)
    if nnodes > 1:
        parts.append(["--nnodes", str(nnodes), '--node-rank "$NODE_RANK"', '--master-addr "$MASTER_ADDR"'])
    mem = ["--gpu-memory-utilization", f"{lay.mem_fraction_static:g}"]
    if lay.kv_cache_dtype is KVDtype.FP8:
        mem += ["--kv-cache-dtype", "fp8"]
    if m.is_hybrid and lay.state_dtype is not None:
        mem += ["--mamba-ssm-cache-dtype", "float32" if lay.state_dtype is StateDtype.FP32 else "bfloat16"]
    # vLLM's V1 engine caches prefixes unless told not to: "off" has to say so
    mem += ["--no-enable-prefix-caching" if lay.prefix_cache is PrefixCache.OFF else "--enable-prefix-caching"]
    parts.append(mem)
    spec = lay.speculative
    if spec.algorithm == "dspark":
        cfg = {"model": DSPARK_DRAFT_MODEL, "num_speculative_tokens": spec.tokens}
        parts.append(["--speculative-config", f"'{json.dumps(cfg)}'"])
    elif spec.algorithm == "mtp":
        cfg2 = {"method": "mtp", "num_speculative_tokens": spec.tokens}
        parts.append(["--speculative-config", f"'{json.dumps(cfg2)}'"])
    if lay.max_running_requests is not None:
        parts.append(["--max-num-seqs", str(lay.max_running_requests)])
    return _join(parts)


def launch_commands(plan: MemoryPlan) -> LaunchCommands:
    per_node = plan.gpu.gpus_per_node
    nnodes = max(1, -(-plan.layout.gpus_per_worker // per_node))
    return LaunchCommands(sglang_command(plan, nnodes), vllm_command(plan, nnodes), nnodes)
