"""`tokenmill calibrate record`: benchmark results of a deployment as rows of a measurements file,
predicted by `calibrate evaluate` as `predict --launch … --measured …` predicts them."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.cli_helpers import cli, cli_json

#: A closed-loop run as vLLM's `bench serve --save-result` writes it (totals, no random lengths).
RUN = {
    "backend": "vllm",
    "request_rate": "inf",
    "max_concurrency": 16,
    "completed": 160,
    "total_input_tokens": 163_840,
    "total_output_tokens": 40_960,
    "mean_ttft_ms": 250.0,
    "mean_tpot_ms": 21.5,
}
VLLM = "vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2 --max-num-seqs 128 --no-enable-prefix-caching"
SGLANG_DP = (
    "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 --dp-size 8 "
    "--enable-dp-attention --ep-size 8 --moe-a2a-backend deepep --mem-fraction-static 0.88 "
    "--kv-cache-dtype fp8_e4m3 --trust-remote-code"
)


def write(tmp_path: Path, name: str, **change: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(RUN | change))
    return path


def sweep_run(tmp_path: Path, lanes: int, **change: Any) -> Path:
    """``c{lanes}.json``: one run of a sweep over concurrency at 1,024/256 tokens, ten requests a lane."""
    totals = {"completed": 10 * lanes, "total_input_tokens": 1024 * 10 * lanes, "total_output_tokens": 256 * 10 * lanes}
    return write(tmp_path, f"c{lanes}.json", max_concurrency=lanes, **totals, **change)


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    ("launch", "gpu", "isl", "osl"),
    [(VLLM, "h100", 1024, 256), (SGLANG_DP, "b200", 2048, 64)],
    ids=["vllm-tp2", "sglang-dp8-ep8"],
)
def test_recorded_rows_are_predicted_as_predict_launch_predicts_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, launch: str, gpu: str, isl: int, osl: int
) -> None:
    """Two lanes counts of one deployment recorded, evaluated (no --models-dir: the bundled
    presets), and each row's prediction equal to `predict --launch … --measured FILE`'s."""
    files = [
        write(
            tmp_path,
            f"c{c}.json",
            max_concurrency=c,
            total_input_tokens=isl * 10 * c,
            completed=10 * c,
            total_output_tokens=osl * 10 * c,
        )
        for c in (4, 32)
    ]
    out = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", launch, "--gpu", gpu, "--out", str(out)]
    code, printed, err = cli(capsys, *args, "--measured", str(files[0]), "--measured", str(files[1]))
    assert code == 0, err
    written = rows(out)
    assert [r["silicon_data_source"].split("; ")[1] for r in written] == [
        "silicon_concurrency=4",
        "silicon_concurrency=32",
    ]
    assert printed.count("\n") == 2 and all(r["id"] in printed for r in written)
    preds = tmp_path / "pred.csv"
    code, _, err = cli(capsys, "calibrate", "evaluate", "--measurements", str(out), "--out", str(preds), "--json")
    assert code == 0, err
    by_id = {r["id"]: r for r in rows(preds)}
    for row, path in zip(written, files, strict=True):
        predicted = by_id[row["id"]]
        assert predicted["skipped_reason"] == "", predicted
        direct = cli_json(capsys, "predict", "--launch", launch, "--gpu", gpu, "--measured", str(path), "--json")
        assert float(predicted["predicted_ttft_ms"]) == pytest.approx(direct["ttft_ms"], rel=1e-5)
        assert float(predicted["predicted_tpot_ms"]) == pytest.approx(direct["tpot_ms"], rel=1e-5)


def test_the_row_carries_the_deployments_settings(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "mine.csv"
    code, _, err = cli(
        capsys,
        *("calibrate", "record", "--launch", SGLANG_DP, "--gpu", "b200", "--out", str(out)),
        *("--measured", str(write(tmp_path, "r.json")), "--backend-version", "0.5.9", "--id-prefix", "ds v3/b200"),
    )
    assert code == 0, err
    (row,) = rows(out)
    assert row["id"] == "ds-v3-b200_1024x256_c16" and row["backend"] == "sglang" and row["backend_version"] == "0.5.9"
    assert (row["tp_size"], row["attention_dp_size"], row["moe_ep_size"], row["moe_tp_size"]) == ("1", "8", "8", "1")
    assert (row["kv_cache_dtype"], row["mem_fraction_static"], row["prefix_cache"]) == (
        "fp8_e4m3",
        "0.88",
        "extra_buffer",
    )
    assert row["model_path"] == "deepseek-ai/DeepSeek-V3" and row["system"] == "b200" and row["mode"] == "agg"
    code, shown, err = cli(capsys, "calibrate", "row", "--measurements", str(out), "ds-v3*")
    assert code == 0, err
    assert (
        "--mem-fraction-static 0.88" in shown and "--kv-cache-dtype fp8_e4m3" in shown and "--dp-attention 8" in shown
    )


@pytest.mark.parametrize(
    ("launch", "says"),
    [
        (
            "sglang serve --model-path moonshotai/Kimi-K3 --tp-size 8 --speculative-algorithm NEXTN "
            "--speculative-num-steps 3",
            "records no drafter",
        ),
        ("sglang serve --model-path moonshotai/Kimi-K3 --tp-size 8 --dcp-size 8", "decode context parallelism"),
        ("sglang serve --model-path Qwen/Qwen3-32B --tp-size 2 --dp-size 4", "4 replicas of a 2-GPU worker"),
        ("sglang serve --model-path Qwen/Qwen3-32B --page-size 16", "--page-size"),
        ("sglang serve --model-path openai/gpt-oss-120b --disable-hybrid-swa-memory", "sliding-window pool"),
        ("sglang serve --tp-size 2", "names no model"),
    ],
)
def test_what_a_row_cannot_say_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, launch: str, says: str
) -> None:
    out = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", launch, "--gpu", "h200", "--out", str(out)]
    code, printed, err = cli(capsys, *args, "--measured", str(write(tmp_path, "r.json")))
    assert code == 2 and printed == "" and err.count("\n") == 1 and says in err, err
    assert not out.exists()


def test_appending_refuses_an_id_twice_and_a_file_of_other_columns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(out)]
    assert cli(capsys, *args, "--measured", str(write(tmp_path, "a.json")))[0] == 0
    assert cli(capsys, *args, "--measured", str(write(tmp_path, "b.json", max_concurrency=8)))[0] == 0
    assert [r["silicon_data_source"].split("; ")[1] for r in rows(out)] == [
        "silicon_concurrency=16",
        "silicon_concurrency=8",
    ]
    before = out.read_text()
    code, _, err = cli(capsys, *args, "--measured", str(write(tmp_path, "c.json")))
    assert code == 2 and "already has a row 'Qwen3-32B_h100_vllm_tp2_1024x256_c16'" in err
    assert out.read_text() == before
    other = tmp_path / "other.csv"
    other.write_text("id,backend\nx,vllm\n")
    code, _, err = cli(capsys, *args[:-1], str(other), "--measured", str(write(tmp_path, "d.json")))
    assert code == 2 and "other columns" in err and other.read_text() == "id,backend\nx,vllm\n"
    code, _, err = cli(capsys, *args[:4], "--gpu", "a10g", "--out", str(tmp_path / "x.csv"), "--measured", str(out))
    assert code == 2 and err.startswith("error: --gpu:") and err.count("\n") == 1


def test_what_the_command_leaves_to_the_engine_is_said(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    launch = "sglang serve --model-path Qwen/Qwen3-32B --tp-size 2 --attention-backend fa3"
    args = ["calibrate", "record", "--launch", launch, "--gpu", "h200", "--out", str(tmp_path / "m.csv")]
    code, _, err = cli(capsys, *args, "--measured", str(write(tmp_path, "r.json")))
    assert code == 0, err
    assert "SGLang picks one by GPU" in err and "not modelled: --attention-backend" in err
    assert rows(tmp_path / "m.csv")[0]["mem_fraction_static"] == "0.85"


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("kv_cache_dtype", "int4", "kv_cache_dtype 'int4' is not one of"),
        ("mem_fraction_static", "1.5", "mem_fraction_static '1.5' is not a share"),
        ("mem_fraction_static", "lots", "mem_fraction_static 'lots'"),
        ("prefix_cache", "sometimes", "prefix_cache 'sometimes' is not one of"),
        ("max_running_requests", "0", "max_running_requests '0' is not a positive integer"),
    ],
)
def test_a_setting_the_reader_cannot_read_is_that_rows_skip_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, column: str, value: str, says: str
) -> None:
    out = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(out)]
    assert cli(capsys, *args, "--measured", str(write(tmp_path, "a.json")))[0] == 0
    (row,) = rows(out)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row | {column: value})
    preds = tmp_path / "pred.csv"
    code, _, err = cli(capsys, "calibrate", "evaluate", "--measurements", str(out), "--out", str(preds), "--json")
    assert code == 0, err
    (predicted,) = rows(preds)
    assert predicted["predicted_ttft_ms"] == "" and says in predicted["skipped_reason"], predicted


def test_a_refit_of_your_rows_from_the_shipped_constants_keeps_the_rest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`calibrate fit --start shipped` on recorded rows: the rows' GPU and engine refitted, every
    other GPU and engine as shipped, and the rows predicted closer than before."""
    from tokenmill.perf.calibrated import load_table, shipped_path

    mine = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(mine)]
    assert cli(capsys, *args, "--measured", str(write(tmp_path, "a.json", mean_ttft_ms=400.0)))[0] == 0
    fitted = tmp_path / "mine.json"
    fit = ["calibrate", "fit", "--measurements", str(mine), "--start", "shipped", "--out", str(fitted)]
    code, _, err = cli(capsys, *fit, "--rounds", "1", "--sweeps", "1")
    assert code == 0, err
    shipped, table = load_table(shipped_path()), load_table(fitted)
    assert table.meta["kept_from_start"] == [
        *(f"gpus.{g}" for g in shipped.gpus if g != "h100"),
        *(f"backends.{b}" for b in shipped.backends if b != "vllm"),
    ]
    assert table.gpus["b200"] == shipped.gpus["b200"] and table.backends["sglang"] == shipped.backends["sglang"]
    assert table.gpus["h100"] != shipped.gpus["h100"] or table.backends["vllm"] != shipped.backends["vllm"]
    errors = []
    for params in ([], ["--params", str(fitted)]):
        preds = tmp_path / "pred.csv"
        evaluate = ["calibrate", "evaluate", "--measurements", str(mine), "--out", str(preds), "--json", *params]
        assert cli(capsys, *evaluate)[0] == 0
        errors.append(abs(float(rows(preds)[0]["predicted_ttft_ms"]) / 400.0 - 1))
    assert errors[1] < errors[0], errors


