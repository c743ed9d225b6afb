"""Every numeric flag of the offline commands, given values no one means (nan, inf, 1e30, −1,
10¹⁰): the answer is a result or one line naming the problem with exit code 2, never a traceback,
a hang or an allocation of the whole machine. Options are found from the CLI itself, so a new flag
is covered the day it is added."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from tests.cli_helpers import answers_or_one_line
from tokenmill.cli import app, main

#: Commands that run offline and quickly; ``serve``, ``bench`` and ``generate`` need a model or a
#: server, and ``calibrate local`` times this machine for a minute when its flags are valid.
COMMANDS = (("plan",), ("predict",), ("simulate",), ("sweep",), ("calibrate", "fit"), ("calibrate", "evaluate"))
ODD = {float: ("nan", "inf", "-inf", "1e30", "-1"), int: ("-1", "10000000000")}


def numeric_options() -> list[tuple[tuple[str, ...], str, str]]:
    root = typer.main.get_command(app)
    cases = []
    for path in COMMANDS:
        cmd = root
        for name in path:
            cmd = cmd.commands[name]  # type: ignore[attr-defined]
        for p in cmd.params:
            kind = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            if p.param_type_name == "option" and kind in ODD:
                cases += [(path, p.opts[0], value) for value in ODD[kind]]
    return cases


CASES = numeric_options()


def test_the_numeric_flags_are_found() -> None:
    flags = {(path, flag) for path, flag, _ in CASES}
    for expected in ((("plan",), "--pool-ratio"), (("predict",), "--isl"), (("simulate",), "--rate")):
        assert expected in flags
    assert len(flags) > 60


@pytest.mark.parametrize(("path", "flag", "value"), CASES, ids=[f"{' '.join(p)} {f}={v}" for p, f, v in CASES])
def test_an_odd_number_gets_an_answer_or_one_line(
    path: tuple[str, ...], flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra: list[str] = []
    if path[0] == "calibrate":
        csv = tmp_path / "m.csv"
        csv.write_text("id,backend,model_path,system,mode,isl,osl\nr1,vllm,acme/x,h100_sxm,agg,8,8\n")
        extra = ["--measurements", str(csv), "--models-dir", str(tmp_path), "--out", str(tmp_path / "p.csv")]
    if path[0] in ("simulate", "sweep"):
        extra = ["--json", "--num-requests", "4"] if flag != "--num-requests" else ["--json"]
    answers_or_one_line([*path, flag, value, *extra], "error: ", capsys)


#: Flags that take a comma-separated list of numbers.
LISTS = ((("predict",), "--concurrency"), (("sweep",), "--rates"), (("sweep",), "--concurrencies"))


@pytest.mark.parametrize(("path", "flag"), LISTS)
@pytest.mark.parametrize("value", ["nan", "inf", "1e30", "-1", "0", "10000000000", "1,nan", "1,,2", ",", "1;2"])
def test_an_odd_list_gets_an_answer_or_one_line_naming_the_flag(
    path: tuple[str, ...], flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--model", "llama-3.1-8b", "--gpu", "h100"]
    if path[0] == "sweep":
        extra += ["--json", "--num-requests", "4", "--duration", "2"]
    answers_or_one_line([*path, flag, value, *extra, "--gpus", "1"], f"error: {flag}", capsys)


@pytest.mark.parametrize("command", [("generate", "--prompt", "hi"), ("serve",), ("calibrate", "local")])
@pytest.mark.parametrize("value", ["nan", "inf", "1e30", "0"])
def test_engine_memory_that_is_no_number_or_more_than_the_machine_is_refused(
    command: tuple[str, ...], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([*command, "--memory-gib", value])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith("error: --memory-gib must be > 0 and at most") and "\n" not in err


@pytest.mark.parametrize("host", ["", " ", "local host"])
def test_serve_refuses_an_empty_or_spaced_host_before_loading_anything(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--host", host])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith("error: --host must be an address or a name") and "\n" not in err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-tokens", "0", "--max-tokens must be a positive integer (got 0)"),
        ("--temperature", "-1", "--temperature must be a finite number >= 0 (got -1.0)"),
        ("--top-p", "2", "--top-p must be in (0, 1] (got 2.0)"),
        ("--top-k", "-1", "--top-k must be >= 0 (got -1)"),
    ],
)
def test_generate_names_the_sampling_flag_it_refuses(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--prompt", "hi", flag, value])
    assert exc.value.code == 2 and capsys.readouterr().err.strip() == f"error: {message}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # found by fuzzing: these hung (too few state slots), or were tracebacks
        (["--prompt", "hello", "--num-pages", "100", "--num-state-slots", "2"], "2 state slots admit no request"),
        (["--prompt", "hello", "--memory-gib", "0.001"], "state slots admit no request: one needs 3"),
        (["--prompt", "ab\udcffcd"], "--prompt is not UTF-8 text"),
        (["--prompt-token-ids", "99999999"], "--prompt-token-ids must be in [0, 4096)"),
        (["--prompt", "hi", "--seed", str(2**64)], "--seed must be a 64-bit integer"),
        (["--prompt", "hi", "--pool-ratio", "1e300"], "--pool-ratio must be a number > 0 and at most 1,000,000"),
        (["--prompt", "hi", "--device", "gpu"], "--device must be one of auto|cpu|cuda|cuda:N (got 'gpu')"),
    ],
)
def test_generate_refuses_what_it_cannot_run_in_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--max-tokens", "2", *args])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith("error: ") and message in err and "\n" not in err, err


def test_generate_at_a_temperature_below_vllms_epsilon_is_greedy(capsys: pytest.CaptureFixture[str]) -> None:
    outs = []
    for temperature in ("0", "5e-324"):
        main(["generate", "--prompt", "hello", "--max-tokens", "4", "--temperature", temperature, "--json"])
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


@pytest.mark.parametrize(
    ("flag", "value"), [("--isl", "100000000000"), ("--osl", "10000001"), ("--probe-tokens", "9223372036854775807")]
)
def test_a_token_count_past_ten_million_is_refused_before_any_request_is_built(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by fuzzing: --isl 10¹¹ built a request's blocks first and filled 24 GB of memory."""
    workload = "interference" if flag == "--probe-tokens" else "random"
    argv = ["simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--workload", workload]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--num-requests", "2", "--rate", "1", flag, value])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err == f"error: {flag} must be an integer from 1 to 10,000,000 (got {value})"


