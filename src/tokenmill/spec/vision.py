"""Vision encoders of multimodal checkpoints, sized from their ``vision_config``.

Why they are counted at all: the engines load a multimodal checkpoint's vision encoder on every GPU
(replicated: SGLang and vLLM shard images across ranks, not the tower), so its bytes come out of
every GPU's memory even for text-only traffic, and a text-only step never runs it (the cost model
skips ``TensorKind.VISION``). Each encoder is a ViT: ``n`` blocks of attention projections, an MLP
and two norms (``_blocks``), a patch embedding, and a projector into the language model's width.
The layouts follow the Hugging Face modules; where a config leaves a detail out, the module's
default is taken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tokenmill.spec import builders as bld
from tokenmill.spec.config_reader import ConfigReader
from tokenmill.spec.tensors import Shard, TensorKind

__all__ = ["MAX_VISION_LAYERS", "Encoder", "llama4_vision", "moonvit", "qwen2_5_vision", "qwen3_vision", "siglip"]

#: Blocks a vision config may declare (a ViT has tens; each is a tensor entry here)
MAX_VISION_LAYERS = 10_000

_V, _REP = TensorKind.VISION, Shard.REPLICATED

#: An encoder's builder: (inventory, its ``vision_config``, the language model's width)
Encoder = Callable[[bld.InventoryBuilder, ConfigReader, int], None]


def _blocks(
    b: bld.InventoryBuilder,
    prefix: str,
    n: int,
    linears: Sequence[tuple[str, int, int]],
    norms: Sequence[tuple[str, int]],
    bias: bool = True,
) -> None:
    """``n`` encoder blocks under ``prefix`` (``{i}`` the block): each of ``linears`` (name, out,
    in), with its bias where ``bias``, and each of ``norms`` (name, values: 2 × width for a
    LayerNorm's weight and bias)."""
    layers = tuple(range(n))
    for name, out, inp in linears:
        b.add(f"{prefix}.{name}", _V, (out, inp), _REP, layers)
        if bias:
            b.add(f"{prefix}.{name}.bias", _V, (out,), _REP, layers, linear=False)
    for name, values in norms:
        b.add(f"{prefix}.{name}", _V, (values,), _REP, layers, linear=False)


def _add(b: bld.InventoryBuilder, name: str, shape: tuple[int, ...], linear: bool = True) -> None:
    b.add(name, _V, shape, _REP, linear=linear)


def moonvit(b: bld.InventoryBuilder, vc: ConfigReader, text_hidden: int) -> None:
    """Kimi's MoonViT tower + patch-merger projector (an estimate of the layout: qkv, o, a
    two-matrix MLP and norms per layer, no biases; a two-layer projector after a 2×2 merge;
    ~0.8 GiB for K3)."""
    width = vc.pos_int("vt_hidden_size")
    qkv = vc.get_int("qkv_hidden_size", width)
    inter = vc.pos_int("vt_intermediate_size")
    n = vc.pos_int("vt_num_hidden_layers", maximum=MAX_VISION_LAYERS)
    patch = vc.pos_int("patch_size", 14)
    merge = vc.raw("merge_kernel_size", [2, 2])
    merge_n = int(merge[0]) * int(merge[1]) if isinstance(merge, list) and len(merge) == 2 else 4
    mm_hidden = vc.get_int("mm_hidden_size", width)
    pos_h, pos_w = vc.get_int("init_pos_emb_height", 64), vc.get_int("init_pos_emb_width", 64)
    _add(b, "vision_tower.patch_embed", (width, 3 * patch * patch), linear=False)
    _add(b, "vision_tower.pos_emb", (pos_h * pos_w, width), linear=False)
    linears = (("wqkv", 3 * qkv, width), ("wo", width, qkv), ("mlp.fc0", inter, width), ("mlp.fc1", width, inter))
    _blocks(b, "vision_tower.blocks.{i}", n, linears, (("norm0", width), ("norm1", width)), bias=False)
    merged = merge_n * mm_hidden
    _add(b, "mm_projector.proj.0", (merged, merged))
    _add(b, "mm_projector.proj.2", (text_hidden, merged))


def siglip(b: bld.InventoryBuilder, vc: ConfigReader, text_hidden: int) -> None:
    """Gemma 3's SigLIP encoder (biased q/k/v/o and a two-matrix MLP, LayerNorms with biases, a
    learned position per patch) and its projector into the text width with an RMS norm."""
    width = vc.pos_int("hidden_size")
    inter = vc.pos_int("intermediate_size")
    n = vc.pos_int("num_hidden_layers", maximum=MAX_VISION_LAYERS)
    patch = vc.pos_int("patch_size", 14)
    image = vc.pos_int("image_size", 896)
    p = "vision_tower.vision_model."
    _add(b, p + "embeddings.patch_embedding", (width, 3 * patch * patch))
    _add(b, p + "embeddings.patch_embedding.bias", (width,), linear=False)
    _add(b, p + "embeddings.position_embedding", ((image // patch) ** 2, width), linear=False)
    attn = [(f"self_attn.{x}", width, width) for x in ("q_proj", "k_proj", "v_proj", "out_proj")]
    linears = (*attn, ("mlp.fc1", inter, width), ("mlp.fc2", width, inter))
    _blocks(b, p + "encoder.layers.{i}", n, linears, (("layer_norm1", 2 * width), ("layer_norm2", 2 * width)))
    _add(b, p + "post_layernorm", (2 * width,), linear=False)
    _add(b, "multi_modal_projector.mm_input_projection_weight", (text_hidden, width))
    _add(b, "multi_modal_projector.mm_soft_emb_norm", (width,), linear=False)


def llama4_vision(b: bld.InventoryBuilder, vc: ConfigReader, text_hidden: int) -> None:
    """Llama 4's encoder (biased q/k/v/o and a two-matrix GELU MLP, LayerNorms with biases, a class
    token), its pixel-shuffle adapter MLP and the projector into the text width."""
    width = vc.pos_int("hidden_size")
    inter = vc.pos_int("intermediate_size")
    n = vc.pos_int("num_hidden_layers", maximum=MAX_VISION_LAYERS)
    patch = vc.pos_int("patch_size", 14)
    image = vc.pos_int("image_size", 336)
    proj_in = vc.pos_int("projector_input_dim", 4096)
    proj_out = vc.pos_int("projector_output_dim", 4096)
    out = vc.pos_int("vision_output_dim", proj_out)
    p = "vision_model."
    _add(b, p + "patch_embedding.linear", (width, 3 * patch * patch))
    _add(b, p + "class_embedding", (width,), linear=False)
    _add(b, p + "positional_embedding_vlm", ((image // patch) ** 2 + 1, width), linear=False)
    attn = [(f"self_attn.{x}", width, width) for x in ("q_proj", "k_proj", "v_proj", "o_proj")]
    linears = (*attn, ("mlp.fc1", inter, width), ("mlp.fc2", width, inter))
    norms = (("input_layernorm", 2 * width), ("post_attention_layernorm", 2 * width))
    _blocks(b, p + "model.layers.{i}", n, linears, norms)
    for name in ("layernorm_pre", "layernorm_post"):
        _add(b, p + name, (2 * width,), linear=False)
    _add(b, p + "vision_adapter.mlp.fc1", (proj_in, inter))
    _add(b, p + "vision_adapter.mlp.fc2", (proj_out, proj_in))
    _add(b, "multi_modal_projector.linear_1", (text_hidden, out))


def _qwen_merger(b: bld.InventoryBuilder, prefix: str, width: int, merge: int, out: int, norm: int) -> None:
    """Qwen-VL's patch merger: a norm of ``norm`` values, then a two-layer MLP (with biases) from
    the ``merge``² merged patches to the language model's width ``out``."""
    merged = merge * merge * width
    _add(b, f"{prefix}.norm", (norm,), linear=False)
    for name, shape in ((".linear_fc1", (merged, merged)), (".linear_fc2", (out, merged))):
        _add(b, prefix + name, shape)
        _add(b, prefix + name + ".bias", (shape[0],), linear=False)


def _qwen_dims(vc: ConfigReader, patch: int) -> tuple[int, int, int, int, int]:
    """(width, MLP width, blocks, values per patch of the 3-D patch embedding, merge size) of a
    Qwen-VL encoder, ``patch`` the patch size where the config gives none."""
    width = vc.pos_int("hidden_size")
    inter = vc.pos_int("intermediate_size")
    n = vc.pos_int("depth", maximum=MAX_VISION_LAYERS)
    side, temporal = vc.pos_int("patch_size", patch), vc.pos_int("temporal_patch_size", 2)
    channels = vc.first_int("in_channels", "in_chans", default=3)
    return width, inter, n, channels * temporal * side * side, vc.pos_int("spatial_merge_size", 2)


def qwen2_5_vision(b: bld.InventoryBuilder, vc: ConfigReader, text_hidden: int) -> None:
    """Qwen2.5-VL's encoder: ``depth`` blocks of a fused biased qkv and output projection, a gated
    (SwiGLU) MLP with biases and two RMS norms; a 3-D patch embedding (``temporal_patch_size`` ×
    ``patch_size``², no bias) and the merger into ``out_hidden_size`` (the text width)."""
    width, inter, n, patch_values, merge = _qwen_dims(vc, 14)
    _add(b, "visual.patch_embed.proj", (width, patch_values))
    linears = (
        ("attn.qkv", 3 * width, width),
        ("attn.proj", width, width),
        ("mlp.gate_proj", inter, width),
        ("mlp.up_proj", inter, width),
        ("mlp.down_proj", width, inter),
    )
    _blocks(b, "visual.blocks.{i}", n, linears, (("norm1", width), ("norm2", width)))
    _qwen_merger(b, "visual.merger", width, merge, vc.pos_int("out_hidden_size", text_hidden), width)


def qwen3_vision(b: bld.InventoryBuilder, vc: ConfigReader, text_hidden: int) -> None:
    """Qwen3-VL's encoder: ``depth`` blocks of a fused biased qkv and output projection, a
    two-matrix GELU MLP with biases and two LayerNorms; a biased 3-D patch embedding, learned
    positions (``num_position_embeddings``), the merger into ``out_hidden_size`` (the text width)
    and one more merger per ``deepstack_visual_indexes`` entry (its norm after the 2×2 shuffle)."""
    width, inter, n, patch_values, merge = _qwen_dims(vc, 16)
    out = vc.pos_int("out_hidden_size", text_hidden)
    _add(b, "visual.patch_embed.proj", (width, patch_values))
    _add(b, "visual.patch_embed.proj.bias", (width,), linear=False)
    _add(b, "visual.pos_embed", (vc.pos_int("num_position_embeddings", 2304), width), linear=False)
    linears = (
        ("attn.qkv", 3 * width, width),
        ("attn.proj", width, width),
        ("mlp.linear_fc1", inter, width),
        ("mlp.linear_fc2", width, inter),
    )
    _blocks(b, "visual.blocks.{i}", n, linears, (("norm1", 2 * width), ("norm2", 2 * width)))
    _qwen_merger(b, "visual.merger", width, merge, out, 2 * width)
    for k in range(len(vc.int_list("deepstack_visual_indexes", []))):
        _qwen_merger(b, f"visual.deepstack_merger_list.{k}", width, merge, out, 2 * merge * merge * width)
