"""Output files: a command writes everything it was asked to or nothing. An output it could not
write at the end (a missing folder, a directory in its place, a suffix it does not write) is
refused before any work, in one line, with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_helpers import cli


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.strip() == f"error: {message}", err


def test_simulate_writes_no_rows_when_its_figure_cannot_be_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rows = tmp_path / "rows.csv"
    missing = tmp_path / "no" / "fig.png"
    base = ["simulate", "--duration", "5", "--json", "--requests-out", str(rows)]
    _refused(
        capsys,
        [*base, "--figure", str(missing)],
        f"--figure: cannot write {missing}: no such directory {missing.parent}",
    )
    _refused(capsys, [*base, "--figure", str(tmp_path / "f.jpg")], "--figure must end in .png or .svg (got 'f.jpg')")
    assert not rows.exists()
    _refused(
        capsys,
        ["simulate", "--requests-out", str(tmp_path), "--json"],
        f"--requests-out must end in .csv or .parquet (got {tmp_path.name!r})",
    )


def test_a_directory_where_the_figure_should_be_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "bars.png"
    folder.mkdir()
    _refused(capsys, ["plan", "--figure", str(folder)], f"--figure: {folder} is a directory, not a file")


def test_sweep_checks_both_figures_before_simulating(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "no" / "latency.svg"
    _refused(
        capsys,
        [
            "sweep",
            "--rates",
            "0.5",
            "--duration",
            "5",
            "--figure",
            str(tmp_path / "a.png"),
            "--latency-figure",
            str(missing),
        ],
        f"--latency-figure: cannot write {missing}: no such directory {missing.parent}",
    )
    assert not (tmp_path / "a.png").exists()


def test_evaluate_and_fit_check_their_outputs_before_replaying(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text(
        "id,backend,model_path,system,mode,isl,osl,batch_size,silicon_ttft_ms,silicon_tpot_ms\n"
        "r1,vllm,meta-llama/Llama-3.1-8B-Instruct,h100_sxm,agg,1024,128,4,60,7\n"
    )
    pred = tmp_path / "pred.csv"
    missing = tmp_path / "no" / "acc.json"
    common = ["--measurements", str(csv), "--models-dir", str(tmp_path)]
    _refused(
        capsys,
        ["calibrate", "evaluate", *common, "--out", str(pred), "--accuracy-out", str(missing)],
        f"--accuracy-out: cannot write {missing}: no such directory {missing.parent}",
    )
    assert not pred.exists()
    _refused(
        capsys,
        ["calibrate", "fit", *common, "--out", str(missing)],
        f"--out: cannot write {missing}: no such directory {missing.parent}",
    )


def test_one_file_for_two_outputs_or_a_target_that_is_no_number_is_refused_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by fuzzing: the sweep wrote one figure over the other, and an SLO of nan was refused
    without naming its flag."""
    base = ["sweep", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--rates", "1", "--duration", "5"]
    same = str(tmp_path / "p.png")
    code, _, err = cli(capsys, *base, "--figure", same, "--latency-figure", same)
    assert code == 2 and "--latency-figure" in err and "is also --figure" in err and not Path(same).exists()
    code, _, err = cli(capsys, *base, "--slo-ttft-ms", "nan")
    assert code == 2 and err.strip() == "error: --slo-ttft-ms must be a finite number > 0 (got nan)"


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_and_svg(png: Path, svg: Path) -> None:
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "<svg" in svg.read_text()


def test_every_figure_flag_draws_one_figure_into_each_file_it_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The docs keep each figure as PNG and SVG: one run writes both (``--figure a.png --figure
    a.svg``) for plan, simulate and sweep as for predict and calibrate evaluate."""
    f = {name: tmp_path / name for name in ("m.png", "m.svg", "s.png", "s.svg", "t.png", "t.svg")}
    code, _, err = cli(
        capsys,
        "plan",
        *("--figure", str(f["m.png"]), "--figure", str(f["m.svg"])),
        *("--state-figure", str(f["s.png"]), "--state-figure", str(f["s.svg"])),
    )
    assert code == 0, err
    _png_and_svg(f["m.png"], f["m.svg"])
    _png_and_svg(f["s.png"], f["s.svg"])
    code, _, err = cli(
        capsys, "simulate", "--duration", "5", "--json", "--figure", str(f["t.png"]), "--figure", str(f["t.svg"])
    )
    assert code == 0, err
    _png_and_svg(f["t.png"], f["t.svg"])
    sweep = ["sweep", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--duration", "5", "--json"]
    a, b, c, d = (tmp_path / n for n in ("a.png", "a.svg", "l.png", "l.svg"))
    code, _, err = cli(
        capsys,
        *sweep,
        *("--rates", "1", "--concurrencies", "1"),
        *("--figure", str(a), "--figure", str(b), "--latency-figure", str(c), "--latency-figure", str(d)),
    )
    assert code == 0, err
    _png_and_svg(a, b)
    _png_and_svg(c, d)


def test_a_figure_file_named_twice_or_by_two_flags_is_refused_before_anything_is_drawn(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    same = tmp_path / "p.png"
    _refused(
        capsys,
        ["plan", "--figure", str(same), "--figure", str(same)],
        f"--figure: {same} is named twice: name each file once",
    )
    _refused(
        capsys,
        ["plan", "--figure", str(tmp_path / "q.svg"), "--state-figure", str(same), "--figure", str(same)],
        f"--state-figure: {same} is also --figure: write it to another file",
    )
    good = tmp_path / "ok.svg"
    _refused(
        capsys,
        ["plan", "--figure", str(good), "--figure", str(tmp_path / "x.jpg")],
        "--figure must end in .png or .svg (got 'x.jpg')",
    )
    assert not same.exists() and not good.exists()
