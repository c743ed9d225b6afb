"""Benchmark: the replay's few measured waves against the ten waves a benchmark runs.

InferenceX sends 10 × C requests from C lanes, so its mean TTFT and TPOT weigh ten waves alike: the
first (a burst reaching an idle server), the second (that burst's aftermath) and eight more. The
replay measures two waves after the first (one from ``replay.LARGE_WORKER`` lanes) and weighs them
(``replay._groups``): since the sixty-first session the first and second waves 1/10 each and the
third 8/10; before, the second and third alike for 9/10. This replays each point's two regimes
(lanes in lock step, drifted apart) twice, lane by lane: as ``predict --exact`` does, and with all
nine waves after the first measured, whose plain mean over every request is the benchmark's, and
prints how far each weighting lies from it.

    .venv/bin/python benchmarks/wave_weights_check.py [--points N] [--seed S] [--match TEXT]

The points are random: the twelve models of ``saturated_check.py``'s random points, four GPUs, 1–8
GPUs with TP, the three engines, the calibration file's lengths and 4 to 256 lanes (where two
waves are measured), skipping what does not fit.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Iterator
from typing import Any

# this script's folder is first on sys.path when it runs: the random points' models are that check's,
# and a point is caught from `predict` as lock_step_sample_check catches it
from lock_step_sample_check import lock_step_point
from saturated_check import random_deployment

from tokenmill.perf import replay

LENGTHS = [(1024, 1024), (1024, 8192), (8192, 1024), (4096, 16), (1000, 100), (2048, 128), (8000, 1000)]
LANES = [4, 8, 16, 32, 64, 128, 256]


def _points(seed: int) -> Iterator[tuple[str, str]]:
    """(label, `predict` arguments) of random points, without end."""
    rng = random.Random(seed)
    while True:
        model, gpu, backend, gpus = random_deployment(rng)
        isl, osl = rng.choice(LENGTHS)
        lanes = rng.choice(LANES)
        label = f"{model} {gpus}×{gpu.upper()} {backend} {isl:,}/{osl:,} C={lanes}"
        flags = (
            f"--model {model} --gpu {gpu} --gpus {gpus} --tp {gpus} --backend {backend} "
            f"--isl {isl} --osl {osl} --concurrency {lanes}"
        )
        yield label, flags


def _means(reqs: list[Any]) -> tuple[float, float]:
    """Plain mean TTFT and TPOT (over requests of more than one token) of finished requests."""
    done = [r for r in reqs if r.req.finish_s is not None and r.req.first_token_s is not None]
    ttft = statistics.fmean([r.req.first_token_s - r.send_s for r in done])
    tpots = [(r.req.finish_s - r.req.first_token_s) / (r.req.output_len - 1) for r in done if r.req.output_len > 1]
    return ttft, statistics.fmean(tpots) if tpots else 0.0


def _old_weights(reqs: list[Any], first_wave: int) -> tuple[float, float]:
    """The weighting before: the first wave 1/10, every measured request after it alike for 9/10."""
    first = _means([r for r in reqs if r.index < first_wave])
    rest = _means([r for r in reqs if r.index >= first_wave])
    return tuple(0.1 * a + 0.9 * b for a, b in zip(first, rest, strict=True))  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=20, help="random points to replay")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--match", default="", help="only the points whose label contains this")
    args = ap.parse_args()
    print(f"{'point':58} {'regime':9}  now: TTFT / TPOT       before: TTFT / TPOT   (against all ten waves)")
    worst = {"now": [0.0, 0.0], "before": [0.0, 0.0]}
    errors: dict[str, list[float]] = {"now": [], "before": []}
    done = 0
    t0 = time.perf_counter()
    for label, flags in _points(args.seed):
        if done >= args.points:
            break
        if args.match not in label:
            continue
        point = lock_step_point(flags)
        if point is None:
            continue
        done += 1
        for sync, name in ((1, "lock step"), (0, "drifted")):
            shipped = point.loop(sync)
            every = point.loop(sync, measured_waves=replay.WAVES - 1)
            truth = _means(every.reqs)
            now = replay.request_means(shipped.reqs, shipped.first_wave)
            cells = []
            before = _old_weights(shipped.reqs, shipped.first_wave)
            for key, (ttft, tpot) in (("now", (now.ttft, now.tpot)), ("before", before)):
                dt, dp = ttft / truth[0] - 1, (tpot / truth[1] - 1) if truth[1] else 0.0
                worst[key] = [max(worst[key][0], abs(dt)), max(worst[key][1], abs(dp))]
                errors[key].append(abs(dt))
                cells.append(f"{100 * dt:+8.2f}% / {100 * dp:+6.2f}%")
            print(f"{label:58} {name:9}  {cells[0]}   {cells[1]}", flush=True)
    for key in ("now", "before"):
        e = errors[key]
        print(
            f"{key:6}: TTFT beyond 2 % at {sum(x > 0.02 for x in e)} and beyond 10 % at {sum(x > 0.1 for x in e)} of "
            f"{len(e)} regimes, largest {100 * worst[key][0]:.2f} %; TPOT largest {100 * worst[key][1]:.2f} %"
        )
    print(f"{done} points, {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