def test_a_refit_from_start_constants_is_anchored_to_them_unless_told_otherwise(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`--start` pulls towards the start constants (`--anchor`, default 0.03 per row, in the file's
    command); `--anchor` without `--start`, or not a number ≥ 0, is refused before the fit."""
    from tokenmill.perf.calibrated import load_table

    mine = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(mine)]
    assert cli(capsys, *args, "--measured", str(write(tmp_path, "a.json", mean_ttft_ms=400.0)))[0] == 0
    base = ["calibrate", "fit", "--measurements", str(mine), "--rounds", "1", "--sweeps", "1"]
    commands = {}
    for name, extra in (("default", []), ("zero", ["--anchor", "0"])):
        out = tmp_path / f"{name}.json"
        code, _, err = cli(capsys, *base, "--start", "shipped", "--out", str(out), *extra)
        assert code == 0, err
        commands[name] = load_table(out).meta["command"]
    assert commands["default"].endswith("--anchor 0.03") and commands["zero"].endswith("--anchor 0")
    for extra, says in (
        (["--anchor", "0.5"], "--anchor pulls towards the --start constants"),
        (["--start", "shipped", "--anchor", "-1"], "--anchor must be a number 0 or more (got -1.0)"),
    ):
        out = tmp_path / "refused.json"
        code, _, err = cli(capsys, *base, "--out", str(out), *extra)
        assert code == 2 and says in err and not out.exists(), err


def test_a_refit_from_start_says_which_constants_it_moved(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    mine = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(mine)]
    assert cli(capsys, *args, "--measured", str(write(tmp_path, "a.json", mean_ttft_ms=400.0)))[0] == 0
    fit = ["calibrate", "fit", "--measurements", str(mine), "--start", "shipped", "--rounds", "1", "--sweeps", "1"]
    code, out, err = cli(capsys, *fit, "--out", str(tmp_path / "a.json"))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("moved from --start by 5 % or more: ")
    code, out, err = cli(capsys, *fit, "--out", str(tmp_path / "b.json"), "--json")
    assert code == 0, err
    moved = json.loads(out)["moved_from_start"]
    assert moved and lines[2 + min(8, len(moved))].startswith("in sample, on the 1 fitted row: ")
    assert all(line.startswith("  ") for line in lines[2 : 2 + min(8, len(moved))])
    assert lines[2].split()[0] == moved[0]["constant"] and moved[0]["constant"].startswith(
        ("backends.vllm", "gpus.h100", "global")
    )


def test_a_refit_shows_its_rows_before_and_after_as_evaluate_predicts_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`calibrate fit` replays the rows it fitted with the start constants and with the written
    ones: each row's times are what `calibrate evaluate` predicts without and with `--params` of
    the written file (so the merge of the constants it kept from the start changes none of them),
    and the text says the medians and shows a few rows whole."""
    mine = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(mine)]
    for name, c, ttft in (("a.json", 4, 150.0), ("b.json", 16, 400.0), ("c.json", 64, 1200.0)):
        path = write(tmp_path, name, max_concurrency=c, mean_ttft_ms=ttft, completed=10 * c)
        assert cli(capsys, *args, "--measured", str(path))[0] == 0
    fitted = tmp_path / "mine.json"
    fit = ["calibrate", "fit", "--measurements", str(mine), "--start", "shipped", "--rounds", "1", "--sweeps", "2"]
    code, out, err = cli(capsys, *fit, "--out", str(fitted), "--json")
    assert code == 0, err
    in_sample = json.loads(out)["in_sample"]
    assert in_sample["rows"] == in_sample["scored"] == 3
    per_row = {r["id"]: r for r in in_sample["per_row"]}
    for params, side in (([], "start"), (["--params", str(fitted)], "fitted")):
        preds = tmp_path / f"{side}.csv"
        evaluate = ["calibrate", "evaluate", "--measurements", str(mine), "--out", str(preds), "--json", *params]
        assert cli(capsys, *evaluate)[0] == 0
        for row in rows(preds):
            shown = per_row[row["id"]]
            assert shown[f"{side}_ttft_ms"] == pytest.approx(float(row["predicted_ttft_ms"]), rel=1e-4)
            assert shown[f"{side}_tpot_ms"] == pytest.approx(float(row["predicted_tpot_ms"]), rel=1e-4)
    measured = sorted(r["measured_ttft_ms"] for r in per_row.values())
    assert measured == [150.0, 400.0, 1200.0]
    # the medians are of the rows' own errors, recomputed here from the times shown
    for side in ("start", "fitted"):
        errors = sorted(abs(r[f"{side}_ttft_ms"] / r["measured_ttft_ms"] - 1) for r in per_row.values())
        assert in_sample[f"{side}_ttft_median_ape"] == pytest.approx(errors[1])
    code, out, err = cli(capsys, *fit, "--out", str(tmp_path / "again.json"))
    assert code == 0, err
    said = next(line for line in out.splitlines() if line.startswith("in sample, on the 3 fitted rows: "))
    start, after = (100 * in_sample[f"{s}_ttft_median_ape"] for s in ("start", "fitted"))
    assert f"TTFT {start:.1f}% → {after:.1f}%" in said, said
    assert sum(1 for rid in per_row if rid in out) == 3  # three rows: each shown


