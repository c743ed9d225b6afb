"""`--launch`: an SGLang or vLLM launch command read back into tokenmill's layout flags.

The seed's three Kimi-K3 commands (seed 000 §2.2–§3.2; the article's typesetting dropped the
underscores of `kimi_k3`, `extra_buffer_lazy`, `launch_server` and `$NODE_RANK`, restored here)
must give the plans the seed publishes; every command `tokenmill plan` prints must read back into
the layout it was printed from; anything else is one line naming the flag.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_helpers import cli, cli_json
from tokenmill.cli.options import layout_from_flags
from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.plan import Layout, plan_memory
from tokenmill.plan.launch import launch_commands
from tokenmill.plan.launch_reading import read_launch
from tokenmill.plan.layout import KVDtype, PrefixCache, Speculation, StateDtype
from tokenmill.spec import load_model
from tokenmill.spec.model import MixerKind

LOW_LATENCY = """sglang serve --model-path moonshotai/Kimi-K3 --trust-remote-code \\
  --tp-size 8 --mem-fraction-static 0.85 \\
  --reasoning-parser kimi_k3 --tool-call-parser kimi_k3 \\
  --mamba-full-memory-ratio 1.1"""
BALANCED = """sglang serve --model-path moonshotai/Kimi-K3 --trust-remote-code \\
  --tp-size 8 --dcp-size 8 --mem-fraction-static 0.85 \\
  --reasoning-parser kimi_k3 --tool-call-parser kimi_k3 \\
  --mamba-full-memory-ratio 8.82"""
H200_32 = """python -m sglang.launch_server \\
  --model-path moonshotai/Kimi-K3 \\
  --tokenizer-path moonshotai/Kimi-K3 \\
  --served-model-name kimi-k3 \\
  --tensor-parallel-size 32 \\
  --ep-size 32 \\
  --nnodes 4 \\
  --node-rank "$NODE_RANK" \\
  --dist-init-addr "$MASTER_ADDR:20000" \\
  --dist-timeout 3600 \\
  --kv-cache-dtype fp8_e4m3 \\
  --mem-fraction-static 0.88 \\
  --max-running-requests 64 \\
  --mamba-full-memory-ratio 0.08 \\
  --mamba-radix-cache-strategy extra_buffer_lazy \\
  --decode-attention-backend flashmla \\
  --moe-runner-backend marlin \\
  --reasoning-parser kimi_k3 \\
  --tool-call-parser kimi_k3 \\
  --trust-remote-code \\
  --enable-metrics"""


def test_the_seeds_low_latency_command_admits_60_requests(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 000 §2.2: the server's log caps the Low-Latency server at 60 running requests (exact)."""
    out = cli_json(capsys, "plan", "--launch", LOW_LATENCY, "--json")
    assert out["model"] == "kimi-k3" and out["gpus"] == 8 and out["layout"]["tp"] == 8
    assert out["pool_ratio"] == pytest.approx(1.1) and out["layout"]["mem_fraction_static"] == 0.85
    assert out["max_running_requests"] == 60, "seed: 60 running requests"


