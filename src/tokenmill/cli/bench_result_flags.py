"""``tokenmill bench``'s vLLM result flags: ``--percentile-metrics``/``--metric-percentiles`` read
and checked, and where ``--save-result`` writes (vLLM's file name), checked before the run."""

import math
import os
import time
from pathlib import Path

from tokenmill.errors import TokenmillError

#: vLLM's defaults for the one of --percentile-metrics / --metric-percentiles that is not given.
_DEFAULT_PERCENTILE_METRICS = "ttft,tpot,itl"
_DEFAULT_METRIC_PERCENTILES = "99"


def percentile_flags(metrics: str | None, percentiles: str | None) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """``--percentile-metrics`` and ``--metric-percentiles`` as (metrics, percentiles), each in
    the order given without repeats; () and () when neither is given (the summary's fixed keys
    only), vLLM's default for the one left out otherwise. A bad item is a one-line error naming the
    flag, before the run rather than after it."""
    if metrics is None and percentiles is None:
        return (), ()
    from tokenmill.workload.metrics import PERCENTILE_METRICS

    def got(item: str, text: str) -> str:
        return f"got {text!r}" if "," not in text else f"got {item.strip()!r} in {text!r}"

    allowed = ",".join(PERCENTILE_METRICS)
    text = metrics if metrics is not None else _DEFAULT_PERCENTILE_METRICS
    names = [m.strip() for m in text.split(",")]
    bad = [m for m in names if m not in PERCENTILE_METRICS]
    if bad:
        raise TokenmillError(f"--percentile-metrics must be a comma-separated list of {allowed} ({got(bad[0], text)})")
    text = percentiles if percentiles is not None else _DEFAULT_METRIC_PERCENTILES
    values: list[float] = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            value = math.nan
        if not 0 < value < 100:  # also refuses nan, inf and an empty item
            raise TokenmillError(
                "--metric-percentiles must be a comma-separated list of numbers strictly between 0 and 100 "
                f"({got(item, text)})"
            )
        values.append(value)
    return tuple(dict.fromkeys(names)), tuple(dict.fromkeys(values))


def check_save_result(
    save_result: bool, result_dir: Path | None, result_filename: str | None, output_file: Path | None
) -> None:
    """What can be checked of ``--save-result``'s target before the model name is known: the flags
    go together, the folder exists and is writable, a given file name is a plain name. vLLM
    creates a missing ``--result-dir``; here it is refused, as ``--output-file`` refuses a missing
    folder, since a mistyped directory more often means a lost result than a wanted new one."""
    if save_result and output_file is not None:
        raise TokenmillError("--output-file and --save-result both write the results: give one")
    if not save_result:
        for flag, value in (("--result-dir", result_dir), ("--result-filename", result_filename)):
            if value is not None:
                raise TokenmillError(f"{flag} names where --save-result writes: give --save-result too")
        return
    if result_filename is not None and (
        result_filename.strip() in ("", ".", "..") or any(sep and sep in result_filename for sep in (os.sep, os.altsep))
    ):
        raise TokenmillError(
            f"--result-filename must be a file name, not a path (got {result_filename!r}); the folder is --result-dir"
        )
    folder = result_dir if result_dir is not None else Path(".")
    if not folder.is_dir():
        raise TokenmillError(f"--result-dir: no such directory {folder}")
    if not os.access(folder, os.W_OK):
        raise TokenmillError(f"--result-dir: cannot write in {folder}: permission denied")


def result_path(
    result_dir: Path | None,
    result_filename: str | None,
    backend: str,
    request_rate: float | None,
    max_concurrency: int | None,
    model: str,
) -> Path:
    """Where ``--save-result`` writes: ``--result-filename`` in ``--result-dir`` (default: the
    current directory), or vLLM's name
    ``{backend}-{request_rate}qps[-concurrency{C}]-{model basename}-{YYYYMMDD-HHMMSS}.json``, the
    rate as vLLM's float prints (``inf``, ``2.0``), so InferenceX-style scripts that glob for it
    find it. The time is taken here, before the run, so the name checked is the name written."""
    folder = result_dir if result_dir is not None else Path(".")
    if result_filename is not None:
        return folder / result_filename
    rate = "inf" if request_rate is None else str(float(request_rate))
    conc = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return folder / f"{backend}-{rate}qps{conc}-{model.split('/')[-1]}-{stamp}.json"
