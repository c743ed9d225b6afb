"""`tokenmill predict` and `tokenmill calibrate evaluate|fit` through the real entry point."""

from __future__ import annotations

import csv
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import cli, cli_json, modules_after
from tokenmill.perf.accuracy import AccuracyTable, fingerprint, load_accuracy, model_key, shipped_accuracy_path
from tokenmill.perf.calibrated import shipped_path
from tokenmill.spec import load_model

MODELS = str(resources.files("tokenmill.spec") / "presets")
COLUMNS = [
    "id",
    "silicon_data_source",
    "backend",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "prefill_batch_size",
    "prefill_num_workers",
    "prefill_tp_size",
    "prefill_pp_size",
    "prefill_attention_dp_size",
    "prefill_moe_tp_size",
    "prefill_moe_ep_size",
    "decode_batch_size",
    "decode_num_workers",
    "decode_tp_size",
    "decode_pp_size",
    "decode_attention_dp_size",
    "decode_moe_tp_size",
    "decode_moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
]
ROWS = [
    # predictable: dense, MoE with attention DP, disaggregated
    {
        "id": "llama8",
        "silicon_data_source": "silicon_concurrency=8",
        "backend": "vllm",
        "model_path": "meta-llama/Llama-3.1-8B-Instruct",
        "system": "h100_sxm",
        "mode": "agg",
        "isl": "1024",
        "osl": "128",
        "batch_size": "8",
        "tp_size": "1",
        "pp_size": "1",
        "moe_tp_size": "1",
        "moe_ep_size": "1",
        "silicon_ttft_ms": "60",
        "silicon_tpot_ms": "7",
    },
    {
        "id": "oss",
        "silicon_data_source": "silicon_concurrency=16",
        "backend": "trtllm",
        "model_path": "openai/gpt-oss-120b",
        "system": "b200_sxm",
        "precision": "fp4",
        "mode": "agg",
        "isl": "1024",
        "osl": "256",
        "gemm_quant_mode": "nvfp4",
        "moe_quant_mode": "nvfp4",
        "batch_size": "8",
        "tp_size": "1",
        "pp_size": "1",
        "attention_dp_size": "2",
        "moe_tp_size": "1",
        "moe_ep_size": "2",
        "silicon_ttft_ms": "80",
        "silicon_tpot_ms": "4",
    },
    {
        "id": "pd",
        "silicon_data_source": "silicon_concurrency=8",
        "backend": "sglang",
        "model_path": "Qwen/Qwen3-32B",
        "system": "h200_sxm",
        "precision": "fp8",
        "mode": "disagg",
        "isl": "2048",
        "osl": "128",
        "gemm_quant_mode": "fp8",
        "moe_quant_mode": "fp8",
        "prefill_batch_size": "1",
        "prefill_num_workers": "1",
        "prefill_tp_size": "2",
        "prefill_pp_size": "1",
        "prefill_attention_dp_size": "1",
        "prefill_moe_tp_size": "2",
        "prefill_moe_ep_size": "1",
        "decode_batch_size": "8",
        "decode_num_workers": "1",
        "decode_tp_size": "2",
        "decode_pp_size": "1",
        "decode_attention_dp_size": "1",
        "decode_moe_tp_size": "2",
        "decode_moe_ep_size": "1",
        "silicon_ttft_ms": "300",
        "silicon_tpot_ms": "12",
    },
    # skipped, each with its reason
    {
        "id": "nomodel",
        "silicon_data_source": "silicon_concurrency=8",
        "backend": "vllm",
        "model_path": "acme/Mystery-9B",
        "system": "h100_sxm",
        "mode": "agg",
        "isl": "1024",
        "osl": "128",
        "batch_size": "8",
        "tp_size": "1",
        "silicon_ttft_ms": "60",
        "silicon_tpot_ms": "7",
    },
    {
        "id": "heads",
        "silicon_data_source": "silicon_concurrency=8",
        "backend": "trtllm",
        "model_path": "deepseek-ai/DeepSeek-R1",
        "system": "gb200",
        "precision": "fp8",
        "mode": "agg",
        "isl": "1024",
        "osl": "128",
        "gemm_quant_mode": "fp8",
        "moe_quant_mode": "fp8",
        "batch_size": "8",
        "tp_size": "28",
        "pp_size": "1",
        "attention_dp_size": "1",
        "moe_tp_size": "28",
        "moe_ep_size": "1",
        "silicon_ttft_ms": "60",
        "silicon_tpot_ms": "7",
    },
    {
        "id": "nogpu",
        "silicon_data_source": "silicon_concurrency=8",
        "backend": "vllm",
        "model_path": "Qwen/Qwen3-32B",
        "system": "tpu_v9",
        "mode": "agg",
        "isl": "1024",
        "osl": "128",
        "batch_size": "8",
        "tp_size": "1",
        "silicon_ttft_ms": "60",
        "silicon_tpot_ms": "7",
    },
    {
        "id": "toobig",
        "silicon_data_source": "silicon_concurrency=8",
        "backend": "sglang",
        "model_path": "deepseek-ai/DeepSeek-R1",
        "system": "h100_sxm",
        "precision": "fp8",
        "mode": "agg",
        "isl": "1024",
        "osl": "128",
        "gemm_quant_mode": "fp8",
        "moe_quant_mode": "fp8",
        "batch_size": "8",
        "tp_size": "1",
        "pp_size": "1",
        "moe_tp_size": "1",
        "moe_ep_size": "1",
        "silicon_ttft_ms": "60",
        "silicon_tpot_ms": "7",
    },
]


def write(path: Path, rows: list[dict[str, str]], columns: list[str]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in columns})
    return path


def test_predict_json(capsys: pytest.CaptureFixture[str]) -> None:
    """How fast it answers is a benchmark (benchmarks/predict_latency.py), not asserted here."""
    code, out, _ = cli(
        capsys,
        "predict",
        "--model",
        "kimi-k3",
        "--gpu",
        "b300",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--pool-ratio",
        "1.1",
        "--isl",
        "8400",
        "--osl",
        "512",
        "--concurrency",
        "4",
        "--json",
    )
    assert code == 0
    d = json.loads(out)
    for key in ("ttft_ms", "tpot_ms", "output_throughput_per_gpu", "total_throughput_per_gpu"):
        assert d[key] > 0
    assert set(d["decode_step"]["breakdown_ms"]) >= {
        "dense_linear",
        "routed_experts",
        "decode_attention",
        "collectives",
    }
    assert d["backend"] == "sglang" and d["layout"]["tp"] == 8
    # one prompt's prefill alone: SGLang's budget on a B300 (288 GB) is 16,384 tokens a step
    pre = d["prefill"]
    assert (pre["tokens"], pre["chunks"]) == (8400, 1)
    assert sum(pre["breakdown_ms"].values()) == pytest.approx(pre["ms"], abs=1e-3)
    assert pre["breakdown_ms"]["prefill_attention"] > 0 == pre["breakdown_ms"]["decode_attention"]
    split = d["tpot_split_ms"]
    assert split["decode_step"] + split["behind_prompts"] == pytest.approx(d["tpot_ms"], abs=1e-3)
    assert split["decode_step"] == pytest.approx(d["decode_step"]["ms"], rel=1e-4)  # one token per step
    # where the first token's time goes: the front end is the engine's fitted request latency
    parts = d["ttft_split_ms"]
    assert list(parts) == ["front_end", "step_lag", "queued", "prefill"]
    assert parts["step_lag"] == pytest.approx(d["params"]["first_token_steps"] * d["tpot_ms"], abs=2e-3)
    assert sum(parts.values()) == pytest.approx(d["ttft_ms"], abs=2e-3)
    assert parts["front_end"] == pytest.approx(d["params"]["request_latency_s"] * 1e3, abs=1e-3)
    # the regimes weigh by the burst share and the jitter: four lanes of 8,400-token prompts fill
    # 4 × 8,400 / 16,384 (SGLang's prefill chunk on a B300) steps a wave
    assert d["burst_share"] == d["params"]["burst_share"]
    assert d["burst_jitter_steps"] == d["params"]["burst_jitter_steps"]
    k = 4 * 8400 / 16384
    assert d["wave_prompt_steps"] == pytest.approx(k, abs=1e-3)
    share = d["burst_share"] * k / (k + d["burst_jitter_steps"])
    assert d["lock_step_weight"] == pytest.approx(share, abs=1e-4)
    reg = d["ttft_regimes_ms"]
    assert d["ttft_ms"] == pytest.approx(share * reg["lock_step"] + (1 - share) * reg["drifted"], abs=2e-3)
    # the shipped bands: B300 under SGLang is one model's campaign (31 DeepSeek-V3 rows), so the band
    # is the engine's, over all its GPUs and models
    acc = d["accuracy"]
    assert acc["scope"] == "sglang" and acc["rows"] >= 20 and acc["models"] >= 2
    # Kimi-K3 is not in the calibration file: the band is the held-out predictions' (benchmarks/calibrate_lomo.py)
    assert acc["held_out"] is True and acc["held_out_of"] == "model"
    assert acc["ttft_ratio_p90"] == load_accuracy(shipped_accuracy_path()).held_out["sglang"].ttft_ratio_p90  # type: ignore[union-attr]
    assert any(n.startswith("error band from held-out predictions of sglang") for n in d["notes"])
    lo, hi = acc["ttft_ms_range_80"]
    assert lo == pytest.approx(d["ttft_ms"] * acc["ttft_ratio_p10"], rel=1e-3)
    assert hi == pytest.approx(d["ttft_ms"] * acc["ttft_ratio_p90"], rel=1e-3)
    assert any("no b300/sglang group with 20+ rows of 2+ models: this engine's" in n for n in d["notes"])