def test_a_refit_from_start_sweeps_more_by_default(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A few rows from `--start` get 20 sweeps a round (cheap, and better on a deployment's other
    rows: benchmarks/deployment_refit.py), a fit from the priors 5; the file's command says which."""
    from tokenmill.perf.calibrated import load_table

    mine = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(mine)]
    assert cli(capsys, *args, "--measured", str(write(tmp_path, "a.json", mean_ttft_ms=400.0)))[0] == 0
    base = ["calibrate", "fit", "--measurements", str(mine), "--rounds", "1"]
    for name, extra, says in (("start", ["--start", "shipped"], "--sweeps 20"), ("priors", [], None)):
        out = tmp_path / f"{name}.json"
        code, text, err = cli(capsys, *base, "--out", str(out), *extra, "--json")
        assert code == 0, err
        log = json.loads(text)["log"]
        if extra:  # a few rows: a line a round, not one a sweep
            assert not [line for line in log if line.startswith("sweep ")], log
            assert any(line.startswith("round 1: 20 sweeps, loss ") for line in log), log
        else:
            assert len([line for line in log if line.startswith("sweep ")]) == 5, log
        command = load_table(out).meta["command"]
        assert (says in command) if says else "--sweeps" not in command, command


def test_a_fitted_row_the_model_cannot_replay_is_counted_with_its_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    mine = tmp_path / "mine.csv"
    args = ["calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(mine)]
    assert cli(capsys, *args, "--measured", str(write(tmp_path, "a.json", mean_ttft_ms=400.0)))[0] == 0
    (row,) = rows(mine)
    with mine.open("a", newline="") as f:
        csv.DictWriter(f, fieldnames=list(row)).writerow(row | {"id": "unknown", "model_path": "nobody/none"})
    fit = ["calibrate", "fit", "--measurements", str(mine), "--start", "shipped", "--rounds", "1", "--sweeps", "1"]
    code, out, err = cli(capsys, *fit, "--out", str(tmp_path / "a.json"))
    assert code == 0, err
    assert "in sample, on the 1 fitted row: " in out
    assert "not replayed: 1 (1 × no config for model_path 'nobody/none'" in out
    assert "unknown" not in out.split("not replayed:")[1].split("\n", 1)[1]  # not a row of the table
    code, out, err = cli(capsys, *fit, "--out", str(tmp_path / "b.json"), "--json")
    per_row = {r["id"]: r for r in json.loads(out)["in_sample"]["per_row"]}
    assert per_row["unknown"]["fitted_ttft_ms"] is None and "nobody/none" in per_row["unknown"]["skipped_reason"]


def test_a_refit_keeps_the_rows_kernels_under_the_ceiling_unless_told_otherwise(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Long prompts measured faster than any kernel could process them: by default a refit from
    `--start` stops where an FP8 GEMM of the rows reaches 0.95 of its peak; `--ceiling 0` lets it
    pass the peak; a fit from the priors has no ceiling unless given one; a ceiling that is not a
    number ≥ 0 is refused before the fit."""
    from tests.perf.rows import fastest_kernel, row
    from tokenmill.perf.calibrated import load_table

    mine = tmp_path / "fast.csv"
    fast = [
        row(id=f"r{c}", silicon_data_source=f"s; silicon_concurrency={c}", isl="8192", osl="16")
        | {"gemm_quant_mode": "fp8", "silicon_ttft_ms": ttft, "silicon_tpot_ms": "6"}
        for c, ttft in ((1, "40"), (4, "90"))
    ]
    with mine.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(fast[0]))
        writer.writeheader()
        writer.writerows(fast)
    base = ["calibrate", "fit", "--measurements", str(mine), "--start", "shipped", "--anchor", "0.0001"]
    base += ["--rounds", "1", "--sweeps", "3"]
    fastest = {}
    for name, extra in (("default", []), ("none", ["--ceiling", "0"])):
        out = tmp_path / f"{name}.json"
        code, _, err = cli(capsys, *base, "--out", str(out), *extra)
        assert code == 0, err
        fastest[name] = fastest_kernel(load_table(out).resolve("h100", "vllm")[0])
    assert fastest["default"] <= 0.95 + 1e-9 < 1.0 < fastest["none"], fastest
    # from the priors (a fit of a whole file) there is no ceiling unless one is given
    priors = ["calibrate", "fit", "--measurements", str(mine), "--rounds", "1", "--sweeps", "1"]
    tables = {}
    for name, extra in (("default", []), ("none", ["--ceiling", "0"]), ("given", ["--ceiling", "0.5"])):
        out = tmp_path / f"priors-{name}.json"
        assert cli(capsys, *priors, "--out", str(out), *extra)[0] == 0
        tables[name] = load_table(out)
    assert tables["default"].gpus == tables["none"].gpus and tables["default"].backends == tables["none"].backends
    assert fastest_kernel(tables["given"].resolve("h100", "vllm")[0]) <= 0.5 + 1e-9
    assert tables["given"].gpus != tables["none"].gpus
    out = tmp_path / "refused.json"
    code, _, err = cli(capsys, *base, "--out", str(out), "--ceiling", "-1")
    assert code == 2 and "--ceiling must be a fraction of peak, or 0 for none (got -1.0)" in err and not out.exists()


def test_a_refit_from_the_launch_command_and_result_files_is_the_refit_of_their_recorded_rows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`calibrate fit --launch … --gpu … --measured …` (from the shipped constants by default) writes
    the constants `calibrate record` then `calibrate fit --measurements … --start shipped` write, its
    command in the file with the launch quoted, and says a note shared by the result files once."""
    from tokenmill.perf.calibrated import load_table, shipped_path

    files = [
        sweep_run(tmp_path, c, mean_ttft_ms=t, mean_tpot_ms=p) for c, t, p in ((4, 120.0, 14.0), (16, 260.0, 19.0))
    ]
    measured = [a for f in files for a in ("--measured", str(f))]
    mine = tmp_path / "mine.csv"
    code, _, err = cli(capsys, "calibrate", "record", "--launch", VLLM, "--gpu", "h100", "--out", str(mine), *measured)
    assert code == 0, err
    quick = ["--rounds", "1", "--sweeps", "2"]
    two_steps, one_step = tmp_path / "two.json", tmp_path / "one.json"
    code, _, err = cli(
        capsys, "calibrate", "fit", "--measurements", str(mine), "--start", "shipped", "--out", str(two_steps), *quick
    )
    assert code == 0, err
    code, out, err = cli(
        capsys, "calibrate", "fit", "--launch", VLLM, "--gpu", "h100", *measured, "--out", str(one_step), *quick
    )
    assert code == 0, err
    a, b = load_table(two_steps), load_table(one_step)
    assert a.backends["vllm"] != load_table(shipped_path()).backends["vllm"]  # the rows moved something
    commands = a.meta.pop("command"), b.meta.pop("command")
    assert a.to_json() == b.to_json()
    assert commands[0].startswith(f"tokenmill calibrate fit --measurements {mine} ")
    assert commands[1].startswith(
        f"tokenmill calibrate fit --launch '{VLLM}' --gpu h100 --measured {files[0]} --measured {files[1]} "
    )
    assert commands[1].endswith(f"--start {shipped_path()} --anchor 0.03")
    assert "on the 2 fitted rows" in out
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert "note: input len 1,024.0: the mean of the completed requests" in notes
    assert len(notes) == len(set(notes)), err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--measurements", "MINE", "--launch", VLLM], "--measurements and --launch: the rows come from"),
        ([], "give the rows to fit: --measurements FILE.csv, or one deployment's --launch"),
        (["--launch", VLLM, "--gpu", "h100"], "--launch gives one deployment's runs: it needs --measured too"),
        (["--measured", "RUN"], "--measured gives one deployment's runs: it needs --launch and --gpu too"),
        (["--measurements", "MINE", "--backend-version", "0.11.0"], "--measurements and --backend-version"),
        (["--launch", VLLM, "--gpu", "h100", "--measured", "RUN", "--no-out"], "give --out FILE.json"),
        (["--launch", VLLM, "--gpu", "h100", "--measured", "RUN", "--out", "RUN"], "is also --measured"),
        (["--launch", VLLM, "--gpu", "a10g", "--measured", "RUN"], "--gpu:"),
    ],
)
def test_a_refit_takes_its_rows_from_one_source(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], says: str
) -> None:
    """A measurements file or one deployment's launch command, GPU and result files: both, neither
    or a part of the second is refused in one line naming the flags, and nothing is written."""
    run = write(tmp_path, "run.json")
    before = run.read_text()
    mine = tmp_path / "mine.csv"
    mine.write_text("id\n")
    out = tmp_path / "out.json"
    argv = [{"MINE": str(mine), "RUN": str(run)}.get(f, f) for f in flags if f != "--no-out"]
    if "--out" not in flags and "--no-out" not in flags:
        argv += ["--out", str(out)]
    code, _, err = cli(capsys, "calibrate", "fit", *argv)
    assert code == 2 and says in err and err.count("\n") == 1, err
    assert not out.exists() and run.read_text() == before


