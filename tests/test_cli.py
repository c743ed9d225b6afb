"""``tokenmill`` CLI, run in-process through ``tokenmill.cli.main`` (and once as a subprocess):
the ``plan --json`` contract, the ratio calculator, one-line errors with exit code 2, search,
catalog listings, figures and determinism."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import cli, modules_after
from tokenmill.cli import main
from tokenmill.spec import PRESETS

REPO = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop anything printed before
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


# --- plan --json ---------------------------------------------------------------------------

REQUIRED_KEYS = {
    "fits",
    "reason",
    "checkpoint_bytes",
    "total_params",
    "active_params",
    "weights_per_gpu_bytes",
    "weights_by_kind_bytes",
    "state_slot_bytes",
    "state_slots_per_request",
    "kv_bytes_per_token",
    "pool_ratio",
    "state_slots",
    "max_total_tokens",
    "max_running_requests",
    "binding_pool",
    "crossing_point_tokens",
    "launch_command",
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def test_plan_json_is_one_object_with_the_contract_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--json")
    assert code == 0
    assert err == ""
    data = json.loads(out)  # the whole stdout is one JSON document
    assert isinstance(data, dict)
    assert data.keys() >= REQUIRED_KEYS
    for key, value in data.items():
        if key.endswith("_bytes") and key != "kv_bytes_per_token":
            if isinstance(value, dict):
                assert value and all(_is_int(v) for v in value.values()), key
            else:
                assert _is_int(value), f"{key} = {value!r} is not an integer"
    assert isinstance(data["kv_bytes_per_token"], int | float)
    for key in (
        "total_params",
        "active_params",
        "state_slots",
        "max_total_tokens",
        "max_running_requests",
        "state_slots_per_request",
    ):
        assert _is_int(data[key]), key
    assert isinstance(data["fits"], bool)
    assert isinstance(data["launch_command"], str)


def test_plan_json_default_is_seeds_k3_on_8_b300(capsys: pytest.CaptureFixture[str]) -> None:
    """Defaults: kimi-k3, 8 × B300, TP8, extra_buffer. Hand values from the config:
    state slot = 69 × (96/8 · 128 · 128 · 4 B + 3 · (3 · 96 · 128)/8 · 2 B) = 69 × 814,080 = 56,171,520 B
    (53.6 MiB, seed §1.2); KV per token = 24 MLA layers × 576 × 2 B = 27,648 B;
    crossing = 5 × 56,171,520 / 27,648 = 10,158.3 tokens (seed: "about 10,160")."""
    d = run_json(capsys, "plan", "--json")
    assert d["fits"] is True
    assert d["reason"] is None
    assert d["state_slot_bytes"] == 56_171_520
    assert d["state_slots_per_request"] == 5
    assert d["kv_bytes_per_token"] == 27_648
    assert d["crossing_point_tokens"] == pytest.approx(10_158.3, abs=0.1)
    assert d["checkpoint_bytes"] == pytest.approx(1.56e12, rel=0.005)
    assert d["weights_per_gpu_bytes"] == sum(d["weights_by_kind_bytes"].values())
    assert d["weights_per_gpu_bytes"] / 1024**3 == pytest.approx(192, rel=0.01)
    assert d["pool_ratio"] == pytest.approx(0.9)  # SGLang's default without --pool-ratio
    assert d["binding_pool"] in ("state", "kv", "user")


def test_plan_json_low_latency_seed_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed §2.2: at ratio 1.1 the server reported 303 state blocks, 561,728 tokens, 60 requests."""
    d = run_json(capsys, "plan", "--pool-ratio", "1.1", "--json")
    assert d["pool_ratio"] == pytest.approx(1.1)
    assert d["state_slots"] == pytest.approx(303, rel=0.01)
    assert d["max_total_tokens"] == pytest.approx(561_728, rel=0.01)
    assert d["max_running_requests"] == 60
    assert d["binding_pool"] == "state"
    assert "--mamba-full-memory-ratio 1.1" in d["launch_command"]


