"""Bundled model presets: published ``config.json`` files shipped inside the package.

Each preset names its file, the Hugging Face id a launch command loads, and the reasoning and
tool-call parsers SGLang uses for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    file: str
    hf_id: str
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("kimi-k3", "moonshotai--Kimi-K3_config.json", "moonshotai/Kimi-K3", "kimi_k3", "kimi_k3"),
        Preset(
            "kimi-linear-48b-a3b",
            "moonshotai--Kimi-Linear-48B-A3B_config.json",
            "moonshotai/Kimi-Linear-48B-A3B-Instruct",
            None,
            "kimi_k2",
        ),
        Preset(
            "kimi-k2",
            "moonshotai--Kimi-K2-Instruct_config.json",
            "moonshotai/Kimi-K2-Instruct",
            None,
            "kimi_k2",
        ),
        Preset(
            "deepseek-v3",
            "deepseek-ai--DeepSeek-V3_config.json",
            "deepseek-ai/DeepSeek-V3",
            None,
            "deepseekv3",
        ),
        Preset(
            "deepseek-r1",
            "deepseek-ai--DeepSeek-R1_config.json",
            "deepseek-ai/DeepSeek-R1",
            "deepseek-r1",
            "deepseekv3",
        ),
        Preset("qwen3-32b", "Qwen--Qwen3-32B_config.json", "Qwen/Qwen3-32B", "qwen3", "qwen25"),
        Preset("qwen3-235b-a22b", "Qwen--Qwen3-235B-A22B_config.json", "Qwen/Qwen3-235B-A22B", "qwen3", "qwen25"),
        Preset(
            "qwen3-235b-a22b-fp8",
            "Qwen--Qwen3-235B-A22B-FP8_config.json",
            "Qwen/Qwen3-235B-A22B-FP8",
            "qwen3",
            "qwen25",
        ),
        Preset("qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B_config.json", "Qwen/Qwen3-30B-A3B", "qwen3", "qwen25"),
        Preset(
            "llama-3.1-8b",
            "meta-llama--Meta-Llama-3.1-8B_config.json",
            "meta-llama/Llama-3.1-8B-Instruct",
            None,
            "llama3",
        ),
        Preset(
            "llama-3.1-70b",
            "meta-llama--Meta-Llama-3.1-70B_config.json",
            "meta-llama/Llama-3.1-70B-Instruct",
            None,
            "llama3",
        ),
        Preset("gpt-oss-120b", "openai--gpt-oss-120b_config.json", "openai/gpt-oss-120b", "gpt-oss", "gpt-oss"),
        Preset(
            "minimax-m2.5",
            "MiniMaxAI--MiniMax-M2.5_config.json",
            "MiniMaxAI/MiniMax-M2.5",
            "minimax-append-think",
            "minimax-m2",
        ),
        Preset(
            "nemotron-3-nano-30b-a3b",
            "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json",
            "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
            "nano_v3",
            "qwen3_coder",
        ),
        # The embedded default of `tokenmill serve` (built locally, not on the Hub): plan and simulate
        # it next to the real engine, e.g. on a `cpu` entry measured by `tokenmill calibrate local`.
        Preset("kimi-linear-tiny", "tokenmill--kimi-linear-tiny_config.json", "tokenmill/kimi-linear-tiny"),
    )
}

DEFAULT_MODEL = "kimi-k3"

#: A preset by its Hugging Face id, lower case (``moonshotai/kimi-k3`` → ``kimi-k3``).
PRESET_BY_HF_ID: dict[str, str] = {p.hf_id.lower(): p.name for p in PRESETS.values()}