def test_the_seeds_balanced_command_admits_101_requests(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 000 §2.3: the Balanced recipe admitted 101 requests (exact)."""
    out = cli_json(capsys, "plan", "--launch", BALANCED, "--json")
    assert out["layout"]["dcp"] == 8 and out["max_running_requests"] == 101, "seed: 101 running requests"


def test_the_seeds_32_h200_command_plans_as_its_flags_do(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 000 §3.2, read from the command, against the same layout in tokenmill's flags (the
    README's example): 32 GPUs on 4 nodes, every figure of the plan the same."""
    code, out, err = cli(capsys, "plan", "--gpu", "h200", "--launch", H200_32, "--json")
    assert code == 0, err
    by_flags = cli_json(
        capsys,
        *("plan", "--gpu", "h200", "--gpus", "32", "--tp", "32", "--ep", "32", "--kv-cache-dtype", "fp8_e4m3"),
        *("--prefix-cache", "extra_buffer_lazy", "--pool-ratio", "0.08", "--mem-fraction-static", "0.88"),
        *("--max-running-requests", "64", "--json"),
    )
    assert json.loads(out) == by_flags
    assert by_flags["gpus"] == 32 and by_flags["max_running_requests"] == 64
    notes = [line for line in err.splitlines() if line.startswith("note: --launch")]
    assert len(notes) == 2, err  # no --mem-fraction-static note: the command gives it
    assert "--tokenizer-path" in notes[0] and "--enable-metrics" in notes[0] and "not read" in notes[0]
    assert notes[1].endswith("not modelled: --decode-attention-backend --moe-runner-backend")


def test_a_model_path_names_the_preset_it_is_the_id_of(capsys: pytest.CaptureFixture[str]) -> None:
    by_id = cli_json(capsys, "plan", "--model", "moonshotai/Kimi-K3", "--json")
    assert by_id == cli_json(capsys, "plan", "--model", "kimi-k3", "--json")
    code, _, err = cli(capsys, "plan", "--model", "nobody/No-Such-Model")
    assert code == 2 and err.count("\n") == 1 and "Hugging Face id" in err


def test_what_the_engines_start_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    """A size the command does not give is the engine's default: one GPU; SGLang's --dp-size
    without attention DP starts replicas; vLLM's memory share is 0.9."""
    one = read_launch("sglang serve --model-path Qwen/Qwen3-32B")
    assert (one.gpus, one.flags["tp"], one.flags["ep"], one.flags["pp"]) == (1, 1, 1, 1)
    assert "mem_fraction_static" not in one.flags and "SGLang picks one by GPU" in one.notes[0]
    replicas = read_launch("sglang serve --model-path Qwen/Qwen3-32B --tp-size 2 --dp-size 4")
    assert replicas.gpus == 8 and replicas.flags["dp_attention"] == 1 and "4 replicas" in replicas.notes[-1]
    dp = read_launch("sglang serve --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention --ep 8")
    assert dp.gpus == 8 and dp.flags["dp_attention"] == 8 and dp.flags["ep"] == 8
    vllm = read_launch("vllm serve Qwen/Qwen3-32B -tp 2")
    assert (vllm.engine, vllm.model, vllm.gpus, vllm.flags["mem_fraction_static"]) == ("vllm", "Qwen/Qwen3-32B", 2, 0.9)
    out = cli_json(capsys, "plan", "--gpu", "h100", "--launch", "vllm serve Qwen/Qwen3-32B -tp 2", "--json")
    assert out["model"] == "qwen3-32b" and out["gpus"] == 2 and out["layout"]["mem_fraction_static"] == 0.9


def test_trtllm_serve_reads_its_underscored_flags_and_says_what_it_leaves_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    launch = (
        "trtllm-serve deepseek-ai/DeepSeek-R1 --backend pytorch --tp_size 8 --ep_size 8 --max_batch_size 256 "
        "--kv_cache_free_gpu_memory_fraction 0.85 --trust_remote_code --extra_llm_api_options cfg.yml"
    )
    reading = read_launch(launch)
    assert (reading.engine, reading.model, reading.gpus) == ("trtllm", "deepseek-ai/DeepSeek-R1", 8)
    assert (reading.flags["tp"], reading.flags["ep"], reading.flags["max_running_requests"]) == (8, 8, 256)
    assert any("memory left after the weights" in n for n in reading.notes)
    assert any("--extra_llm_api_options is not read" in n for n in reading.notes)
    assert reading.not_read == ("--trust-remote-code",) and reading.not_modelled == ()
    assert read_launch("trtllm-serve serve Qwen/Qwen3-32B --tp_size 2").gpus == 2
    args = ("predict", "--gpu", "b200", "--isl", "1024", "--osl", "64", "--concurrency", "4", "--json")
    out = cli_json(capsys, *args, "--launch", launch)
    assert out["backend"] == "trtllm" and out["model"] == "deepseek-r1" and out["layout"]["ep"] == 8


def test_predict_takes_the_engine_from_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("predict", "--gpu", "h100", "--isl", "1024", "--osl", "64", "--concurrency", "2", "--json")
    assert cli_json(capsys, *args, "--launch", "vllm serve Qwen/Qwen3-32B -tp 2")["backend"] == "vllm"
    assert cli_json(capsys, *args, "--launch", "sglang serve --model-path Qwen/Qwen3-32B --tp 2")["backend"] == "sglang"
    given = cli_json(capsys, *args, "--backend", "trtllm", "--launch", "vllm serve Qwen/Qwen3-32B -tp 2")
    assert given["backend"] == "trtllm"  # a --backend given on the command line stands


def test_model_and_gpus_given_on_the_command_line_win(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "plan", "--model", "deepseek-v3", "--gpus", "16", "--launch", LOW_LATENCY, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["model"] == "deepseek-v3" and plan["gpus"] == 16 and plan["replicas"] == 2
    assert "--model deepseek-v3 stands in for the command's moonshotai/Kimi-K3" in err


@pytest.mark.parametrize(
    ("launch", "extra", "says"),
    [
        ("python serve.py --tp 8", [], "--launch must start with"),
        ("sglang serve --tp-size 8 --tp-size 4", [], "--launch gives --tp-size twice"),
        ("sglang serve --tp-size eight", [], "--tp-size must be a positive integer"),
        ("sglang serve --tp-size 0", [], "--tp-size must be a positive integer"),
        ("sglang serve --tp-size --ep-size 8", [], "--tp-size needs a value"),
        ("sglang serve --mem-fraction-static --tp-size 8", [], "--mem-fraction-static needs a value"),
        ("sglang serve --mem-fraction-static x", [], "--mem-fraction-static must be a number"),
        ("sglang serve --speculative-algorithm DSPARK", [], "needs --speculative-dspark-block-size"),
        ("sglang serve --speculative-algorithm EAGLE", [], "needs --speculative-num-steps"),
        ("sglang serve --speculative-algorithm MEDUSA", [], "not one tokenmill plans"),
        ("sglang serve --quantization awq", [], "--quantization 'awq'"),
        ("sglang serve --disable-radix-cache --mamba-radix-cache-strategy no_buffer", [], "both"),
        ("sglang serve --disable-hybrid-swa-memory --swa-full-tokens-ratio 0.5", [], "both"),
        ("sglang serve --model-path openai/gpt-oss-120b --swa-full-tokens-ratio 2", [], "at most 1 (got 2.0)"),
        ("sglang serve --tp-size 8 'unclosed", [], "cannot split the command"),
        ("sglang serve --tp-size 8 stray", [], "'stray' is not a flag sglang takes"),
        ("vllm serve m --speculative-config '{bad'", [], "--speculative-config must be JSON"),
        ('vllm serve m --speculative-config \'{"method": "mtp"}\'', [], "num_speculative_tokens"),
        ("  ", [], "--launch needs a command"),
        ("sglang serve --model-path moonshotai/Kimi-K3 --tp-size 8", ["--tp", "4"], "--tp 4 disagrees with --launch"),
        ("sglang serve --model-path moonshotai/Kimi-K3 --tp-size 8 --kv-cache-dtype bf16", ["--page-size", "1"], ""),
        (
            "sglang serve --model-path moonshotai/Kimi-K3 --tp-size 8 --mamba-radix-cache-strategy lazy",
            [],
            "--launch: --prefix-cache",
        ),
    ],
)
def test_a_command_it_cannot_read_is_one_line(
    capsys: pytest.CaptureFixture[str], launch: str, extra: list[str], says: str
) -> None:
    code, out, err = cli(capsys, "plan", "--launch", launch, *extra, "--json")
    if not says:  # a flag the command does not set may be given beside it
        assert code == 0, err
        assert json.loads(out)["layout"]["page_size"] == 1
        return
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error:") and says in err, err


@given(st.text(max_size=120))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_any_text_is_read_or_refused_in_one_line(text: str) -> None:
    for command in (text, f"sglang serve {text}", f"vllm serve {text}"):
        try:
            reading = read_launch(command)
        except TokenmillError as exc:
            assert "\n" not in str(exc)
        else:
            assert reading.gpus >= 1 and reading.engine in ("sglang", "vllm")


_PRESETS = ("kimi-k3", "kimi-linear-48b-a3b", "deepseek-v3", "qwen3-32b", "qwen3-235b-a22b-fp8", "gpt-oss-120b")


@st.composite
def _layouts(draw: st.DrawFn) -> tuple[str, str, Layout]:
    model = draw(st.sampled_from(_PRESETS))
    gpu = draw(st.sampled_from(("b300", "h200", "gb200")))
    tp = draw(st.sampled_from((1, 2, 4, 8, 16)))
    hybrid = model.startswith("kimi-k3") or model.startswith("kimi-linear")
    prefixes = list(PrefixCache) if hybrid else [PrefixCache.EXTRA_BUFFER, PrefixCache.OFF]
    layout = Layout(
        tp=tp,
        ep=draw(st.sampled_from([e for e in (1, 2, 4, 8, 16) if e <= tp])),
        pp=draw(st.sampled_from((1, 2))),
        dp_attention=draw(st.sampled_from([d for d in (1, 2, 4, 8) if tp % d == 0])),
        dcp=draw(st.sampled_from([d for d in (1, 2, 8) if tp % d == 0])),
        kv_cache_dtype=draw(st.sampled_from(list(KVDtype))),
        state_dtype=draw(st.sampled_from([None, StateDtype.BF16])) if hybrid else None,
        prefix_cache=draw(st.sampled_from(prefixes)),
        speculative=draw(st.sampled_from([Speculation(), Speculation("mtp", 2), Speculation("dspark", 7)])),
        replayssm=draw(st.booleans()) if hybrid else False,
        mem_fraction_static=draw(st.sampled_from((0.8, 0.85, 0.88, 0.9))),
        pool_ratio=draw(st.sampled_from([None, 0.5, 1.1, 8.82])) if hybrid else None,
        max_running_requests=draw(st.sampled_from([None, 64, 256])),
        page_size=draw(st.sampled_from((1, 16, 64))),
        moe_a2a_backend=draw(st.sampled_from(("none", "deepep"))),
        swa_full_tokens_ratio=draw(st.sampled_from((None, 0.5, 1.0))),
    )
    return model, gpu, layout


@given(_layouts())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_sglang_command_a_plan_prints_reads_back_into_its_layout(case: tuple[str, str, Layout]) -> None:
    model, gpu, layout = case
    spec, hw = load_model(model), load_gpu(gpu)
    try:
        plan = plan_memory(spec, hw, layout.tp * layout.pp, layout)
    except TokenmillError:
        return  # a layout the plan refuses prints no command
    reading = read_launch(launch_commands(plan).sglang)
    flags = {k: None for k in ("tp", "state_dtype", "pool_ratio", "avg_request_tokens", "max_running_requests")}
    flags |= {"ep": 1, "pp": 1, "dp_attention": 1, "dcp": 1, "kv_cache_dtype": "auto", "prefix_cache": "extra_buffer"}
    flags |= {"speculative": "none", "replayssm": False, "mem_fraction_static": 0.85, "page_size": 64}
    flags |= {"moe_a2a_backend": "none", "pool_budget_gib": None, "weight_format": None, "expert_format": None}
    flags |= {"swa_full_tokens_ratio": None}
    back = layout_from_flags(flags | reading.flags, reading.gpus)
    # the sliding-window pool's ratio is written, and read back, for a model with sliding layers
    sliding = bool(spec.layers_with(MixerKind.SWA))
    assert back.swa_full_tokens_ratio == (layout.swa_full_tokens_ratio if sliding else None)
    assert reading.engine == "sglang" and reading.model == spec.hf_id
    assert reading.gpus == layout.tp * layout.pp
    ratio = plan.pools.pool_ratio
    if ratio is not None:  # printed to three or four significant figures
        assert back.pool_ratio == pytest.approx(ratio, rel=5e-3)
    expected = layout
    for name in ("tp", "ep", "pp", "dp_attention", "dcp", "kv_cache_dtype", "prefix_cache", "speculative"):
        assert getattr(back, name) == getattr(expected, name), name
    for name in ("replayssm", "mem_fraction_static", "max_running_requests", "page_size", "moe_a2a_backend"):
        assert getattr(back, name) == getattr(expected, name), name
    if spec.is_hybrid:
        assert back.state_dtype == (StateDtype.BF16 if layout.state_dtype is StateDtype.BF16 else None)


@given(_layouts())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_vllm_command_a_plan_prints_reads_back_into_what_vllm_can_say(case: tuple[str, str, Layout]) -> None:
    """vLLM's flags say less (expert parallelism is on or off, over every GPU of the worker; no
    pool ratio, radix strategy or page size): what they say reads back as it was."""
    model, gpu, layout = case
    spec, hw = load_model(model), load_gpu(gpu)
    try:
        plan = plan_memory(spec, hw, layout.tp * layout.pp, layout)
    except TokenmillError:
        return
    reading = read_launch(launch_commands(plan).vllm)
    assert reading.engine == "vllm" and reading.model == spec.hf_id and reading.gpus == layout.tp * layout.pp
    flags = reading.flags
    assert (flags["tp"], flags["pp"], flags["dp_attention"], flags["dcp"]) == (
        layout.tp,
        layout.pp,
        layout.dp_attention,
        layout.dcp,
    )
    assert flags["ep"] == (layout.tp if layout.ep > 1 else 1)
    assert KVDtype.parse(flags["kv_cache_dtype"]) is layout.kv_cache_dtype
    assert flags["mem_fraction_static"] == layout.mem_fraction_static
    assert flags.get("max_running_requests") == layout.max_running_requests
    assert (flags.get("prefix_cache") == "off") == (layout.prefix_cache is PrefixCache.OFF)
    assert Speculation.parse(flags.get("speculative", "none")) == layout.speculative


# gpt-oss-120b on TP8: one KV head of 64 per GPU, 2 × 64 × 2 B = 256 B per layer and token; 18 full
# layers and 18 sliding ones
OSS_LAYER = 2 * 64 * 2


@pytest.mark.parametrize(
    ("flags", "sliding_share"),
    [("", 0.8), ("--swa-full-tokens-ratio 0.5", 0.5), ("--disable-hybrid-swa-memory", 1.0)],
)
def test_sglangs_sliding_window_pool_flags_size_the_cache(
    capsys: pytest.CaptureFixture[str], flags: str, sliding_share: float
) -> None:
    """SGLang's sliding-window pool holds --swa-full-tokens-ratio (0.8) × the full pool's tokens;
    --disable-hybrid-swa-memory keeps one pool, every layer caching every token."""
    launch = f"sglang serve --model-path openai/gpt-oss-120b --tp-size 8 {flags}"
    code, out, err = cli(capsys, "plan", "--gpu", "h100", "--launch", launch, "--json")
    assert code == 0 and "not modelled" not in err, err
    assert json.loads(out)["kv_bytes_per_token"] == round(OSS_LAYER * (18 + sliding_share * 18))


def test_the_launch_command_says_the_sliding_window_pool_where_it_applies() -> None:
    """A set ratio is written for a model with sliding layers (gpt-oss), not for one without
    (Llama-3.1-8B) nor for Gemma 3, whose pool SGLang keeps uniform whatever the flag says."""
    from pathlib import Path

    gemma = Path(__file__).parents[1] / "spec" / "fixtures" / "gemma_3_27b_config.json"
    lay = Layout(tp=8, swa_full_tokens_ratio=0.5)
    oss = plan_memory(load_model("gpt-oss-120b"), load_gpu("h100"), 8, lay)
    assert "--swa-full-tokens-ratio 0.5" in launch_commands(oss).sglang
    assert oss.sizes.kv_bytes_per_token == OSS_LAYER * (18 + 9)
    for model in (load_model("llama-3.1-8b"), load_model(str(gemma))):
        plan = plan_memory(model, load_gpu("h100"), 8, lay)
        assert "--swa-full-tokens-ratio" not in launch_commands(plan).sglang
    g = plan_memory(load_model(str(gemma)), load_gpu("h100"), 8, lay)
    assert g.sizes.kv_bytes_per_token == 62 * 2 * 2 * 128 * 2  # 16 KV heads over TP8: 2 a GPU
