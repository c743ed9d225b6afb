"""Launch commands: the seed's SGLang recipes for Kimi-K3 (§2.1 Low-Latency, §2.3 Balanced and
DSPARK, §3.2 32×H200) rebuilt from plans, vLLM's equivalents, and non-hybrid models."""

from __future__ import annotations

import shlex

import pytest

from tokenmill.hardware import load_gpu
from tokenmill.plan import KVDtype, Layout, PrefixCache, Speculation, StateDtype, plan_memory
from tokenmill.plan.launch import LaunchCommands, launch_commands
from tokenmill.spec import load_model


def _tokens(command: str) -> list[str]:
    return shlex.split(command.replace("\\\n", " "))


def _value(tokens: list[str], flag: str) -> str:
    assert flag in tokens, f"{flag} missing from {tokens}"
    assert tokens.count(flag) == 1, f"{flag} given twice"
    return tokens[tokens.index(flag) + 1]


def _commands(model: str, gpu: str, gpus: int, layout: Layout) -> LaunchCommands:
    plan = plan_memory(load_model(model), load_gpu(gpu), gpus, layout)
    return launch_commands(plan)


LOW_LATENCY = Layout(tp=8, pool_ratio=1.1)
BALANCED = Layout(tp=8, dcp=8, pool_ratio=8.82)
DSPARK = Layout(
    tp=8, dcp=8, pool_ratio=8.82, speculative=Speculation("dspark", 7), replayssm=True, max_running_requests=256
)
H200_32 = Layout(
    tp=32,
    ep=32,
    kv_cache_dtype=KVDtype.FP8,
    prefix_cache=PrefixCache.EXTRA_BUFFER_LAZY,
    pool_ratio=0.08,
    mem_fraction_static=0.88,
    max_running_requests=64,
)


def test_low_latency_recipe() -> None:
    """Seed §2.1: sglang serve --model-path moonshotai/Kimi-K3 --trust-remote-code --tp-size 8
    --mem-fraction-static 0.85 --reasoning-parser kimi_k3 --tool-call-parser kimi_k3
    --mamba-full-memory-ratio 1.1"""
    cmds = _commands("kimi-k3", "b300", 8, LOW_LATENCY)
    tok = _tokens(cmds.sglang)
    assert _value(tok, "--model-path") == "moonshotai/Kimi-K3"
    assert "--trust-remote-code" in tok
    assert _value(tok, "--tp-size") == "8"
    assert _value(tok, "--mem-fraction-static") == "0.85"
    assert _value(tok, "--mamba-full-memory-ratio") == "1.1"
    assert _value(tok, "--reasoning-parser") == "kimi_k3"
    assert _value(tok, "--tool-call-parser") == "kimi_k3"
    for absent in (
        "--dcp-size",
        "--ep-size",
        "--nnodes",
        "--kv-cache-dtype",
        "--speculative-algorithm",
        "--mamba-radix-cache-strategy",
        "--disable-radix-cache",
        "--max-running-requests",
    ):
        assert absent not in tok
    assert cmds.nnodes == 1


def test_low_latency_ratio_from_calculator_prints_1_1() -> None:
    """Seed §1.3: 9,216-token requests give a ratio of 1.1 on 8 GPUs:
    5 × 56,171,520 / (9216 × 27,648) = 1.1022 → printed to 3 significant digits."""
    cmds = _commands("kimi-k3", "b300", 8, Layout(tp=8, avg_request_tokens=9216))
    assert _value(_tokens(cmds.sglang), "--mamba-full-memory-ratio") == "1.1"


def test_balanced_recipe() -> None:
    """Seed §2.3: Balanced adds --dcp-size 8 and --mamba-full-memory-ratio 8.82."""
    tok = _tokens(_commands("kimi-k3", "b300", 8, BALANCED).sglang)
    assert _value(tok, "--tp-size") == "8"
    assert _value(tok, "--dcp-size") == "8"
    assert _value(tok, "--mem-fraction-static") == "0.85"
    assert _value(tok, "--mamba-full-memory-ratio") == "8.82"
    assert _value(tok, "--reasoning-parser") == "kimi_k3"
    assert _value(tok, "--tool-call-parser") == "kimi_k3"


def test_dspark_recipe() -> None:
    """Seed §2.3: the drafter on top of Balanced, ReplaySSM keeping D at zero, 256 running."""
    tok = _tokens(_commands("kimi-k3", "b300", 8, DSPARK).sglang)
    assert _value(tok, "--speculative-algorithm") == "DSPARK"
    assert _value(tok, "--speculative-dspark-block-size") == "7"
    assert _value(tok, "--speculative-draft-model-path")  # some drafter path is named
    assert "--enable-linear-replayssm-spec" in tok
    assert _value(tok, "--dcp-size") == "8"
    assert _value(tok, "--max-running-requests") == "256"


