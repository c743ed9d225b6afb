"""``predict --measured``: benchmark results of the deployment beside its prediction.

Each file is one closed-loop point (``workload.bench_result``); several are a sweep over
concurrency at one ISL and OSL. The prediction is made at the files' points, and each point gets
the measurement, the signed error of the prediction (predicted ÷ measured − 1, as ``calibrate
evaluate``'s bias) and whether the measurement lies in the band 80 % of the calibration rows like
it measured in.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenmill.errors import TokenmillError

if TYPE_CHECKING:  # the workload package brings numpy: not on the CLI's start (tests/test_cli.py)
    from tokenmill.workload.bench_result import MeasuredPoint


def measured_points(
    paths: list[Path], isl: tuple[int, int], osl: tuple[int, int], concurrency: str, comparing: bool
) -> list[MeasuredPoint]:
    """The files' points, by concurrency. ``isl``/``osl``: (given, default). A flag given beside
    them that names another point is refused, as are files of other lengths, two files at one
    concurrency, and ``--compare`` (the measurements are of one deployment)."""
    from tokenmill.workload.bench_result import read_bench_results

    if comparing:
        raise TokenmillError("--measured is of one deployment: it takes no --compare or --label")
    runs = [run for p in paths for run in read_bench_results(p)]  # JSON lines: every run a point
    first = runs[0]
    for run in runs[1:]:
        if (run.isl, run.osl) != (first.isl, first.osl):
            raise TokenmillError(
                f"--measured files of one curve share ISL and OSL: {first.source} ran {first.isl:,}/{first.osl:,}, "
                f"{run.source} {run.isl:,}/{run.osl:,}"
            )
    levels = [run.concurrency for run in runs]
    for i, run in enumerate(runs):
        other = next((o for o in runs[:i] if o.concurrency == run.concurrency), None)
        if other is not None:
            raise TokenmillError(
                f"--measured: {other.source} and {run.source} both ran {run.concurrency:,} lanes; "
                "keep one run a concurrency"
            )
    ran = ",".join(str(c) for c in sorted(levels))
    for flag, (given, default), value in (("--isl", isl, first.isl), ("--osl", osl, first.osl)):
        if given != default and given != value:
            raise TokenmillError(f"{flag} {given} disagrees with --measured, which ran {value}: give one of the two")
    if concurrency != "1" and ",".join(sorted(concurrency.replace(" ", "").split(","), key=_int_or_text)) != ran:
        raise TokenmillError(f"--concurrency {concurrency} disagrees with --measured, which ran {ran}: give one")
    return sorted(runs, key=lambda r: r.concurrency)


def _int_or_text(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (0, text)


def against_measured(run: MeasuredPoint, out: dict[str, Any]) -> dict[str, Any]:
    """The measurement beside one predicted point (``Prediction.to_dict()`` with its accuracy)."""
    acc = out.get("accuracy") or {}

    def error(key: str, measured: float | None) -> float | None:
        predicted = out.get(key)
        if measured is None or predicted is None or measured <= 0:
            return None
        return round(float(predicted) / measured - 1.0, 4)

    def inside(key: str, measured: float | None) -> bool | None:
        band = acc.get(f"{key}_range_80")
        return None if band is None or measured is None else band[0] <= measured <= band[1]

    per_gpu = None if run.output_throughput is None else round(run.output_throughput / out["gpus"], 3)
    return {
        "file": run.source,
        "concurrency": run.concurrency,
        "completed": run.completed,
        "ttft_ms": run.ttft_ms,
        "tpot_ms": run.tpot_ms,
        "output_throughput_per_gpu": per_gpu,
        "ttft_error": error("ttft_ms", run.ttft_ms),
        "tpot_error": error("tpot_ms", run.tpot_ms),
        "ttft_in_band": inside("ttft_ms", run.ttft_ms),
        "tpot_in_band": inside("tpot_ms", run.tpot_ms),
        "notes": list(run.notes),
    }


def print_measured(m: dict[str, Any]) -> None:
    """One line: the measured means, each with the prediction's signed error and the band."""

    def part(name: str, key: str, digits: int) -> str:
        value, err, band = m[f"{key}_ms"], m[f"{key}_error"], m[f"{key}_in_band"]
        if value is None:
            return f"{name} —"
        text = f"{name} {value:,.{digits}f} ms"
        if err is not None:
            text += f" (predicted {err:+.1%}"
            text += "" if band is None else (", inside the band" if band else ", outside the band")
            text += ")"
        return text

    where = f"{m['file']}, {m['completed']:,} requests at concurrency {m['concurrency']:,}"
    print(f"measured ({where}): {part('TTFT', 'ttft', 1)}, {part('TPOT', 'tpot', 2)}")
    for note in m["notes"]:
        print(f"note: --measured {m['file']}: {note}")