DSPARK = ("--dcp", "8", "--pool-ratio", "6.28", "--speculative", "dspark:7", "--replayssm")
DISAGG = ("--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--decode-workers", "1", "--prefill-workers", "1")
#: Flags that only matter in some runs (a workload, a drafter, disaggregated workers), with such a
#: run: the test above gives them odd values where they are read by nothing.
IN_CONTEXT = (
    (("simulate", "--workload", "long-session"), ("--sessions", "--turns")),
    (("simulate", "--workload", "interference"), ("--probe-tokens",)),
    (("simulate", "--workload", "random", "--num-requests", "4"), ("--isl", "--osl", "--chunk-tokens")),
    (("simulate", *DSPARK, "--duration", "5"), ("--accept-length", "--max-time")),
    (("predict", *DISAGG), ("--decode-gpus", "--prefill-workers", "--decode-workers", "--isl", "--osl")),
    (("predict", *DSPARK), ("--accept-length",)),
    (("predict", *DISAGG, "--speculative", "mtp:3"), ("--accept-length",)),
)


def _flag_kinds() -> dict[tuple[str, str], type]:
    """(command, flag) → the flag's number type, read from the CLI as ``numeric_options`` does."""
    root = typer.main.get_command(app)
    kinds = {}
    for command in ("simulate", "predict"):
        for p in root.commands[command].params:  # type: ignore[attr-defined]
            kind: Any = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            kind = {list[int]: int, list[float]: float}.get(kind, kind)  # a repeatable flag's items
            if p.param_type_name == "option" and kind in ODD:
                kinds[(command, p.opts[0])] = kind
    return kinds


KINDS = _flag_kinds()
CONTEXT_CASES = [
    (run, flag, value) for run, flags in IN_CONTEXT for flag in flags for value in ODD[KINDS[(run[0], flag)]]
]


@pytest.mark.parametrize(
    ("run", "flag", "value"), CONTEXT_CASES, ids=[f"{r[0]} {r[1:3]} {f}={v}" for r, f, v in CONTEXT_CASES]
)
def test_an_odd_number_where_the_flag_is_read_gets_an_answer_or_one_line(
    run: tuple[str, ...], flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found in the thirty-ninth session: with a drafter, `simulate --accept-length nan` was a
    traceback, and `--workload long-session --turns 10000000000` ran out of memory (149 GiB for
    the session schedule) instead of meeting the 1,000,000-request bound."""
    answers_or_one_line([*run, flag, value, "--json"], "error: ", capsys)