def test_predict_of_a_calibration_model_has_the_calibration_rows_band(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(
        capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--backend", "vllm", "--json"
    )
    assert code == 0
    d = json.loads(out)
    assert d["accuracy"]["held_out"] is False and d["accuracy"]["scope"] == "h100/vllm"
    assert d["accuracy"]["ttft_ratio_p90"] == load_accuracy(shipped_accuracy_path()).groups["h100/vllm"].ttft_ratio_p90  # type: ignore[union-attr]
    assert any(n.startswith("error band from the calibration rows of h100/vllm") for n in d["notes"])


def test_predict_on_a_gpu_outside_the_calibration_file_takes_the_held_out_gpu_band(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shipped = load_accuracy(shipped_accuracy_path())
    assert shipped is not None
    point = ("--model", "llama-3.1-8b", "--gpus", "1", "--backend", "vllm", "--json")
    # GB300 is a Blackwell Ultra like B300, whose constants it borrows: the GPU held-out band
    code, out, _ = cli(capsys, "predict", "--gpu", "gb300", *point)
    assert code == 0
    acc = json.loads(out)["accuracy"]
    assert acc["held_out"] is True and acc["held_out_of"] == "gpu" and acc["scope"] == "vllm"
    assert acc["tpot_ratio_p90"] == shipped.held_out_gpu["vllm"].tpot_ratio_p90
    assert any("gb300 is not in the calibration file; its constants are b300's" in n for n in json.loads(out)["notes"])
    # MI355X is of an architecture the file does not hold: the fitted GPUs' medians, and the architecture band
    code, out, _ = cli(capsys, "predict", "--gpu", "mi355x", *point)
    acc = json.loads(out)["accuracy"]
    assert code == 0 and acc["held_out_of"] == "architecture"
    assert acc["tpot_ratio_p90"] == shipped.held_out_architecture["vllm"].tpot_ratio_p90
    # a calibrated GPU and model: the calibration rows' band, nothing held out
    code, out, _ = cli(capsys, "predict", "--gpu", "h100", *point)
    assert code == 0 and json.loads(out)["accuracy"]["held_out_of"] is None


def test_predict_tables_say_when_the_band_is_held_out(capsys: pytest.CaptureFixture[str]) -> None:
    k3 = ("predict", "--model", "kimi-k3", "--gpu", "b300", "--gpus", "8", "--tp", "8", "--isl", "2048", "--osl", "64")
    code, out, _ = cli(capsys, *k3)
    assert code == 0 and "80 % of held-out rows within" in out and "measured rows within" not in out
    code, out, _ = cli(capsys, *k3, "--concurrency", "1,2")
    assert code == 0 and "80 % of the held-out predictions like these measured" in out
    code, out, _ = cli(
        capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--concurrency", "1,2"
    )
    assert code == 0 and "80 % of the calibration rows like these" in out and "held-out" not in out


def test_predict_with_other_constants_has_no_band(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.json"
    params.write_text('{"global": {"step_overhead_s": 0.002}}\n')
    code, out, _ = cli(
        capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--params", str(params), "--json"
    )
    assert code == 0
    d = json.loads(out)
    assert d["accuracy"] is None
    assert any("no accuracy measured for these constants" in n for n in d["notes"])


def test_predict_table_and_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(
        capsys,
        "predict",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--gpus",
        "2",
        "--tp",
        "1",
        "--isl",
        "1000",
        "--osl",
        "100",
        "--concurrency",
        "8",
        "--backend",
        "vllm",
    )
    assert code == 0 and "tpot_ms" in out and "one decode step" in out
    assert "in steps shared with other requests' prompts" in " ".join(out.split())
    # vLLM's prefill budget is 8,192 tokens a step: a 1,000-token prompt is one chunk
    assert "one prompt's prefill alone: 1,000 tokens in one step" in out
    one = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--concurrency", "1")
    code, out, _ = cli(capsys, *one)
    assert code == 0 and "one decode step: 1 request at" in out
    code, _, err = cli(capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--backend", "tgi")
    assert code == 2 and "--backend" in err
    code, _, err = cli(
        capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--concurrency", "0"
    )
    assert code == 2 and "--concurrency" in err
    code, _, err = cli(
        capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--concurrency", "1000000"
    )
    assert code == 2 and err.strip() == "error: --concurrency must be between 1 and 65,536 (got 1,000,000)", err
    base = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1")
    code, _, err = cli(capsys, *base, "--accept-length", "2")
    assert (
        code == 2
        and err.strip() == "error: --accept-length needs speculative decoding (--speculative dspark:B or mtp:N)"
    )
    code, _, err = cli(capsys, "predict", "--speculative", "dspark:3", "--accept-length", "nan")
    assert code == 2 and err.strip() == "error: --accept-length must be between 1 and the verify width 4 (got nan)", err
    # a layout that does not fit is one line naming what does not fit, said once
    code, _, err = cli(capsys, "predict", "--model", "kimi-k3", "--gpu", "b300", "--gpus", "3")
    assert code == 2 and err.count("does not fit") == 1 and "per GPU" in err, err


def test_predict_disaggregated(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--isl", "2000", "--osl", "200"]
    code, out, _ = cli(
        capsys,
        *base,
        "--concurrency",
        "16",
        "--prefill-workers",
        "2",
        "--decode-workers",
        "1",
        "--decode-gpus",
        "2",
        "--decode-layout",
        "tp=2",
        "--json",
    )
    assert code == 0, out
    d = json.loads(out)
    assert d["gpus"] == 4 and d["disaggregated"]["decode_layout"]["tp"] == 2
    assert d["disaggregated"]["prefill_workers"] == 2 and d["disaggregated"]["decode_gpus_per_worker"] == 2
    assert d["tpot_split_ms"]["behind_prompts"] == pytest.approx(0.0, abs=1e-3)
    assert any("KV hand-over" in n for n in d["notes"])
    # a decode layout's keys as the flags spell them or as the layout's fields do
    spelled = {}
    for key in ("dp-attention", "dp_attention"):
        flags = ["--decode-workers", "1", "--decode-gpus", "2", "--decode-layout", f"tp=2,{key}=2", "--json"]
        code, out, _ = cli(capsys, *base, *flags)
        assert code == 0, out
        spelled[key] = json.loads(out)["disaggregated"]["decode_layout"]["dp_attention"]
    assert spelled == {"dp-attention": 2, "dp_attention": 2}
    for flags, message in (
        (["--decode-layout", "tp=2"], "need --decode-workers"),
        (["--decode-workers", "1", "--decode-layout", "width=2"], "--decode-layout: 'width=2'"),
        (["--decode-workers", "1", "--decode-layout", "tp=two"], "tp must be an integer"),
        (["--decode-workers", "-1"], "--decode-workers must be 0"),
        (["--decode-workers", "1", "--prefill-workers", "0"], "--prefill-workers must be a positive integer"),
        (
            ["--decode-workers", "1", "--decode-gpus", "2", "--decode-layout", "tp=1"],
            "--decode-gpus is one decode worker's GPUs (1 for",
        ),
    ):
        code, _, err = cli(capsys, *base, *flags)
        assert code == 2 and message in err, (flags, err)


def test_predict_disaggregated_with_the_drafter_and_full_decode_workers(capsys: pytest.CaptureFixture[str]) -> None:
    """K3 on GB300: six TP8 prefill workers and one decode worker of the seed's Balanced + DSPARK
    recipe (TP8 × DCP8, ReplaySSM, ratio 6.28). SGLang runs at most 48 requests with speculative
    decoding by default (seed 000 §2.3), so 256 lanes wait for a decode slot, which the TTFT line
    names; TPOT is a verify pass over the accepted tokens."""
    code, out, _ = cli(
        capsys,
        "predict",
        *("--gpu", "gb300", "--gpus", "8", "--isl", "8400", "--osl", "512", "--concurrency", "256"),
        *("--dcp", "8", "--speculative", "dspark:7", "--replayssm", "--pool-ratio", "6.28"),
        *("--prefill-workers", "6", "--decode-workers", "1", "--accept-length", "2.7"),
    )
    assert code == 0, out
    flat = " ".join(out.split())
    assert "waiting for a decode slot" in flat and "decode workers full: each holds 48 requests at once (of 256" in flat
    assert "÷ 2.7 accepted tokens: no prompt shares the decode workers' steps" in flat
    code, out, _ = cli(
        capsys,
        "predict",
        *("--gpu", "gb300", "--gpus", "8", "--isl", "8400", "--osl", "512", "--concurrency", "256"),
        *("--dcp", "8", "--speculative", "dspark:7", "--replayssm", "--pool-ratio", "6.28"),
        *("--prefill-workers", "6", "--decode-workers", "1", "--json"),
    )
    assert code == 0, out
    d = json.loads(out)
    assert d["accept_length"] == 2.7  # DSPARK's default, as aggregated
    assert d["decode_step"]["batch"] == 48 and d["ttft_split_ms"]["decode_slot"] > 0
    assert d["disaggregated"]["decode_capacity_per_worker"] == 48
    assert d["tpot_ms"] == pytest.approx(d["decode_step"]["ms"] / 2.7, rel=0.01)


def test_the_seeds_rack_layout_is_one_command(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 000 §4.1 layout (b): the GB300 Long-Context prefill recipe (TP1 × PP8) and three decode
    servers of the Balanced + DSPARK recipe (TP8 × DCP8, ReplaySSM, ratio 6.28). The decode
    layout sets its own drafter and pool ratio, and the hand-over carries the drafter's cache
    because the decode workers speculate, though the prefill worker does not."""
    base = ["predict", "--gpu", "gb300", "--gpus", "8", "--tp", "1", "--pp", "8", "--isl", "8400", "--osl", "512"]
    base += ["--concurrency", "64", "--decode-workers", "3", "--json", "--decode-layout"]
    code, out, _ = cli(capsys, *base, "tp=8,pp=1,dcp=8,speculative=dspark:7,replayssm=true,pool-ratio=6.28")
    assert code == 0, out
    d = json.loads(out)
    dec = d["disaggregated"]["decode_layout"]
    assert (dec["dcp"], dec["speculative"], dec["replayssm"]) == (8, "dspark:7", True)
    assert d["layout"]["speculative"] == "none" and d["accept_length"] == 2.7
    code, out, _ = cli(capsys, *base, "tp=8,pp=1,dcp=8,pool-ratio=8.82")
    plain = json.loads(out)
    assert plain["accept_length"] == 1 and plain["tpot_ms"] > d["tpot_ms"]
    hand_over = [n for n in d["notes"] if "KV hand-over" in n] + [n for n in plain["notes"] if "KV hand-over" in n]
    assert hand_over == [
        "KV hand-over 693.4 MB per request over NVLink",
        "KV hand-over 681.6 MB per request over NVLink",
    ]


def test_a_decode_server_keeps_one_state_slot_a_request(capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's PD decode server runs a chunk cache, one KDA state slot per request: the Balanced
    recipe on 8 × B300 (DCP8, ratio 8.82) holds 101 requests with the radix cache's five slots
    (seed 000 §2.3), and as a decode server its state pool no longer binds first."""
    base = ["predict", "--gpu", "b300", "--gpus", "8", "--isl", "8400", "--osl", "512", "--concurrency", "256"]
    base += ["--prefill-workers", "6", "--decode-workers", "1", "--json", "--decode-layout"]
    held = {}
    for extra in ("", ",prefix-cache=extra_buffer"):
        code, out, _ = cli(capsys, *base, "dcp=8,pool-ratio=8.82" + extra)
        assert code == 0, out
        d = json.loads(out)["disaggregated"]
        held[d["decode_layout"]["prefix_cache"]] = d["decode_capacity_per_worker"]
    assert held["extra_buffer"] == 101
    assert held["off"] > 101


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("replayssm=maybe", "error: --decode-layout: replayssm must be true or false (got 'maybe')"),
        ("pool-ratio=x", "error: --decode-layout: pool-ratio must be a number (got 'x')"),
        ("speculative=eagle", "error: --decode-layout: --speculative must be none, dspark:B or mtp:N"),
        ("prefix-cache=lru", "error: --decode-layout: prefix-cache must be one of extra_buffer|"),
        ("tp=3", "error: decode worker (--decode-layout, --decode-gpus 8): --gpus 8 is not a multiple of tp × pp = 3"),
        ("speculative=mtp:2", "error: decode worker (--decode-layout, --decode-gpus 8): --speculative mtp:N needs MTP"),
    ],
)
def test_a_bad_decode_layout_value_is_one_line(layout: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(
        capsys, "predict", "--gpu", "gb300", "--gpus", "8", "--decode-workers", "1", "--decode-layout", layout
    )
    assert code == 2 and message in err, err


def test_evaluate_predicts_scores_and_skips_with_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meas = write(tmp_path / "m.csv", ROWS, COLUMNS)
    out = tmp_path / "pred.csv"
    code, stdout, _ = cli(
        capsys,
        "calibrate",
        "evaluate",
        "--measurements",
        str(meas),
        "--models-dir",
        MODELS,
        "--out",
        str(out),
        "--json",
    )
    assert code == 0
    result = json.loads(stdout)
    assert result["overall"]["rows"] == 7 and result["overall"]["predicted"] == 3
    assert result["overall"]["ttft_median_ape"] is not None
    preds = {r["id"]: r for r in csv.DictReader(out.open())}
    assert list(preds) == [r["id"] for r in ROWS]
    for ok in ("llama8", "oss", "pd"):
        assert float(preds[ok]["predicted_ttft_ms"]) > 0 and float(preds[ok]["predicted_tpot_ms"]) > 0
        assert preds[ok]["skipped_reason"] == ""
    assert "no config" in preds["nomodel"]["skipped_reason"]
    assert "28" in preds["heads"]["skipped_reason"] and "heads" in preds["heads"]["skipped_reason"]
    assert "unknown system" in preds["nogpu"]["skipped_reason"]
    assert "does not fit" in preds["toobig"]["skipped_reason"]
    for bad in ("nomodel", "heads", "nogpu", "toobig"):
        assert preds[bad]["predicted_ttft_ms"] == "" == preds[bad]["predicted_tpot_ms"]
        assert preds[bad]["predicted_ttft_queued_ms"] == "" == preds[bad]["predicted_ttft_lock_step_ms"]
    # where each predicted TTFT goes: its queued part, and the two regimes it lies between
    header = out.read_text().splitlines()[0].split(",")
    assert header[:6] == [
        "id",
        "predicted_ttft_ms",
        "predicted_tpot_ms",
        "predicted_ttft_queued_ms",
        "predicted_ttft_lock_step_ms",
        "predicted_ttft_drifted_ms",
    ]
    for ok in ("llama8", "oss", "pd"):
        ttft, queued = float(preds[ok]["predicted_ttft_ms"]), float(preds[ok]["predicted_ttft_queued_ms"])
        lock, drift = float(preds[ok]["predicted_ttft_lock_step_ms"]), float(preds[ok]["predicted_ttft_drifted_ms"])
        assert 0 <= queued <= ttft
        assert min(lock, drift) - 1e-3 <= ttft <= max(lock, drift) + 1e-3


def test_evaluate_with_set_predicts_every_row_on_the_what_if(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # twice the rows, so that --jobs 2 runs worker processes (fewer than 8 rows run in this one)
    rows = ROWS + [{**r, "id": r["id"] + "_again"} for r in ROWS]
    meas = write(tmp_path / "m.csv", rows, COLUMNS)
    base = ["calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS, "--json"]

    def run(out: str, *extra: str) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
        result = cli_json(capsys, *base, "--out", str(tmp_path / out), *extra)
        return result, {r["id"]: r for r in csv.DictReader((tmp_path / out).open())}

    fitted, before = run("fitted.csv")
    result, after = run("slow.csv", "--set", "compute_scale=0.5")
    _, after_2 = run("slow2.csv", "--set", "compute_scale=0.5", "--jobs", "2")
    assert fitted["set"] == [] and result["set"] == ["compute_scale=0.5"]
    assert after == after_2  # the worker processes get the what-if too
    for ok in ("llama8", "oss", "pd"):  # kernels at half the fitted rate: every first token later
        assert float(after[ok]["predicted_ttft_ms"]) > float(before[ok]["predicted_ttft_ms"])
        assert "compute_scale" in after[ok]["notes"] and "compute_scale" not in before[ok]["notes"]
    # the same row as its predict command (tokenmill calibrate row's) with the --set: the same answer
    from tokenmill.cli.row_command import predict_argv
    from tokenmill.perf.measurements import RowSpec, interpret

    spec = interpret(next(r for r in ROWS if r["id"] == "llama8"), MODELS)
    assert isinstance(spec, RowSpec)
    got = cli_json(capsys, *predict_argv(spec, ["compute_scale=0.5"]), "--json")
    assert got["ttft_ms"] == pytest.approx(float(after["llama8"]["predicted_ttft_ms"]), rel=1e-4)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--set", "bogus=1"), "error: --set takes KEY=VALUE with KEY one of matmul_efficiency"),
        (("--set", "burst_share=2"), "error: --set burst_share must be between 0.02 and 1 (got 2)"),
        (
            ("--set", "compute_scale=0.5", "--accuracy-out", "acc.json"),
            "error: --accuracy-out: the error bands measure the fitted constants, and --set changes them",
        ),
        (("--where", "gpu=b200"), "error: --where: the file has no column 'gpu' (its columns: id,"),
        (("--where", "backend"), "error: --where takes COLUMN=PATTERN, e.g. backend=sglang"),
        (("--where", "backend=tgi"), "error: --where backend=tgi: no row of "),
        (
            ("--where", "backend=vllm", "--accuracy-out", "acc.json"),
            "error: --accuracy-out: the error bands are the whole file's, and --where keeps some rows",
        ),
    ],
)
def test_evaluate_refuses_a_bad_what_if_or_filter_before_it_writes(
    extra: tuple[str, ...],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    meas = write(tmp_path / "m.csv", ROWS, COLUMNS)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(
        capsys, "calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS, "--out", "p.csv", *extra
    )
    assert code == 2 and out == "" and err.startswith(message), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.csv"]


def test_evaluate_by_columns_groups_the_rows_as_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meas = write(tmp_path / "m.csv", ROWS, COLUMNS)
    args = ["calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS, "--out", str(tmp_path / "p")]
    result = cli_json(capsys, *args, "--by", "backend", "--by", "backend, mode", "--by", "concurrency", "--json")
    assert result["by"]["backend"] == result["by_backend"]  # a column the fixed tables group by: the same groups
    from tokenmill.perf.row_prediction import row_fully_specified

    full = [r for r in ROWS if row_fully_specified(r)]
    assert list(result["by"]["backend,mode"]) == sorted({f"{r['backend']} / {r['mode']}" for r in full})
    lanes = sorted({int(re.findall(r"silicon_concurrency=(\d+)", r["silicon_data_source"])[0]) for r in full})
    assert lanes == [8, 16] and list(result["by"]["concurrency"]) == ["8", "16"]  # by value, not as text
    code, out, err = cli(capsys, *args, "--by", "backend,isl")
    assert code == 0, err
    assert "by backend, isl" in out and "TTFT bias" in out


@pytest.mark.parametrize(
    ("by", "message"),
    [
        ("gpu", "error: --by: the file has no column 'gpu' (its columns: id, silicon_data_source, backend,"),
        (" , ", "error: --by needs column names, e.g. backend,isl,osl (got ' , ')"),
    ],
)
def test_evaluate_by_an_unknown_column_is_refused_before_it_runs(
    by: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meas = write(tmp_path / "m.csv", ROWS, COLUMNS)
    out = tmp_path / "p.csv"
    args = ["calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS, "--out", str(out)]
    code, stdout, err = cli(capsys, *args, "--by", by)
    assert code == 2 and stdout == "" and err.startswith(message), err
    assert not out.exists()


def test_evaluate_where_keeps_the_rows_whose_cells_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meas = write(tmp_path / "m.csv", ROWS, COLUMNS)
    out = tmp_path / "p.csv"
    args = ["calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS, "--out", str(out)]
    result = cli_json(capsys, *args, "--where", "backend=vllm", "--where", "model_path=*Llama*", "--json")
    kept = [r["id"] for r in ROWS if r["backend"] == "vllm" and "Llama" in r["model_path"]]
    assert kept and len(kept) < len(ROWS)
    assert [r["id"] for r in csv.DictReader(out.open())] == kept
    assert result["where"] == ["backend=vllm", "model_path=*Llama*"] and result["rows_in_file"] == len(ROWS)
    assert result["overall"]["rows"] + result["assumed_disagg"]["rows"] == len(kept)
    code, text, err = cli(capsys, *args, "--where", "backend=vllm")
    assert code == 0, err
    vllm = sum(r["backend"] == "vllm" for r in ROWS)
    assert f"rows where backend=vllm: {vllm:,} of the file's {len(ROWS):,}" in text


def test_evaluate_writes_error_bands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meas = write(tmp_path / "m.csv", ROWS, COLUMNS)
    acc = tmp_path / "acc.json"
    args = ["calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS]
    fig, svg = tmp_path / "scatter.png", tmp_path / "scatter.svg"
    code, stdout, _ = cli(
        capsys,
        *args,
        *("--out", str(tmp_path / "p.csv"), "--accuracy-out", str(acc)),
        *("--figure", str(fig), "--figure", str(svg), "--json"),
    )
    assert code == 0 and json.loads(stdout)["accuracy_out"] == str(acc)
    assert json.loads(stdout)["figures"] == [str(fig), str(svg)] and fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert svg.read_text().lstrip().startswith("<?xml")
    table = load_accuracy(acc)
    assert table is not None and table.params_sha256 == fingerprint(shipped_path())
    # the three predicted rows: llama8 (h100, vllm), oss (b200, trtllm), pd (h200, sglang)
    assert table.groups["all"].rows == 3
    assert {k for k in table.groups if "/" in k} == {"h100/vllm", "b200/trtllm", "h200/sglang"}
    # the scored models by architecture: a preset of the same model is among them, another is not
    assert set(table.models) == {model_key(load_model(n)) for n in ("llama-3.1-8b", "gpt-oss-120b", "qwen3-32b")}
    assert model_key(load_model("kimi-k3")) not in table.models
    assert table.held_out == {}  # held-out bands come from leave-one-model-out (benchmarks/calibrate_lomo.py)
    # evaluated again with the same constants, a file's held-out bands are kept; with others, dropped
    table.held_out = {"all": table.groups["all"]}
    table.held_out_gpu = {"vllm": table.groups["vllm"]}
    table.held_out_architecture = {"trtllm": table.groups["trtllm"]}
    table.refit_same_lengths = {"sglang": table.groups["sglang"]}
    table.refit_other_lengths = {"all": table.groups["all"]}
    table.meta["refit_command"] = "deployment_refit"
    table.meta["held_out_command"] = "lomo"
    table.meta["held_out_gpu_command"] = "lomo --hold-out gpu"
    table.write(acc)
    rerun = [*args, "--out", str(tmp_path / "p.csv"), "--accuracy-out", str(acc), "--json"]
    assert cli(capsys, *rerun)[0] == 0
    kept = load_accuracy(acc)
    assert kept is not None and kept.held_out["all"] == table.groups["all"] and kept.meta["held_out_command"] == "lomo"
    assert kept.held_out_gpu == {"vllm": table.groups["vllm"]} and kept.meta["held_out_gpu_command"].endswith("gpu")
    assert kept.held_out_architecture == {"trtllm": table.groups["trtllm"]}
    assert kept.refit_same_lengths == {"sglang": table.groups["sglang"]} and kept.meta["refit_command"]
    assert kept.refit_other_lengths == {"all": table.groups["all"]}
    AccuracyTable(
        "other constants",
        table.groups,
        {},
        held_out={"all": table.groups["all"]},
        held_out_gpu=table.held_out_gpu,
        refit_same_lengths=table.refit_same_lengths,
    ).write(acc)
    assert cli(capsys, *rerun)[0] == 0
    dropped = load_accuracy(acc)
    assert dropped is not None and dropped.held_out == {} and dropped.held_out_gpu == {}
    assert dropped.refit_same_lengths == {}
    preds = {r["id"]: r for r in csv.DictReader((tmp_path / "p.csv").open())}
    ape = abs(float(preds["llama8"]["predicted_ttft_ms"]) / 60.0 - 1.0)
    assert table.groups["h100/vllm"].ttft_median_ape == pytest.approx(ape, abs=6e-5)  # 4 decimals in the file
    cols = [c for c in COLUMNS if not c.startswith("silicon_t")]
    write(tmp_path / "n.csv", ROWS[:1], cols)
    args[3] = str(tmp_path / "n.csv")
    code, _, err = cli(capsys, *args, "--out", str(tmp_path / "p.csv"), "--accuracy-out", str(acc))
    assert code == 2 and "--accuracy-out" in err
    code, _, err = cli(capsys, *args, "--out", str(tmp_path / "p.csv"), "--figure", str(tmp_path / "f.svg"))
    assert code == 2 and "--figure" in err and "silicon" in err
    args[3] = str(meas)
    code, _, err = cli(capsys, *args, "--out", str(tmp_path / "q.csv"), "--figure", str(tmp_path / "f.jpg"))
    assert code == 2 and "--figure must end in .png or .svg" in err and not (tmp_path / "q.csv").exists()


def test_evaluate_without_silicon_columns_only_predicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cols = [c for c in COLUMNS if not c.startswith("silicon_t")]
    meas = write(tmp_path / "m.csv", ROWS[:2], cols)
    out = tmp_path / "pred.csv"
    code, stdout, _ = cli(
        capsys, "calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS, "--out", str(out)
    )
    assert code == 0 and "wrote" in stdout and "median" not in stdout
    preds = list(csv.DictReader(out.open()))
    assert len(preds) == 2 and all(p["predicted_tpot_ms"] for p in preds)


def test_evaluate_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(
        capsys,
        "calibrate",
        "evaluate",
        "--measurements",
        str(tmp_path / "none.csv"),
        "--models-dir",
        MODELS,
        "--out",
        str(tmp_path / "p.csv"),
    )
    assert code == 2 and "--measurements" in err
    meas = write(tmp_path / "m.csv", ROWS[:1], COLUMNS)
    code, _, err = cli(
        capsys,
        "calibrate",
        "evaluate",
        "--measurements",
        str(meas),
        "--models-dir",
        str(tmp_path / "nodir"),
        "--out",
        str(tmp_path / "p.csv"),
    )
    assert code == 2 and "--models-dir" in err
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(128, 256)))
    code, _, err = cli(
        capsys,
        "calibrate",
        "evaluate",
        "--measurements",
        str(binary),
        "--models-dir",
        MODELS,
        "--out",
        str(tmp_path / "p2.csv"),
    )
    assert code == 2 and "not a UTF-8 CSV file" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p2.csv").exists()


def test_evaluate_refuses_before_it_writes_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by fuzzing: each of these used to exit non-zero with the predictions written, or to
    overwrite the input."""
    meas = write(tmp_path / "m.csv", ROWS[:1], COLUMNS)
    original = meas.read_text()
    args = ["calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS]
    out = tmp_path / "p.csv"
    code, _, err = cli(capsys, *args, "--out", str(meas))
    assert code == 2 and "--out" in err and "is also --measurements" in err and meas.read_text() == original
    code, _, err = cli(
        capsys,
        *args,
        "--out",
        str(out),
        "--figure",
        str(out.with_suffix(".svg")),
        "--figure",
        str(out.with_suffix(".svg")),
    )
    assert code == 2 and "--figure" in err and not out.exists()
    bad = tmp_path / "acc.json"
    for text in ("{not json", "[1, 2]"):
        bad.write_text(text)
        code, _, err = cli(capsys, *args, "--out", str(out), "--accuracy-out", str(bad))
        assert code == 2 and str(bad) in err and not out.exists(), err
    skipped = write(tmp_path / "s.csv", [{**ROWS[0], "system": "nowhere"}], COLUMNS)
    for flag in ("--accuracy-out", "--figure"):
        target = tmp_path / ("a.json" if flag == "--accuracy-out" else "f.svg")
        code, _, err = cli(capsys, *args[:3], str(skipped), *args[4:], "--out", str(out), flag, str(target))
        assert code == 2 and flag in err and "no fully specified row" in err and not out.exists(), err
        assert not target.exists()
    header = tmp_path / "h.csv"
    header.write_text(",".join(COLUMNS) + "\n")
    code, _, err = cli(capsys, *args[:3], str(header), *args[4:], "--out", str(out))
    assert code == 2 and "no rows" in err and not out.exists()


def test_evaluate_skips_a_row_whose_names_the_os_cannot_look_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 300-character model or system name, or a NUL byte in one, used to stop the whole run
    with a traceback from the file system; each is now that row's skip reason."""
    rows = [
        {**ROWS[0], "id": "long-model", "model_path": "a" * 300},
        {**ROWS[0], "id": "long-system", "system": "b" * 300},
        {**ROWS[0], "id": "nul-system", "system": "x/\x00y"},
        ROWS[0],
    ]
    meas = write(tmp_path / "m.csv", rows, COLUMNS)
    out = tmp_path / "p.csv"
    code, _, err = cli(
        capsys, "calibrate", "evaluate", "--measurements", str(meas), "--models-dir", MODELS, "--out", str(out)
    )
    assert code == 0, err
    preds = {r["id"]: r for r in csv.DictReader(out.open())}
    assert "no config for model_path" in preds["long-model"]["skipped_reason"]
    assert "unknown system" in preds["long-system"]["skipped_reason"]
    assert "unknown system" in preds["nul-system"]["skipped_reason"]
    assert preds["llama8"]["predicted_tpot_ms"] != ""


def test_fit_writes_constants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meas = write(tmp_path / "m.csv", ROWS[:1], COLUMNS)
    out = tmp_path / "params.json"
    code, stdout, _ = cli(
        capsys,
        "calibrate",
        "fit",
        "--measurements",
        str(meas),
        "--models-dir",
        MODELS,
        "--out",
        str(out),
        "--rounds",
        "1",
        "--sweeps",
        "1",
        "--json",
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert "h100" in data["gpus"] and "vllm" in data["backends"] and "calibrate fit" in data["meta"]["command"]
    assert json.loads(stdout)["out"] == str(out)
    assert not any("accuracy.json" in m for m in json.loads(stdout)["log"])  # --out: the shipped pair is untouched


def test_fit_over_the_shipped_constants_says_the_bands_are_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tokenmill.perf.calibrated as calibrated

    shipped = tmp_path / "params.json"
    monkeypatch.setattr(calibrated, "shipped_path", lambda: shipped)
    meas = write(tmp_path / "m.csv", ROWS[:1], COLUMNS)
    args = ["calibrate", "fit", "--measurements", str(meas), "--models-dir", MODELS, "--rounds", "1", "--sweeps", "1"]
    code, stdout, _ = cli(capsys, *args)
    assert code == 0 and shipped.exists()
    assert "accuracy.json" in stdout and "--accuracy-out" in stdout
    code, out, _ = cli(capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--json")
    assert code == 0 and json.loads(out)["accuracy"] is None


def test_predict_in_a_fresh_process_does_not_import_numpy() -> None:
    """`predict` pays every import in its answer time (issue 4: under 1 s); numpy (~0.08 s) is
    only for calibration, which records replays and computes error bands."""
    proc, loaded = modules_after(
        "from tokenmill.cli import main\n"
        "main(['predict', '--model', 'llama-3.1-8b', '--gpu', 'h100', '--gpus', '1', '--isl', '512',"
        " '--osl', '64', '--concurrency', '4', '--json'])",
        ("numpy",),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tpot_ms"] > 0
    assert "numpy" not in loaded, "numpy was imported on predict's path"


SMALL = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--isl", "512", "--osl", "64")


def test_several_concurrencies_give_the_curve_of_the_single_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *SMALL, "--concurrency", "16,1,4,16", "--json")
    assert code == 0 and err == ""  # no progress bar with --json
    points = json.loads(out)["points"]
    assert [p["concurrency"] for p in points] == [1, 4, 16]  # ascending, each once
    for p in points:
        code, one, _ = cli(capsys, *SMALL, "--concurrency", str(p["concurrency"]), "--json")
        single = json.loads(one)
        assert code == 0
        for key in ("ttft_ms", "tpot_ms", "output_throughput_per_gpu", "requests_per_s"):
            assert p[key] == single[key], key
    # more lanes: more throughput per GPU, slower for each user
    per_gpu = [p["output_throughput_per_gpu"] for p in points]
    tpot = [p["tpot_ms"] for p in points]
    assert per_gpu == sorted(per_gpu) and tpot == sorted(tpot)

    figures = [tmp_path / "curve.png", tmp_path / "curve.svg"]
    code, out, _ = cli(
        capsys, *SMALL, "--concurrency", "1,4,16", "--figure", str(figures[0]), "--figure", str(figures[1])
    )
    assert code == 0
    assert figures[0].read_bytes().startswith(b"\x89PNG") and b"<svg" in figures[1].read_bytes()
    lines = out.splitlines()
    for level in ("1", "4", "16"):
        assert any(line.split("│")[0].strip() == level for line in lines if "│" in line), level
    assert "measured" in out and "their predicted TTFT" in " ".join(out.split())
    assert f"wrote {figures[0]}" in out


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1,x", "error: --concurrency must be a comma-separated list of integers (got '1,x')"),
        ("1.5", "error: --concurrency must be a comma-separated list of integers (got '1.5')"),
        ("0,4", "error: --concurrency values must be finite numbers > 0 (got '0,4')"),
        ("4,100000", "error: --concurrency must be between 1 and 65,536 (got 100,000)"),
        ("", "error: --concurrency needs a number of requests in flight, or several: 1,4,16 (got '')"),
    ],
)
def test_a_bad_concurrency_list_is_one_line_naming_the_flag(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *SMALL, "--concurrency", value)
    assert code == 2 and out == "" and err.strip() == message


def test_a_curve_figure_with_a_wrong_suffix_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *SMALL, "--concurrency", "1,4", "--figure", str(tmp_path / "c.jpg"))
    assert code == 2 and out == "" and "--figure must end in .png or .svg" in err
    assert not list(tmp_path.iterdir())


def test_a_curve_of_one_token_answers_has_no_speed_per_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """OSL 1: there is no second token, so no TPOT (bench_serving defines it only for
    output_len > 1) and no tokens/s per user: the table says "—" for both, the JSON null, and the
    figure leaves those points off its interactivity axis (was a ZeroDivisionError; until
    2026-12-04 the TPOT read 0.00, beside a TPOT line summing a decode step to it)."""
    base = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--isl", "512", "--osl", "1")
    figure = tmp_path / "c.png"
    code, out, err = cli(capsys, *base, "--concurrency", "1,4", "--figure", str(figure))
    assert code == 0, err
    rows = [line.split("│") for line in out.splitlines() if line.count("│") == 8]
    assert [r[0].strip() for r in rows] == ["1", "4"] and all(r[3].strip() == r[4].strip() == "—" for r in rows)
    assert figure.read_bytes().startswith(b"\x89PNG")
    code, out, err = cli(capsys, *base, "--concurrency", "4", "--json", "--slo-tpot-ms", "1")
    assert code == 0, err
    point = json.loads(out)
    assert point["tpot_ms"] is None and point["accuracy"]["tpot_ms_range_80"] is None
    assert point["ttft_ms"] > 0 and point["meets_slo"]  # no TPOT to hold to the bound
    code, out, err = cli(capsys, *base, "--concurrency", "4")
    assert code == 0, err
    assert "TPOT: none, the answer is one token" in " ".join(out.split())
    assert "TPOT 0.00" not in out


K3_FRESH = ("predict", "--pool-ratio", "1.1", "--isl", "8400", "--osl", "512")


def test_compared_layouts_are_each_predicted_as_alone(capsys: pytest.CaptureFixture[str]) -> None:
    drafter = "dcp=8,pool-ratio=6.28,speculative=dspark:7,replayssm=true"
    code, out, err = cli(
        capsys, *K3_FRESH, "--concurrency", "1,16", "--compare", "dcp=8,pool-ratio=8.82", "--compare", drafter,
        "--label", "low-latency", "--label", "balanced", "--accept-length", "2.7", "--json",
    )  # fmt: skip
    assert code == 0, err
    layouts = json.loads(out)["layouts"]
    # unlabelled layouts are named by their description
    assert [x["name"] for x in layouts] == ["low-latency", "balanced", "TP8 DCP8 dspark:7+replayssm"]
    alone = {
        "balanced": ("--dcp", "8", "--pool-ratio", "8.82"),
        "TP8 DCP8 dspark:7+replayssm": (
            "--dcp",
            "8",
            "--pool-ratio",
            "6.28",
            "--speculative",
            "dspark:7",
            "--replayssm",
        ),
    }
    for entry in layouts[1:]:
        for p in entry["points"]:
            code, one, _ = cli(
                capsys, *K3_FRESH[:1], *K3_FRESH[3:], *alone[entry["name"]], "--concurrency", str(p["concurrency"]),
                "--json",
            )  # fmt: skip
            assert code == 0
            single = json.loads(one)
            assert (p["ttft_ms"], p["tpot_ms"], p["layout"]) == (single["ttft_ms"], single["tpot_ms"], single["layout"])
    # the drafter speeds one request's stream; the first token is the same prefill in all three
    # (seed 000 §2.3: "about 0.44 seconds in all three"), the drafter's recipe also running the
    # drafter over the prompt (a few ms), each then a step lag later (first_token_steps engine
    # steps: the drafter's verify step is the longest)
    one = [x["points"][0] for x in layouts]
    assert one[2]["tpot_ms"] < one[0]["tpot_ms"] < one[1]["tpot_ms"]
    engine = [p["ttft_ms"] - p["ttft_split_ms"]["step_lag"] for p in one]
    assert engine[0] == pytest.approx(engine[1], abs=2e-3)
    assert engine[0] < engine[2] < 1.02 * engine[0]
    steps = [p["ttft_split_ms"]["step_lag"] / (p["tpot_ms"] * p["accept_length"]) for p in one]
    assert steps == pytest.approx([one[0]["params"]["first_token_steps"]] * 3, rel=1e-3)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--label", "a", "--label", "b"), "error: 2 --label values for 1 layout(s): the base and one per --compare"),
        (("--compare", "dcp=8", "--label", "x", "--label", "x"), "error: two layouts share the name 'x': give each"),
        (("--compare", "gpus=4,tp=4"), "error: layout 'TP4': does not fit"),
        (("--compare", "decode-gpus=8"), "error: --compare 'decode-gpus=8': prefill-workers, decode-gpus, decode-gpu"),
        (("--compare", "decode-workers=-1"), "error: --compare decode-workers must be an integer ≥ 0 (got '-1'"),
        (("--compare", "decode-workers=1,decode-tp=two"), "error: --compare 'decode-workers=1,decode-tp=two': tp must"),
        (("--compare", "decode-workers=1,decode-width=8"), "error: --compare 'decode-workers=1,decode-width=8': 'wi"),
        (("--compare", "gpus=16,decode-workers=1"), "error: layout '1 prefill × TP8 (16 GPUs) + 1 decode × TP16"),
        (("--compare", "dcp=8", "--accept-length", "2"), "error: --accept-length needs speculative decoding"),
        (("--compare", "width=8"), "error: --compare item 'width=8' must be KEY=VALUE with KEY one of"),
        (("--compare", "weight-format=int4"), "error: --compare 'weight-format=int4': --weight-format must be one"),
    ],
)
def test_a_bad_comparison_is_one_line(extra: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *K3_FRESH, *extra)
    assert code == 2 and out == "" and err.startswith(message) and err.count("\n") == 1, err


def test_compared_layouts_over_other_gpu_counts_show_them(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--isl", "512", "--osl", "64")
    code, out, err = cli(capsys, *base, "--concurrency", "1,8", "--compare", "gpus=2,tp=2")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "concurrency" in line)
    assert [c.strip() for c in header.split("┃")][:3] == ["layout", "GPUs", "concurrency"]
    rows = [[c.strip() for c in line.split("│")] for line in out.splitlines() if line.count("│") == 10]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("TP1", "1", "1"),
        ("TP1", "1", "8"),
        ("TP2", "2", "1"),
        ("TP2", "2", "8"),
    ]
    assert "on h100 (sglang)" in out  # the title names no GPU count the layouts do not share


def test_the_table_says_where_the_first_token_goes(capsys: pytest.CaptureFixture[str]) -> None:
    """One line splits the TTFT; at many lanes a second gives the two closed-loop regimes behind
    it (lock step and drifted apart), which differ there; at one lane they agree and it is left
    out."""
    base = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--isl", "4000", "--osl", "100")
    code, out, _ = cli(capsys, *base, "--concurrency", "64")
    text = " ".join(out.split())
    assert code == 0
    assert "ms front end +" in text and "ms queued for admission +" in text and "ms admission to first token" in text
    assert "lanes in lock step: TTFT" in text and "(sglang's fitted burst share" in text
    # 64 lanes of 4,000-token prompts fill 64 × 4,000 / 8,192 (an H100's SGLang chunk) steps a wave
    assert "a wave's prompts fill 31.25 prefill steps, jitter spreads its arrivals over" in text
    code, js, _ = cli(capsys, *base, "--concurrency", "64", "--json")
    d = json.loads(js)
    assert d["ttft_split_ms"]["queued"] > 0 and d["ttft_regimes_ms"]["lock_step"] > d["ttft_regimes_ms"]["drifted"]
    assert f"TTFT {d['ttft_ms']:,.2f} ms = {d['ttft_split_ms']['front_end']:,.2f} ms front end" in text
    code, out, _ = cli(capsys, *base, "--concurrency", "1")
    text = " ".join(out.split())
    assert code == 0 and "0.00 ms queued for admission" in text and "lanes in lock step" not in text
    # a curve gives the queued part of each point's TTFT as a column
    code, out, _ = cli(capsys, *base, "--concurrency", "1,64")
    assert code == 0 and "of it queued ms" in out
    rows = [[c.strip() for c in line.split("│")] for line in out.splitlines() if "│" in line]
    assert rows[-1][0] == "64" and rows[-1][2] == f"{d['ttft_split_ms']['queued']:,.1f}"


def test_a_target_marks_the_points_and_names_the_best_within_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--isl", "4000", "--osl", "200")
    levels = ("--concurrency", "1,4,16,64,256")
    code, out, _ = cli(capsys, *base, *levels, "--json")
    plain = json.loads(out)["points"]
    assert code == 0 and all("meets_slo" not in p for p in plain)  # no target, no marks
    # a target between the points' own figures, so some meet it and some do not
    ttft_cap = sorted(p["ttft_ms"] for p in plain)[2] * 1.001
    tpot_cap = sorted(p["tpot_ms"] for p in plain)[3] * 1.001
    target = ("--slo-ttft-ms", str(ttft_cap), "--slo-tpot-ms", str(tpot_cap))
    code, out, _ = cli(capsys, *base, *levels, *target, "--json")
    d = json.loads(out)
    assert code == 0 and d["slo"] == {"ttft_ms": ttft_cap, "tpot_ms": tpot_cap}
    meets = [p["ttft_ms"] <= ttft_cap and p["tpot_ms"] <= tpot_cap for p in plain]
    assert [p["meets_slo"] for p in d["points"]] == meets and any(meets) and not all(meets)
    best = max((p for p, ok in zip(plain, meets, strict=True) if ok), key=lambda p: p["output_throughput_per_gpu"])
    assert d["best_under_slo"]["concurrency"] == best["concurrency"]
    # the table: a column of the same marks, and a line naming the best point
    code, out, _ = cli(capsys, *base, *levels, *target)
    rows = [[c.strip() for c in line.split("│")] for line in out.splitlines() if "│" in line]
    assert code == 0 and [r[-1] for r in rows] == ["yes" if ok else "no" for ok in meets]
    line = f"within the target (mean TTFT ≤ {ttft_cap:,g} ms and TPOT ≤ {tpot_cap:,g} ms): concurrency "
    assert line + f"{best['concurrency']:,}," in " ".join(out.split())
    # compared layouts: each names its own best point
    code, out, _ = cli(capsys, *base, *levels, *target, "--compare", "kv-cache-dtype=fp8_e4m3", "--json")
    layouts = json.loads(out)["layouts"]
    assert code == 0 and layouts[0]["best_under_slo"] == d["best_under_slo"]
    for entry in layouts:
        ok = [p for p in entry["points"] if p["ttft_ms"] <= ttft_cap and p["tpot_ms"] <= tpot_cap]
        top = max(ok, key=lambda p: p["output_throughput_per_gpu"])["concurrency"] if ok else None
        assert (entry["best_under_slo"] or {}).get("concurrency") == top
    # the figure draws the bounds
    svg = tmp_path / "curve.svg"
    code, _, _ = cli(capsys, *base, *levels, *target, "--figure", str(svg))
    text = svg.read_text()
    assert code == 0 and f"target: TPOT ≤ {tpot_cap:g} ms" in text and f"target: TTFT ≤ {ttft_cap / 1e3:g} s" in text
    # one bound alone; one that nothing meets; one point
    code, out, _ = cli(capsys, *base, *levels, "--slo-tpot-ms", "0.001", "--json")
    d = json.loads(out)
    assert code == 0 and d["best_under_slo"] is None and d["slo"]["ttft_ms"] is None
    code, out, _ = cli(capsys, *base, *levels, "--slo-tpot-ms", "0.001")
    assert code == 0 and "no point meets the target (mean TPOT ≤ 0.001 ms)" in " ".join(out.split())
    code, out, _ = cli(capsys, *base, "--slo-ttft-ms", "1e9")
    assert code == 0 and "target mean TTFT ≤ 1e+09 ms: met" in " ".join(out.split())


@pytest.mark.parametrize(("flag", "value"), [("--slo-ttft-ms", "0"), ("--slo-tpot-ms", "-2"), ("--slo-tpot-ms", "inf")])
def test_a_bad_target_is_one_line(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *SMALL, flag, value)
    assert (
        code == 2
        and out == ""
        and err.strip() == (f"error: {flag} must be a finite number of milliseconds > 0 (got {float(value)})")
    ), err


def test_disaggregated_layouts_compare_with_aggregated_ones_each_as_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """``--compare`` takes prefill-workers, decode-workers, decode-gpus and decode-KEY: the seeds'
    question (does splitting prefill from decoding pay at the same GPUs?) as one command. Each
    compared point is the same layout predicted alone; an item inherits the base's workers and
    decode sizes, and ``decode-workers=0`` makes it aggregated."""
    common = ("predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--isl", "2000", "--osl", "200")
    levels = ("--concurrency", "1,16")
    split = "gpus=1,tp=1,prefill-workers=1,decode-workers=1"
    code, out, err = cli(capsys, *common, "--gpus", "2", "--tp", "2", *levels, "--compare", split, "--json")
    assert code == 0, err
    agg, dis = json.loads(out)["layouts"]
    assert dis["name"] == "1 prefill × TP1 (1 GPUs) + 1 decode × TP1 (1 GPUs)"
    assert agg["points"][0]["gpus"] == dis["points"][0]["gpus"] == 2  # the same GPUs, split or not
    alone = {
        agg["name"]: ("--gpus", "2", "--tp", "2"),
        dis["name"]: ("--gpus", "1", "--tp", "1", "--decode-workers", "1"),
    }
    for entry in (agg, dis):
        for p in entry["points"]:
            code, one, _ = cli(capsys, *common, *alone[entry["name"]], "--concurrency", str(p["concurrency"]), "--json")
            single = json.loads(one)
            assert code == 0
            for key in ("ttft_ms", "tpot_ms", "output_throughput_per_gpu", "disaggregated"):
                assert p[key] == single[key], (entry["name"], key)
    assert dis["points"][1]["tpot_split_ms"]["behind_prompts"] == 0  # the decode worker never stops for a prompt
    # a disaggregated base: an item inherits its workers and decode sizes, or drops them
    base = (*common, "--gpus", "1", "--decode-workers", "2", "--decode-gpus", "2", "--decode-layout", "tp=2")
    code, out, err = cli(capsys, *base, "--compare", "decode-workers=1", "--compare", "decode-workers=0", "--json")
    assert code == 0, err
    first, fewer, aggregated = (entry["points"][0] for entry in json.loads(out)["layouts"])
    for point, flags in (
        (first, ("--decode-workers", "2", "--decode-gpus", "2", "--decode-layout", "tp=2")),
        (fewer, ("--decode-workers", "1", "--decode-gpus", "2", "--decode-layout", "tp=2")),
        (aggregated, ()),
    ):
        code, one, _ = cli(capsys, *common, "--gpus", "1", *flags, "--json")
        single = json.loads(one)
        assert code == 0 and (point["ttft_ms"], point["tpot_ms"], point["gpus"], point["disaggregated"]) == (
            single["ttft_ms"],
            single["tpot_ms"],
            single["gpus"],
            single["disaggregated"],
        )
    assert (first["gpus"], fewer["gpus"], aggregated["gpus"]) == (5, 3, 1)


# --- a calibration row, predicted by the command ------------------------------------------------

# (row cells, the preset and the flags that name the same deployment): the formats of the file's
# rows, each a checkpoint served in a format it is not stored in but the first
CALIBRATION_ROWS = [
    (
        {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "backend": "vllm"},
        ("--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--gpus", "1"),
    ),
    (
        {
            "model_path": "meta-llama/Llama-3.1-70B",
            "system": "b200_sxm",
            "backend": "trtllm",
            "precision": "fp8",
            "gemm_quant_mode": "fp8",
            "moe_quant_mode": "fp8",
            "isl": "1024",
            "osl": "8192",
            "silicon_data_source": "x; silicon_concurrency=4",
        },
        ("--model", "llama-3.1-70b", "--gpu", "b200_sxm", "--gpus", "1", "--weight-format", "fp8"),
    ),
    (
        {
            "model_path": "meta-llama/Llama-3.1-70B",
            "system": "b200_sxm",
            "backend": "trtllm",
            "precision": "fp4",
            "gemm_quant_mode": "nvfp4",
            "moe_quant_mode": "nvfp4",
            "tp_size": "2",
            "moe_tp_size": "2",
        },
        ("--model", "llama-3.1-70b", "--gpu", "b200_sxm", "--gpus", "2", "--weight-format", "nvfp4"),
    ),
    (
        {
            "model_path": "meta-llama/Llama-3.1-8B-Instruct",
            "system": "h200_sxm",
            "backend": "sglang",
            "precision": "fp8",
            "gemm_quant_mode": "fp8_block",
            "moe_quant_mode": "fp8_block",
            "silicon_data_source": "x; silicon_concurrency=16",
        },
        ("--model", "llama-3.1-8b", "--gpu", "h200_sxm", "--gpus", "1", "--weight-format", "fp8_block"),
    ),
    (
        {
            "model_path": "deepseek-ai/DeepSeek-R1",
            "system": "b200_sxm",
            "backend": "trtllm",
            "precision": "fp4",
            "gemm_quant_mode": "nvfp4",
            "moe_quant_mode": "nvfp4",
            "tp_size": "8",
            "moe_tp_size": "8",
            "isl": "8192",
            "osl": "1024",
            "silicon_data_source": "x; silicon_concurrency=32",
        },
        ("--model", "deepseek-r1", "--gpu", "b200_sxm", "--gpus", "8", "--weight-format", "nvfp4"),
    ),
]


@pytest.mark.parametrize(
    ("cells", "flags"), CALIBRATION_ROWS, ids=[c.get("gemm_quant_mode") or "16-bit" for c, _ in CALIBRATION_ROWS]
)
def test_predict_with_a_rows_flags_gives_what_evaluate_gives_that_row(
    cells: dict[str, str], flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    # what `calibrate evaluate` predicts for a row is what `predict` answers for the deployment it
    # records: the engines' memory share, no prefix cache, an FP8 KV cache for FP8/FP4 rows
    from tests.perf.rows import row
    from tokenmill.perf.calibrated import load_table
    from tokenmill.perf.row_prediction import predict_row

    measured = row(**cells)
    expected = predict_row(measured, MODELS, load_table())
    assert expected.predicted, expected.skipped_reason
    kv = "fp8_e4m3" if measured["precision"] else "bf16"
    code, out, err = cli(
        capsys,
        "predict",
        *flags,
        "--backend",
        measured["backend"],
        "--isl",
        measured["isl"],
        "--osl",
        measured["osl"],
        "--concurrency",
        measured["silicon_data_source"].rpartition("=")[2],
        "--kv-cache-dtype",
        kv,
        "--mem-fraction-static",
        "0.95",
        "--prefix-cache",
        "off",
        "--json",
    )
    assert code == 0, err
    got = json.loads(out)
    assert got["ttft_ms"] == pytest.approx(expected.ttft_ms, rel=1e-4)
    assert got["tpot_ms"] == pytest.approx(expected.tpot_ms, rel=1e-4)
    if "--weight-format" in flags:
        assert any(note.startswith(("weights sized as", "nvfp4:", "fp8:", "fp8_block:")) for note in got["notes"])


def test_predict_refuses_an_unknown_weight_format_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(
        capsys, "predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--weight-format", "int4"
    )
    assert (code, out) == (2, "")
    assert err.strip() == "error: --weight-format must be one of bf16|fp16|fp8|fp8_block|nvfp4 (got 'int4')"


def test_a_compared_weight_format_is_predicted_as_that_format_alone(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("predict", "--model", "llama-3.1-70b", "--gpu", "b200", "--gpus", "2", "--backend", "trtllm")
    base += ("--isl", "1024", "--osl", "256", "--kv-cache-dtype", "fp8_e4m3")
    code, out, err = cli(
        capsys, *base, "--concurrency", "1,16", "--weight-format", "fp8", "--compare", "weight-format=nvfp4", "--json"
    )
    assert code == 0, err
    got = json.loads(out)
    layouts = got["layouts"]
    # named by their layouts and formats
    assert [x["name"] for x in layouts] == ["TP2 fp8-KV fp8-weights", "TP2 fp8-KV nvfp4-weights"]
    for entry, fmt in zip(layouts, ("fp8", "nvfp4"), strict=True):
        for p in entry["points"]:
            code, one, _ = cli(capsys, *base, "--weight-format", fmt, "--concurrency", str(p["concurrency"]), "--json")
            assert code == 0
            single = json.loads(one)
            assert (p["ttft_ms"], p["tpot_ms"]) == (single["ttft_ms"], single["tpot_ms"])
    # 4-bit weights stream in about half the time of 8-bit ones: one request decodes faster
    assert layouts[1]["points"][0]["tpot_ms"] < 0.85 * layouts[0]["points"][0]["tpot_ms"]
    # the formats differ, so each deployment's note names it
    notes = layouts[0]["points"][0]["notes"]
    assert any(n.startswith("TP2 fp8-KV nvfp4-weights: weights sized as nvfp4") for n in notes)
    assert any(n.startswith("TP2 fp8-KV fp8-weights: weights sized as fp8") for n in notes)


def test_a_compared_gpu_is_predicted_as_that_gpu_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """`--compare gpu=a100`: Llama-3.1-70B TP4 on H100 against A100 (2.04 against 3.35 TB/s, 312
    against 989 BF16 TFLOP/s) and H20 (4.0 TB/s, 148 TFLOP/s): each layout as `predict --gpu`
    gives it alone, each with its GPU's constants and error band, the A100 slower in both first
    token and decode, the H20's first token the slowest of the three."""
    base = ("predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "4", "--backend", "vllm")
    base += ("--isl", "1024", "--osl", "256")
    got = cli_json(capsys, *base, "--concurrency", "1,16", "--compare", "gpu=a100", "--compare", "gpu=h20", "--json")
    layouts = {x["name"]: x["points"] for x in got["layouts"]}
    assert list(layouts) == ["TP4 on h100", "TP4 on a100", "TP4 on h20"]
    for name, points in layouts.items():
        gpu = name.rsplit(" ", 1)[1]
        for p in points:
            alone = cli_json(capsys, *base[:4], gpu, *base[5:], "--concurrency", str(p["concurrency"]), "--json")
            assert (p["gpu"], p["ttft_ms"], p["tpot_ms"]) == (gpu, alone["ttft_ms"], alone["tpot_ms"])
            assert p["accuracy"] == alone["accuracy"]
    h100, a100, h20 = (layouts[f"TP4 on {g}"][0] for g in ("h100", "a100", "h20"))
    assert a100["tpot_ms"] > 1.3 * h100["tpot_ms"] and a100["ttft_ms"] > h100["ttft_ms"]
    assert h20["ttft_ms"] > max(a100["ttft_ms"], h100["ttft_ms"])
    assert (h100["accuracy"]["held_out_of"], a100["accuracy"]["held_out_of"]) == (None, "architecture")
    assert h20["accuracy"]["held_out_of"] == "gpu"


@pytest.mark.parametrize(
    ("compare", "message"),
    [
        ("gpu=a10g", "error: --compare 'gpu=a10g': gpu: unknown GPU 'a10g'"),
        ("gpu=mi300x", "error: --compare 'TP4 on mi300x': --backend trtllm runs on nvidia GPUs only"),
        ("gpu=l40s,gpus=2,tp=2", "error: layout 'TP2 on l40s': does not fit"),
    ],
)
def test_a_compared_gpu_that_cannot_run_it_is_one_line(
    capsys: pytest.CaptureFixture[str], compare: str, message: str
) -> None:
    argv = ("predict", "--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "4", "--backend", "trtllm")
    code, out, err = cli(capsys, *argv, "--compare", compare)
    assert code == 2 and out == "" and err.startswith(message) and err.count("\n") == 1, err


DISAGG = ("predict", "--model", "llama-3.1-70b", "--gpu", "h200", "--gpus", "4", "--backend", "sglang")
DISAGG += ("--isl", "8192", "--osl", "1024", "--decode-workers", "1")


def test_decode_workers_on_another_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    """`--decode-gpu h20`: prefill on H200, decode on H20. The decode GPU named as the prefill
    GPU changes nothing; at one lane the mixed deployment decodes as the all-H20 one does and
    prefills as the all-H200 one does (H20's 148 against 989 BF16 TFLOP/s: a first token several
    times later on H20 prefill workers); no error band (no row of the file mixes GPUs), and the
    notes give the H20's constants."""
    one = ("--concurrency", "1", "--json")
    h200 = cli_json(capsys, *DISAGG, *one)
    assert cli_json(capsys, *DISAGG, "--decode-gpu", "H200_SXM", *one)["ttft_ms"] == h200["ttft_ms"]
    mixed = cli_json(capsys, *DISAGG, "--decode-gpu", "h20", *one)
    h20 = cli_json(capsys, *DISAGG[:4], "h20", *DISAGG[5:], *one)
    assert mixed["disaggregated"]["decode_gpu"] == "h20" and h200["disaggregated"]["decode_gpu"] == "h200"
    assert mixed["tpot_ms"] == pytest.approx(h20["tpot_ms"], rel=1e-9)
    assert mixed["ttft_ms"] < 0.5 * h20["ttft_ms"]
    assert mixed["ttft_ms"] == pytest.approx(h200["ttft_ms"], rel=0.02)  # the step lag follows the decode step
    assert mixed["accuracy"] is None and h200["accuracy"] is not None
    assert any(n.startswith("no error band: the calibration file holds no deployment whose") for n in mixed["notes"])
    assert any(n.startswith("decode workers on h20: GPU h20: not calibrated") for n in mixed["notes"])
    both = cli_json(capsys, *DISAGG, "--concurrency", "1", "--compare", "decode-gpu=h20", "--json")["layouts"]
    assert both[1]["name"] == "1 prefill × TP4 (4 GPUs) + 1 decode × TP4 (4 GPUs on h20)"
    assert both[1]["points"][0]["tpot_ms"] == mixed["tpot_ms"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--decode-gpu", "a10g"), "error: --decode-gpu: unknown GPU 'a10g'"),
        (("--compare", "decode-gpu=a10g"), "error: --compare 'decode-gpu=a10g': decode-gpu: unknown GPU 'a10g'"),
        (("--decode-workers", "0", "--decode-gpu", "h20"), "error: --prefill-workers, --decode-gpus, --decode-gpu"),
        (("--backend", "trtllm", "--decode-gpu", "mi300x"), "error: --backend trtllm runs on nvidia GPUs only"),
    ],
)
def test_a_decode_gpu_that_cannot_serve_is_one_line(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    code, out, err = cli(capsys, *DISAGG, *extra)
    assert code == 2 and out == "" and err.startswith(message) and err.count("\n") == 1, err


def test_sweep_has_no_weight_format_to_compare(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("sweep", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--rates", "1")
    code, out, err = cli(capsys, *argv, "--compare", "weight-format=fp8")
    assert code == 2 and out == "" and err.startswith("error: --compare item 'weight-format=fp8' must be KEY=VALUE")


def test_predict_set_is_a_what_if_on_the_fitted_constants(capsys: pytest.CaptureFixture[str]) -> None:
    """``--set collective_latency_s=5e-6``: K3's TP8 decode step runs 2 all-reduces in each of its 93
    layers, so its collectives lose 186 × (fitted latency − 5 µs) and nothing else moves; the
    error band, which measures the fitted constants, is not shown, and a note says what changed."""
    point = ("predict", "--isl", "8400", "--osl", "512", "--concurrency", "1", "--json")
    fitted = cli_json(capsys, *point)
    what_if = cli_json(capsys, *point, "--set", "collective_latency_s=5e-6")
    latency = fitted["params"]["collective_latency_s"]
    before, after = fitted["decode_step"]["breakdown_ms"], what_if["decode_step"]["breakdown_ms"]
    assert before["collectives"] - after["collectives"] == pytest.approx(186 * (latency - 5e-6) * 1e3, abs=2e-4)
    assert before["dense_linear"] == after["dense_linear"] and before["overhead"] == after["overhead"]
    assert what_if["params"]["collective_latency_s"] == 5e-6
    assert fitted["accuracy"] is not None and what_if["accuracy"] is None
    assert any("collective_latency_s" in n and "what-if" in n for n in what_if["notes"])
    code, _, err = cli(capsys, "predict", "--set", "collective_latency_s=5")
    assert code == 2 and "--set collective_latency_s must be between" in err