def test_h200_32_recipe() -> None:
    """Seed §3.2: TP32 EP32 over 4 nodes, fp8 KV, extra_buffer_lazy, ratio 0.08, mem 0.88, 64 running."""
    cmds = _commands("kimi-k3", "h200", 32, H200_32)
    tok = _tokens(cmds.sglang)
    assert cmds.nnodes == 4  # 32 GPUs / 8 per HGX H200 node
    assert _value(tok, "--tp-size") == "32"
    assert _value(tok, "--ep-size") == "32"
    assert _value(tok, "--nnodes") == "4"
    assert _value(tok, "--node-rank") == "$NODE_RANK"
    assert _value(tok, "--dist-init-addr") == "$MASTER_ADDR:20000"
    assert _value(tok, "--kv-cache-dtype") == "fp8_e4m3"
    assert _value(tok, "--mamba-radix-cache-strategy") == "extra_buffer_lazy"
    assert _value(tok, "--mamba-full-memory-ratio") == "0.08"
    assert _value(tok, "--mem-fraction-static") == "0.88"
    assert _value(tok, "--max-running-requests") == "64"
    assert _value(tok, "--reasoning-parser") == "kimi_k3"


def test_h200_32_plan_matches_seed_arithmetic() -> None:
    """Seed §3.2: fp8 KV halves a token to 13,824 B; a state block shrinks to 13.4 MiB at 3 heads
    per GPU; extra_buffer_lazy budgets 4 blocks per request; the cap of 64 binds."""
    plan = plan_memory(load_model("kimi-k3"), load_gpu("h200"), 32, H200_32)
    assert plan.fits
    assert plan.sizes.kv_bytes_per_token == 24 * 576 * 1  # 13,824
    # 69 KDA layers × (96/32 = 3 heads × 128 × 128 × 4 B + conv 3 × 36,864/32 × 2 B)
    assert plan.sizes.state_slot_bytes == 69 * (3 * 128 * 128 * 4 + 3 * (3 * 96 * 128 // 32) * 2)
    assert plan.sizes.state_slot_bytes / 1024**2 == pytest.approx(13.4, abs=0.05)
    assert plan.sizes.slots_per_request == 4
    assert plan.max_running_requests == 64


def test_vllm_command_tp_and_dcp() -> None:
    cmds = _commands("kimi-k3", "b300", 8, BALANCED)
    tok = _tokens(cmds.vllm)
    assert tok[:3] == ["vllm", "serve", "moonshotai/Kimi-K3"]
    assert _value(tok, "--tensor-parallel-size") == "8"
    assert _value(tok, "--decode-context-parallel-size") == "8"
    assert _value(tok, "--gpu-memory-utilization") == "0.85"


@pytest.mark.parametrize(
    "layout", [LOW_LATENCY, BALANCED, DSPARK, H200_32], ids=["low-latency", "balanced", "dspark", "h200-32"]
)
def test_vllm_never_has_sglang_only_flags(layout: Layout) -> None:
    gpu, gpus = ("h200", 32) if layout is H200_32 else ("b300", 8)
    cmds = _commands("kimi-k3", gpu, gpus, layout)
    tok = _tokens(cmds.vllm)
    assert not any(t.startswith("--mamba-full-memory-ratio") for t in tok)
    assert not any(t.startswith("--mamba-radix-cache-strategy") for t in tok)
    assert "--tp-size" not in tok
    assert "--dcp-size" not in tok
    # Every SGLang recipe of a hybrid model does name its ratio.
    assert "--mamba-full-memory-ratio" in _tokens(cmds.sglang)


def test_vllm_multinode_and_fp8() -> None:
    tok = _tokens(_commands("kimi-k3", "h200", 32, H200_32).vllm)
    assert _value(tok, "--tensor-parallel-size") == "32"
    assert "--enable-expert-parallel" in tok
    assert _value(tok, "--nnodes") == "4"
    assert _value(tok, "--kv-cache-dtype") == "fp8"
    assert _value(tok, "--max-num-seqs") == "64"


def test_vllm_dspark_speculative_config() -> None:
    tok = _tokens(_commands("kimi-k3", "b300", 8, DSPARK).vllm)
    cfg = _value(tok, "--speculative-config")
    assert '"num_speculative_tokens": 7' in cfg


def test_non_hybrid_model_gets_no_mamba_flags() -> None:
    cmds = _commands("llama-3.1-70b", "b300", 8, Layout(tp=8))
    for command in (cmds.sglang, cmds.vllm):
        assert "mamba" not in command
    tok = _tokens(cmds.sglang)
    assert _value(tok, "--model-path") == "meta-llama/Llama-3.1-70B-Instruct"
    assert _value(tok, "--tp-size") == "8"
    assert _value(tok, "--tool-call-parser") == "llama3"
    assert "--reasoning-parser" not in tok  # the preset has none


def test_non_hybrid_model_ignores_state_flags() -> None:
    """State dtype and radix strategy are meaningless without linear layers: no mamba flag appears."""
    layout = Layout(tp=8, state_dtype=StateDtype.BF16, prefix_cache=PrefixCache.EXTRA_BUFFER_LAZY)
    cmds = _commands("llama-3.1-70b", "b300", 8, layout)
    assert "mamba" not in cmds.sglang
    assert "mamba" not in cmds.vllm


def test_prefix_cache_off_disables_radix_cache_for_non_hybrid() -> None:
    cmds = _commands("llama-3.1-70b", "b300", 8, Layout(tp=8, prefix_cache=PrefixCache.OFF))
    assert "--enable-prefix-caching" not in _tokens(cmds.vllm)
    assert "--no-enable-prefix-caching" in _tokens(cmds.vllm)  # vLLM's V1 engine caches by default
    assert "--disable-radix-cache" in _tokens(cmds.sglang)


def test_prefix_cache_off_for_hybrid() -> None:
    cmds = _commands("kimi-k3", "b300", 8, Layout(tp=8, pool_ratio=1.1, prefix_cache=PrefixCache.OFF))
    assert "--disable-radix-cache" in _tokens(cmds.sglang)
    assert "--mamba-radix-cache-strategy" not in _tokens(cmds.sglang)
    assert "--enable-prefix-caching" not in _tokens(cmds.vllm)
    assert "--no-enable-prefix-caching" in _tokens(cmds.vllm)


def test_state_dtype_bf16_flag() -> None:
    cmds = _commands("kimi-k3", "b300", 8, Layout(tp=8, pool_ratio=1.1, state_dtype=StateDtype.BF16))
    assert _value(_tokens(cmds.sglang), "--mamba-ssm-dtype") == "bfloat16"
    assert _value(_tokens(cmds.vllm), "--mamba-ssm-cache-dtype") == "bfloat16"


def test_mtp_on_deepseek() -> None:
    """num_nextn_predict_layers 1: EAGLE with N steps verifies N + 1 tokens."""
    tok = _tokens(_commands("deepseek-v3", "b300", 8, Layout(tp=8, speculative=Speculation("mtp", 3))).sglang)
    assert _value(tok, "--speculative-algorithm") == "EAGLE"
    assert _value(tok, "--speculative-num-steps") == "3"
    assert _value(tok, "--speculative-num-draft-tokens") == "4"
    assert "mamba" not in " ".join(tok)


def test_dp_attention_flags() -> None:
    tok = _tokens(_commands("kimi-k3", "b300", 8, Layout(tp=8, dp_attention=2, pool_ratio=1.1)).sglang)
    assert "--enable-dp-attention" in tok
    assert _value(tok, "--dp-size") == "2"


def test_single_node_worker_on_multi_replica_deployment() -> None:
    """Replicas don't widen a worker: TP8 on 16 B300 is two single-node servers."""
    cmds = _commands("kimi-k3", "b300", 16, Layout(tp=8, pool_ratio=1.1))
    assert cmds.nnodes == 1
    assert "--nnodes" not in _tokens(cmds.sglang)


@pytest.mark.parametrize(("fmt", "flag"), [("fp8", "fp8"), (None, None), ("nvfp4", None), ("fp8_block", None)])
def test_a_16_bit_checkpoint_served_as_fp8_is_quantized_at_load(fmt: str | None, flag: str | None) -> None:
    # SGLang and vLLM quantize a 16-bit checkpoint to FP8 (per-channel scales) at load; NVFP4 and
    # block FP8 need a checkpoint stored that way, which no flag can stand in for
    plan = plan_memory(load_model("llama-3.1-70b", weight_format=fmt), load_gpu("h100"), 2, Layout(tp=2))
    cmds = launch_commands(plan)
    for command in (cmds.sglang, cmds.vllm):
        tok = _tokens(command)
        if flag is None:
            assert "--quantization" not in tok
        else:
            assert _value(tok, "--quantization") == flag


def test_a_checkpoint_already_fp8_gets_no_quantization_flag() -> None:
    plan = plan_memory(load_model("deepseek-v3", weight_format="fp8"), load_gpu("h200"), 8, Layout(tp=8))
    assert "--quantization" not in _tokens(launch_commands(plan).sglang)
