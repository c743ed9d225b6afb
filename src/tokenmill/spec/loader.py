"""Load a ``ModelSpec`` from a preset name, a ``config.json`` path or a model directory."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.jsonfile import read_json_object
from tokenmill.paths import hf_cached_config, hf_hub_cache, path_exists, path_is_dir
from tokenmill.spec.builders import InventoryBuilder
from tokenmill.spec.config_reader import ConfigReader
from tokenmill.spec.families import PARSERS
from tokenmill.spec.formats import WeightFormat
from tokenmill.spec.model import ModelSpec
from tokenmill.spec.presets import PRESET_BY_HF_ID, PRESETS, Preset
from tokenmill.spec.quantization import quant_rules
from tokenmill.spec.requantize import parse_weight_format, requantize

# Text-model types of multimodal wrappers that share a parser with their family.
_TEXT_MODEL_TYPES = {
    "qwen3_5_moe_text": "qwen3_5_moe",
    "qwen3_next_text": "qwen3_next",
    # Qwen's vision-language models: their language models read as Qwen2.5 / Qwen3 / Qwen3-MoE (the
    # older Qwen2.5-VL configs keep the text fields at the top level, under "qwen2_5_vl")
    "qwen2_5_vl": "qwen2",
    "qwen2_5_vl_text": "qwen2",
    "qwen3_vl_text": "qwen3",
    "qwen3_vl_moe_text": "qwen3_moe",
}

# Wrappers whose language model sits in ``text_config``.
_TEXT_WRAPPERS = {
    "kimi_k3",
    "kimi_vl",
    "qwen3_5_moe_vl",
    "llava",
    "mistral3",
    "llama4",
    "gemma3",
    "qwen2_5_vl",
    "qwen3_vl",
    "qwen3_vl_moe",
}


def model_from_config(
    config: dict[str, Any],
    name: str,
    source: str = "config.json",
    expert_format: WeightFormat | None = None,
    preset: Preset | None = None,
) -> ModelSpec:
    """Build a spec from a parsed config dict (reading ``text_config`` where the model nests it)."""
    top_type = config.get("model_type")
    if not isinstance(top_type, str):
        raise TokenmillError(f"{source}: field 'model_type' is missing")
    text = config
    nested = config.get("text_config")
    if isinstance(nested, dict) and (
        top_type in _TEXT_WRAPPERS or top_type not in PARSERS or "hidden_size" not in config
    ):
        text = nested
    model_type = text.get("model_type", top_type)
    if isinstance(model_type, str):
        model_type = _TEXT_MODEL_TYPES.get(model_type, model_type)
    if not isinstance(model_type, str) or model_type not in PARSERS:
        known = ", ".join(sorted(PARSERS))
        raise TokenmillError(f"{source}: unknown model_type {model_type!r} (supported: {known})")
    reader = ConfigReader(text, source if text is config else f"{source} [text_config]", model_type)
    # Quantization may sit at the top level or in text_config.
    qsource = text if "quantization_config" in text else config
    rules = quant_rules(qsource, source)
    builder = InventoryBuilder(rules, expert_format)
    parsed = PARSERS[model_type](reader, builder, config)
    moe = parsed.moe
    if moe is not None and moe.experts_per_token > moe.num_experts:
        # the config names differ by family (num_experts_per_tok, experts_per_token, …)
        raise reader.fail(
            "num_experts_per_tok",
            f"(experts a token uses) must be at most the {moe.num_experts} routed experts "
            f"(got {moe.experts_per_token})",
        )
    notes = list(parsed.notes)
    if expert_format is not None:
        notes.append(f"routed experts overridden to {expert_format.value}")
    return ModelSpec(
        name=name,
        model_type=top_type if top_type != model_type else model_type,
        family=parsed.family,
        hidden_size=parsed.hidden_size,
        vocab_size=parsed.vocab_size,
        layers=tuple(parsed.layers),
        tensors=tuple(builder.tensors),
        max_context=parsed.max_context,
        gqa=parsed.gqa,
        mla=parsed.mla,
        linear=parsed.linear,
        moe=parsed.moe,
        dense_intermediate=parsed.dense_intermediate,
        num_nextn_layers=parsed.num_nextn_layers,
        hf_id=preset.hf_id if preset else None,
        multimodal="vision_config" in config,
        reasoning_parser=preset.reasoning_parser if preset else None,
        tool_call_parser=preset.tool_call_parser if preset else None,
        notes=tuple(notes),
    )


def load_model(
    ref: str,
    expert_format: WeightFormat | str | None = None,
    weight_format: str | None = None,
) -> ModelSpec:
    """A preset name (``kimi-k3``), a path to a ``config.json``, a directory holding one, or a
    Hugging Face id whose config the local hub cache holds (``paths.hf_cached_config``).

    ``weight_format`` serves the linear weights in another format (``spec.requantize``: bf16, fp8,
    fp8_block, nvfp4, as the calibration file's ``gemm_quant_mode``); ``expert_format`` then sets the
    routed experts' own."""
    fmt = WeightFormat.parse(expert_format) if isinstance(expert_format, str) else expert_format
    gemm = parse_weight_format(weight_format) if weight_format is not None else ""
    key = ref.strip().lower()
    preset: Preset | None = None
    if key not in PRESETS and not path_exists(Path(ref)):
        key = PRESET_BY_HF_ID.get(key, key)  # a launch command's --model-path names the Hugging Face id
    if key in PRESETS:
        preset = PRESETS[key]
        text = (resources.files("tokenmill.spec") / "presets" / preset.file).read_text()
        config, name, source = json.loads(text), preset.name, f"preset {preset.name}"
    else:
        path = Path(ref)
        if path_is_dir(path):
            path = path / "config.json"
        cached = None if path_exists(path) else hf_cached_config(ref)
        if cached is not None:
            path = cached
        elif not path_exists(path):
            known = ", ".join(sorted(PRESETS))
            raise TokenmillError(
                f"--model {ref!r} is neither a preset ({known}), a preset's Hugging Face id, "
                f"a config.json path or model directory, nor a model in the Hugging Face cache ({hf_hub_cache()})"
            )
        config = read_json_object(path)
        if cached is not None:  # a snapshot's folder is a commit hash: the model is the repository's name
            name = ref.strip().split("/")[1]
        else:
            name = path.parent.name if path.name == "config.json" else path.stem.removesuffix("_config")
        source = str(path)
    formats = requantize(config, gemm)
    spec = model_from_config(formats.config, name, source, fmt or formats.expert_format, preset)
    if not gemm:
        return spec
    return replace(
        spec,
        notes=spec.notes if formats.note is None else (*spec.notes, formats.note),
        weight_format=gemm,
        requantized=formats.note,
        quantize_on_load="fp8" if formats.online_fp8 else None,
    )