def test_plan_json_infeasible_is_an_answer(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed §2.1: 4 GPUs per copy would need 372 GiB each."""
    code, out, err = run(capsys, "plan", "--gpus", "4", "--tp", "4", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["fits"] is False
    assert "weights need" in d["reason"]
    assert "GiB" in d["reason"]
    assert d["weights_per_gpu_bytes"] / 1024**3 == pytest.approx(372, rel=0.01)


def test_plan_json_for_a_config_path(capsys: pytest.CaptureFixture[str]) -> None:
    """A model given as a config.json path (Qwen3-Next, a GDN hybrid) on 2 B300 at TP2. By hand:
    state slot = 36 GDN layers × (32/2 heads × 128 × 128 × 4 B + conv 3 × 8192/2 × 2 B)
               = 36 × (1,048,576 + 24,576) = 38,633,472 B;
    KV per token = 12 GQA layers × 2 (K, V) × 1 KV head per GPU (2 heads / TP2) × 256 × 2 B = 12,288 B;
    crossing = 5 × 38,633,472 / 12,288 = 15,720 tokens."""
    fixture = REPO / "tests" / "spec" / "fixtures" / "qwen3_next_80b_a3b_config.json"
    d = run_json(capsys, "plan", "--model", str(fixture), "--gpus", "2", "--json")
    assert d["fits"] is True
    assert d["state_slot_bytes"] == 38_633_472
    assert d["kv_bytes_per_token"] == 12_288
    assert d["crossing_point_tokens"] == pytest.approx(15_720.0, abs=0.1)
    assert "--tp-size 2" in d["launch_command"]
    assert "--mamba-full-memory-ratio" in d["launch_command"]


# --- plan ratio ----------------------------------------------------------------------------


def test_plan_json_with_a_weight_format(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("plan", "--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "2", "--json")
    bf16 = run_json(capsys, *base[:-1], "--gpus", "4", "--json")
    fp8 = run_json(capsys, *base, "--weight-format", "fp8")
    assert bf16["weight_format"] is None and fp8["weight_format"] == "fp8"
    # 8-bit layers and 16-bit embeddings and lm_head: over half of the 16-bit checkpoint
    assert 0.5 < fp8["checkpoint_bytes"] / bf16["checkpoint_bytes"] < 0.52
    assert "--quantization fp8" in fp8["launch_command"] and "--quantization fp8" in fp8["launch_command_vllm"]
    assert "--quantization" not in bf16["launch_command"]
    assert any("weights sized as fp8" in note for note in fp8["notes"])
    # on 2 × H100 the 16-bit weights do not leave room for the pools; the 8-bit ones do
    assert fp8["fits"] and not run_json(capsys, *base)["fits"]


def test_plan_ratio_json(capsys: pytest.CaptureFixture[str]) -> None:
    # 5 × 56,171,520 / (9216 × 27,648) = 280,857,600 / 254,803,968 = 1.1022
    d = run_json(capsys, "plan", "ratio", "--avg-request-tokens", "9216", "--json")
    assert set(d) == {"pool_ratio"}
    assert d["pool_ratio"] == pytest.approx(1.10, abs=0.005)


def test_plan_ratio_with_dcp(capsys: pytest.CaptureFixture[str]) -> None:
    # DCP 8 divides the KV term: 280,857,600 / (9216 × 27,648 / 8) = 8.818 (seed: 8.82)
    d = run_json(capsys, "plan", "ratio", "--avg-request-tokens", "9216", "--dcp", "8", "--json")
    assert d["pool_ratio"] == pytest.approx(8.82, abs=0.005)


def test_plan_ratio_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", "ratio", "--avg-request-tokens", "9216")
    assert code == 0
    assert "1.10" in out


def test_plan_ratio_needs_avg_request_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "ratio", "--json")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "--avg-request-tokens" in err


def test_plan_ratio_non_hybrid(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "ratio", "--avg-request-tokens", "9216", "--model", "llama-3.1-70b")
    assert code == 2
    assert len(err.strip().splitlines()) == 1


# --- bad input: exit 2, one line, names the flag --------------------------------------------

BAD_INPUT = [
    (["--gpu", "nosuch"], "--gpu"),
    (["--tp", "-1"], "--tp"),
    (["--tp", "7"], "tp"),  # 8 GPUs are not a multiple of a 7-GPU worker
    (["--gpus", "7", "--tp", "7"], "--tp"),  # 7 does not divide the 96 heads
    (["--pool-ratio", "0"], "--pool-ratio"),
    (["--pool-ratio", "-1"], "--pool-ratio"),
    (["--dcp", "3"], "--dcp"),
    (["--speculative", "foo"], "--speculative"),
    (["--prefix-cache", "bogus"], "--prefix-cache"),
    (["--kv-cache-dtype", "int4"], "--kv-cache-dtype"),
    (["--model", "nosuch"], "--model"),
    (["--tp", "abc"], "--tp"),
    (["--expert-format", "int3"], "--expert-format"),
    (["--weight-format", "int3"], "--weight-format"),
    (["--gpus", "0"], "--gpus"),
    (["--mem-fraction-static", "1.5"], "--mem-fraction-static"),
    (["--speculative", "dspark:7", "--model", "llama-3.1-8b", "--tp", "8"], "--speculative"),
    (["--search", "--top", "0"], "--top must be a positive integer (got 0)"),
    (["--search", "--top", "-1"], "--top must be a positive integer (got -1)"),
]


@pytest.mark.parametrize(("args", "flag"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_one_line_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], flag: str) -> None:
    code, out, err = run(capsys, "plan", *args, "--json")
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert flag in lines[0]
    assert "Traceback" not in err


def test_tp_7_names_96_heads(capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = run(capsys, "plan", "--gpus", "7", "--tp", "7", "--json")
    assert "96" in err


def test_pool_ratio_and_avg_request_tokens_together(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--pool-ratio", "1", "--avg-request-tokens", "5", "--json")
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "--pool-ratio" in lines[0]
    assert "--avg-request-tokens" in lines[0]


def test_unknown_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--no-such-flag", "1")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "--no-such-flag" in err


def test_unknown_plan_action(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "frobnicate")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "frobnicate" in err


# --- search, models, gpus ------------------------------------------------------------------


def test_plan_search_json(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "plan", "--search", "--json")
    assert d["model"] == "kimi-k3"
    assert d["gpus"] == 8
    assert 0 < len(d["fitting"]) <= 15
    assert d["num_fitting"] >= len(d["fitting"])
    totals = [f["max_running_requests_total"] for f in d["fitting"]]
    assert totals == sorted(totals, reverse=True)
    assert all(f["plan"]["fits"] for f in d["fitting"])
    assert d["rejected"]
    assert all(r["reason"] for r in d["rejected"])
    assert any("weights need" in r["reason"] for r in d["rejected"])


def test_plan_search_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--search")
    assert code == 0, err
    assert "layouts fit" in out
    assert "rejected" in out
    assert "TP4 PP2" in out  # a fitting layout row
    assert "does not fit" in out  # a rejected layout's reason


def test_plan_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", "--pool-ratio", "1.1", "--explain")
    assert code == 0, err
    assert "kimi-k3" in out
    flat = " ".join(out.split())  # rich may wrap long lines
    assert "sglang serve" in flat
    assert "capped to 60 by the mamba state cache" in flat


def test_models_json_lists_all_presets(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_json(capsys, "models", "--json")
    assert sorted(r["name"] for r in rows) == sorted(PRESETS)
    k3 = next(r for r in rows if r["name"] == "kimi-k3")
    assert k3["layers"] == 93
    assert k3["layer_kinds"]["kda"] == 69
    assert k3["layer_kinds"]["mla"] == 24


def test_gpus_json_lists_the_bundled_thirteen(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path))  # no entry measured by `calibrate local`
    rows = run_json(capsys, "gpus", "--json")
    assert len(rows) == 13
    assert sorted(r["name"] for r in rows) == [
        "a100",
        "b200",
        "b300",
        "gb200",
        "gb300",
        "h100",
        "h20",
        "h200",
        "h800",
        "l40s",
        "mi300x",
        "mi325x",
        "mi355x",
    ]


def test_gpus_say_where_each_gpus_performance_constants_come_from(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The calibration file ran on H100, H200, B200, B300 and GB200: those are fitted; a Hopper
    variant borrows H100's die, a GPU of an architecture the file never ran (Ampere, CDNA) takes
    the fitted GPUs' medians, as `predict`'s notes say."""
    monkeypatch.setenv("TOKENMILL_CACHE", str(tmp_path))
    rows = {r["name"]: r for r in run_json(capsys, "gpus", "--json")}
    assert {n for n, r in rows.items() if r["constants"] == "fitted"} == {"h100", "h200", "b200", "b300", "gb200"}
    assert rows["h20"]["constants"] == rows["h800"]["constants"] == "h100's die, medians"
    assert rows["gb300"]["constants"] == "b300's die, medians"
    assert rows["a100"]["constants"] == rows["mi300x"]["constants"] == "fitted GPUs' medians"
    code, out, _ = run(capsys, "gpus")
    assert code == 0 and "h100's die, medians" in out


def test_plan_compares_a_layout_on_other_gpus(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`plan --compare gpu=h20`: DeepSeek-R1's 79.3 GiB of weights per GPU at TP8 leave H200
    (140.4 GiB visible) room for its pools and H20 (95.6 GiB) none at the default memory share;
    the figure draws both bars, each under its own GPU's memory."""
    argv = ("plan", "--model", "deepseek-r1", "--gpu", "h200", "--gpus", "8", "--compare", "gpu=h20")
    d = run_json(capsys, *argv, "--json")
    assert (d["gpu"], d["fits"]) == ("h200", True)
    assert (d["compare"][0]["gpu"], d["compare"][0]["fits"]) == ("h20", False)
    assert "1.23 GiB short" in d["compare"][0]["reason"]
    png = tmp_path / "bars.png"
    code, _, err = run(capsys, *argv, "--figure", str(png))
    assert code == 0 and png.stat().st_size > 0, err


def test_models_and_gpus_tables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models")
    assert code == 0 and "kimi-k3" in out
    code, out, _ = run(capsys, "gpus")
    assert code == 0 and "h200" in out.lower()


# --- figures -------------------------------------------------------------------------------


def test_figures_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "tmp.png"
    svg = tmp_path / "tmp.svg"
    code, _, err = run(
        capsys,
        "plan",
        "--figure",
        str(png),
        "--state-figure",
        str(svg),
        "--compare",
        "dcp=8,pool-ratio=8.82",
        "--compare",
        "tp=4,gpus=4",
    )
    assert code == 0, err
    assert png.stat().st_size > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert svg.stat().st_size > 0
    assert "<svg" in svg.read_text()


def test_compare_json(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "plan", "--json", "--compare", "dcp=8,pool-ratio=8.82", "--compare", "tp=4,gpus=4")
    assert d["layout"]["dcp"] == 1
    balanced, tp4 = d["compare"]
    # Seed §2.3: Balanced admitted 101 requests.
    assert balanced["layout"]["dcp"] == 8
    assert balanced["pool_ratio"] == pytest.approx(8.82)
    assert balanced["max_running_requests"] == 101
    assert tp4["gpus"] == 4
    assert tp4["layout"]["tp"] == 4
    assert tp4["fits"] is False


def test_balanced_matches_seed_boot_log(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed §2.3: the Balanced server admitted 101 requests and held 936,448 tokens. plan/runtime.py
    documents its reserves as landing exactly on the running-request cap and within 1.1 % of the
    logged tokens."""
    d = run_json(capsys, "plan", "--dcp", "8", "--pool-ratio", "8.82", "--json")
    assert d["max_running_requests"] == 101
    assert d["max_total_tokens"] == pytest.approx(936_448, rel=0.011)


def test_bad_compare_item(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--json", "--compare", "bogus=1")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "--compare" in err


def test_figure_jpg_is_one_line_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "x.jpg"
    code, _, err = run(capsys, "plan", "--figure", str(target))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "--figure" in lines[0]
    assert not target.exists()


# --- determinism and the real entry point ----------------------------------------------------


def test_same_inputs_byte_identical_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("plan", "--dcp", "8", "--pool-ratio", "8.82", "--json")
    _, first, _ = run(capsys, *argv)
    _, second, _ = run(capsys, *argv)
    assert first == second
    _, s1, _ = run(capsys, "plan", "--search", "--json", "--gpus", "8")
    _, s2, _ = run(capsys, "plan", "--search", "--json", "--gpus", "8")
    assert s1 == s2


def _entry_point() -> list[str]:
    """The installed ``tokenmill`` script next to this interpreter, else ``python -m tokenmill.cli``."""
    exe = Path(sys.executable).parent / "tokenmill"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tokenmill.cli"]


def test_subprocess_plan_json_matches_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--pool-ratio", "1.1", "--json"]
    proc = subprocess.run([*_entry_point(), *argv], capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout)["max_running_requests"] == 60
    _, in_process, _ = run(capsys, *argv)
    assert proc.stdout == in_process


def test_subprocess_bad_flag_exit_2() -> None:
    proc = subprocess.run(
        [*_entry_point(), "plan", "--tp", "-1", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "--tp" in proc.stderr


def test_the_command_line_starts_without_loading_the_packages_its_commands_use() -> None:
    """Every command pays the CLI's imports before it starts, `--help` and `plan` included: the
    commands import what they use when they run. In the thirty-ninth session a top-level import in
    `sim_cmd` pulled in the cost model, the planner, the model specs and the hardware catalog, and
    `import tokenmill.cli` went from 0.1 s to 0.3 s."""
    proc, loaded = modules_after("import tokenmill.cli", ("tokenmill", "numpy", "matplotlib", "torch"))
    assert proc.returncode == 0, proc.stderr
    extra = [
        m
        for m in loaded
        if not m.startswith("tokenmill.cli") and m not in ("tokenmill", "tokenmill.errors", "tokenmill.paths")
    ]
    assert extra == [], f"imported when the CLI starts: {extra}"


def test_plan_says_what_the_config_reader_assumed(capsys: pytest.CaptureFixture[str]) -> None:
    """The model's notes (here DeepSeek-V3's MTP layer, left out of the weights) print under the
    plan's heading, as in its --json."""
    code, out, _ = cli(capsys, "plan", "--model", "deepseek-v3", "--gpu", "h200", "--gpus", "8")
    assert code == 0
    assert "note: 1 MTP layer(s) not counted (loaded only with --speculative mtp)" in out