def test_a_prediction_with_a_deployments_refit_carries_the_refit_band_of_its_lengths(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`predict --params mine.json` of the refitted deployment: the shipped refit band
    (accuracy.json's `refit_*_groups`, benchmarks/deployment_refit.py) of the fitted lengths or of
    other lengths; of another GPU: no band, and a note naming the deployment it was refitted on."""
    from tokenmill.perf.accuracy import shipped_accuracy_path

    runs = [sweep_run(tmp_path, c) for c in (4, 16)]
    mine = tmp_path / "mine.json"
    fit = ["calibrate", "fit", "--launch", VLLM, "--gpu", "h100", "--out", str(mine)]
    code, printed, err = cli(
        capsys, *fit, *(a for r in runs for a in ("--measured", str(r))), "--rounds", "1", "--sweeps", "1"
    )
    assert code == 0, err
    # the command it prints to predict with the refit: the runs' lengths at their concurrencies
    suggested = shlex.split(printed.split("predict with it: ", 1)[1].splitlines()[0])
    assert suggested[:2] == ["tokenmill", "predict"] and suggested[-6:] == [
        *("--isl", "1024", "--osl", "256", "--concurrency", "4,16")
    ]
    out = cli_json(capsys, *suggested[1:], "--json")
    assert [p["accuracy"]["held_out_of"] for p in out["points"]] == ["refit-same-lengths"] * 2
    meta = json.loads(mine.read_text())["meta"]
    model = "dense_gqa/64L/5120h/151936v/0e"
    assert meta["fit_points"] == [["h100", "vllm", model, 1024, 256, 4], ["h100", "vllm", model, 1024, 256, 16]]
    sections = json.loads(shipped_accuracy_path().read_text())
    for isl, section, kind in (
        (1024, "refit_same_lengths_groups", "refit-same-lengths"),
        (4096, "refit_other_lengths_groups", "refit-other-lengths"),
    ):
        predict = ["predict", "--launch", VLLM, "--gpu", "h100", "--params", str(mine), "--isl", str(isl)]
        out = cli_json(capsys, *predict, "--osl", "256", "--concurrency", "16", "--json")
        acc = out["accuracy"]
        assert acc is not None and acc["held_out"] and acc["held_out_of"] == kind, out["notes"]
        assert acc["ttft_ratio_p10"] == sections[section][acc["scope"]]["ttft_ratio_p10"]
        assert acc["tpot_ratio_p90"] == sections[section][acc["scope"]]["tpot_ratio_p90"]
    other = ["predict", "--model", "Qwen/Qwen3-32B", "--gpu", "h200", "--gpus", "2", "--tp", "2", "--backend", "vllm"]
    out = cli_json(capsys, *other, "--params", str(mine), "--isl", "1024", "--osl", "256", "--json")
    assert out["accuracy"] is None
    assert any("refitted on runs of dense_gqa on h100 under vllm" in n for n in out["notes"]), out["notes"]
    # refitted on one run: no band (the bands measured refits of two or three)
    code, _, err = cli(capsys, *fit, "--measured", str(runs[0]), "--rounds", "1", "--sweeps", "1")
    assert code == 0, err
    predict = ["predict", "--launch", VLLM, "--gpu", "h100", "--params", str(mine), "--isl", "1024", "--osl", "256"]
    out = cli_json(capsys, *predict, "--json")
    assert out["accuracy"] is None and any("refitted on one run" in n for n in out["notes"]), out["notes"]


def test_a_refit_of_a_model_without_a_config_says_why_nothing_was_fitted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """No row replays (no config for the launch's model among the presets): one line that says
    so, with the rows' reason, and nothing written."""
    mine = tmp_path / "mine.json"
    launch = "vllm serve acme/Unknown-7B --tensor-parallel-size 2"
    runs = [a for c in (4, 16) for a in ("--measured", str(sweep_run(tmp_path, c)))]
    code, _, err = cli(capsys, "calibrate", "fit", "--launch", launch, "--gpu", "h100", *runs, "--out", str(mine))
    assert code == 2 and err.count("\n") == 1 and not mine.exists(), err
    assert "nothing to fit (2 × no config for model_path 'acme/Unknown-7B'" in err


def test_a_refit_says_which_moved_constants_it_left_on_a_bound(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Runs that decode faster than H100 could stream the model's weights and read its cache: the
    refit leaves both bandwidths on the ceiling and says so (text and `--json`'s `at_bound`)."""
    runs = [a for c in (4, 16) for a in ("--measured", str(sweep_run(tmp_path, c, mean_tpot_ms=1.5)))]
    fit = ["calibrate", "fit", "--launch", VLLM, "--gpu", "h100", *runs, "--rounds", "1", "--sweeps", "2"]
    code, out, err = cli(capsys, *fit, "--out", str(tmp_path / "a.json"))
    assert code == 0, err
    # from the shipped value (whatever the last refit made it) to the 0.95 ceiling, and said so
    assert re.search(r"global\.cache_bandwidth_efficiency 0\.\d+ → 0\.95 \(× 1\.\d+\), at its upper bound\n", out), out
    code, out, err = cli(capsys, *fit, "--out", str(tmp_path / "b.json"), "--json")
    assert code == 0, err
    written = json.loads(out)
    assert written["predict_command"].startswith("tokenmill predict --launch ")
    assert f"--params {tmp_path / 'b.json'} " in written["predict_command"]
    moved = {m["constant"]: m for m in written["moved_from_start"]}
    assert moved["gpus.h100.weight_bandwidth_efficiency"]["fitted"] == pytest.approx(0.95)
    assert moved["gpus.h100.weight_bandwidth_efficiency"]["at_bound"] == "upper"
    assert moved["backends.vllm.burst_share"]["at_bound"] is None
    assert {m["at_bound"] for m in moved.values()} <= {"upper", "lower", None}
