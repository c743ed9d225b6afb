"""``tokenmill bench``: measure a running OpenAI-compatible server the way SGLang's bench_serving does.

The server may be tokenmill's, SGLang's or vLLM's. Requests carry ``ignore_eos`` and
``min_tokens`` (SGLang/vLLM extensions) so answers have the workload's lengths; a server that
rejects unknown fields fails every request with its 400 message in ``errors``. Prompts are
synthetic (``tokenmill.workload.bench_client``). The summary has bench_serving's keys, vLLM's
``request_goodput`` and ``total_token_throughput``, and the simulator's SLO judge.

The command line InferenceX runs with vLLM's client (reference §5.2) runs here as typed:
``--dataset-name``, ``--random-input-len``, ``--random-output-len`` and ``--max-concurrency`` are
second names of ``--workload``, ``--isl``, ``--osl`` and ``--concurrency``; ``--ignore-eos`` is
accepted (always on); ``--percentile-metrics``/``--metric-percentiles`` add vLLM's
``p{P}_{metric}_ms`` keys; ``--save-result`` (with ``--result-dir``/``--result-filename``) writes
what ``--output-file`` writes, under vLLM's file name; ``--burstiness`` gives Gamma gaps.
"""

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, get_args

import typer

from tokenmill.cli.bench_result_flags import check_save_result, percentile_flags, result_path
from tokenmill.cli.options import JsonOpt, check_output
from tokenmill.cli.traffic_options import SeedOpt, TpotOpt, TtftOpt, WorkloadOpt, print_summary, slo_from_flags
from tokenmill.errors import TokenmillError

#: Multi-turn workloads are generated with more and more sessions until they hold --num-prompts turns.
_SESSION_WORKLOADS = ("agentic",)
#: --dataset-name is --workload under bench_serving's name: one option, the shared flag's help.
_WORKLOAD_HELP = get_args(WorkloadOpt)[1].help


def _check(flag: str, ok: bool, what: str, got: object) -> None:
    if not ok:
        raise TokenmillError(f"{flag} must be {what} (got {got})")


def _build_workload(
    name: str,
    num_prompts: int,
    rate: float | None,
    concurrency: int | None,
    seed: int,
    isl: int,
    osl: int,
    range_ratio: float,
    turns: int,
    burstiness: float = 1.0,
) -> Any:
    """The workload's first ``num_prompts`` requests (see ``select_requests``), paced by
    rate/concurrency; a finite rate's gaps are Gamma with shape ``burstiness`` (1: Poisson)."""
    from tokenmill.workload.bench_client import select_requests
    from tokenmill.workload.catalog import WorkloadOptions, make_workload

    finite_rate = rate if rate is not None and math.isfinite(rate) else None
    # rate = inf: every session ready at t = 0, i.e. as many clients as requests (bench_serving's default).
    clients = (
        concurrency if concurrency is not None else (num_prompts if rate is not None and finite_rate is None else None)
    )

    def make(count: int, sessions: int = 4) -> Any:
        # A finite rate paces the arrivals; the client cap (if any) is applied by select_requests.
        gen_conc = None if finite_rate is not None else (clients or 1)
        if name.startswith("trace:") and finite_rate is None and clients is None:
            gen_conc = None  # replay the recorded session starts
        opts = WorkloadOptions(
            rate=finite_rate,
            concurrency=gen_conc,
            num_requests=count,
            seed=seed,
            isl=isl,
            osl=osl,
            range_ratio=range_ratio,
            sessions=sessions,
            turns=turns,
            burstiness=burstiness,
        )
        return make_workload(name, opts)

    min_sessions = concurrency or 1
    if name == "long-session":
        wl = make(num_prompts, max(min_sessions, -(-num_prompts // turns)))
    elif name in _SESSION_WORKLOADS:
        n = 1
        wl = make(n)
        while len(wl.requests) < num_prompts or len(wl.sessions()) < min(min_sessions, num_prompts):
            if n >= num_prompts:
                break
            n = min(num_prompts, 2 * n)
            wl = make(n)
    else:
        wl = make(num_prompts)
    return select_requests(wl, num_prompts, min_sessions=min_sessions, concurrency=clients)


def _model_and_vocab(base_url: str, model: str | None, vocab: int | None) -> tuple[str, int]:
    """``--model`` and ``--tokenizer-vocab``, each from the server's ``/v1/models`` where not given:
    the first model it lists, and that model's ``vocab_size`` where it reports one (else
    ``DEFAULT_VOCAB``). Without ``--model`` a server that does not list one is an error; with it,
    an unreachable server is left to fail the requests, as it would without the question."""
    from tokenmill.workload.bench_client import DEFAULT_VOCAB, check_base_url, reported_vocab, served_models

    if model is not None and vocab is not None:
        return model, vocab
    check_base_url(base_url)
    try:
        entries = served_models(base_url)
    except TokenmillError as exc:
        if model is None:
            raise TokenmillError(f"--model not given, and {exc}; give --model NAME") from None
        entries = []
    if model is None:
        if not entries:
            raise TokenmillError("--model not given, and the server's /v1/models lists no model; give --model NAME")
        model = str(entries[0]["id"])
    if vocab is None:
        vocab = reported_vocab(entries, model) or DEFAULT_VOCAB
    return model, vocab


def bench(
    base_url: Annotated[str, typer.Option("--base-url", help="Server root, e.g. http://127.0.0.1:30000.")],
    num_prompts: Annotated[int, typer.Option("--num-prompts", help="Requests to send (turns, for sessions).")],
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Model name sent in each request; default: the first model the server's /v1/models lists."
        ),
    ] = None,
    workload: Annotated[str, typer.Option("--workload", "--dataset-name", help=_WORKLOAD_HELP)] = "random",
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "--max-concurrency",
            help="Closed loop: requests in flight (bench_serving's --max-concurrency).",
            show_default=False,
        ),
    ] = None,
    request_rate: Annotated[
        float | None,
        typer.Option(
            "--request-rate",
            help="Poisson arrivals per second (sessions/s for multi-turn); inf = all at 0. See --burstiness.",
        ),
    ] = None,
    burstiness: Annotated[
        float | None,
        typer.Option(
            "--burstiness",
            help="With a finite --request-rate: gaps ~ Gamma(shape=B, scale=1/(rate·B)), mean 1/rate, "
            "coefficient of variation 1/√B; 1 = Poisson, larger = more regular, smaller = burstier "
            "(vLLM's --burstiness; unlike vLLM, N requests are not rescaled to span exactly N/rate). "
            "[default: 1]",
            show_default=False,
        ),
    ] = None,
    seed: SeedOpt = 0,
    endpoint: Annotated[str, typer.Option("--endpoint", help="completions (token-id prompts) | chat.")] = "completions",
    isl: Annotated[int, typer.Option("--isl", "--random-input-len", help="random: input length.")] = 1024,
    osl: Annotated[int, typer.Option("--osl", "--random-output-len", help="random: output length.")] = 1024,
    range_ratio: Annotated[
        float, typer.Option("--random-range-ratio", help="random: lengths uniform in [r·len, len].")
    ] = 1.0,
    turns: Annotated[int, typer.Option("--turns", help="long-session: turns per session.")] = 4,
    tokenizer_vocab: Annotated[
        int | None,
        typer.Option(
            "--tokenizer-vocab",
            help="Synthetic token ids are drawn from [0, V); default: the vocab_size the server's /v1/models "
            "reports for the model (tokenmill serve does), else 32,000.",
            show_default=False,
        ),
    ] = None,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="Per-request limit (s); past it, an error.")] = 600.0,
    slo_ttft_ms: TtftOpt = 2000.0,
    slo_tpot_ms: TpotOpt = 25.0,
    output_file: Annotated[
        Path | None, typer.Option("--output-file", help="Write the summary and per-request details (JSON).")
    ] = None,
    save_result: Annotated[
        bool,
        typer.Option(
            "--save-result",
            help="Write what --output-file writes to --result-dir/--result-filename (vLLM's --save-result).",
        ),
    ] = False,
    result_dir: Annotated[
        Path | None,
        typer.Option(
            "--result-dir", help="--save-result: an existing folder to write in. [default: .]", show_default=False
        ),
    ] = None,
    result_filename: Annotated[
        str | None,
        typer.Option(
            "--result-filename",
            help="--save-result: the file name; default vLLM's "
            "{backend}-{rate}qps[-concurrency{C}]-{model basename}-{YYYYMMDD-HHMMSS}.json.",
            show_default=False,
        ),
    ] = None,
    ignore_eos: Annotated[
        bool,
        typer.Option(
            "--ignore-eos",
            help="Always on: every request carries ignore_eos: true and min_tokens = max_tokens, so answers "
            "have the workload's lengths; the flag is accepted for bench_serving's command line.",
        ),
    ] = False,
    percentile_metrics: Annotated[
        str | None,
        typer.Option(
            "--percentile-metrics",
            help="Add p{P}_{metric}_ms keys for these of ttft,tpot,itl,e2el (vLLM's flag; default with "
            "--metric-percentiles: ttft,tpot,itl). The mean/median/std/p90/p95/p99 keys are always there.",
            show_default=False,
        ),
    ] = None,
    metric_percentiles: Annotated[
        str | None,
        typer.Option(
            "--metric-percentiles",
            help="The percentiles P of --percentile-metrics, comma-separated, each in (0, 100), e.g. 50,99.9 "
            "(vLLM's flag; default with --percentile-metrics: 99).",
            show_default=False,
        ),
    ] = None,
    num_warmups: Annotated[
        int,
        typer.Option(
            "--num-warmups",
            help="Untimed requests sent first (the same workload drawn with seed + 1, at --concurrency), "
            "left out of every metric: a server's first requests pay one-time costs (vLLM's --num-warmups).",
        ),
    ] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Benchmark an OpenAI-compatible server: bench_serving's summary, goodput and SLO attainment."""
    from tokenmill.workload.arrivals import MAX_REQUESTS
    from tokenmill.workload.bench_client import BenchConfig, bench_summary, request_details, run
    from tokenmill.workload.catalog import WORKLOADS, check_burstiness

    del ignore_eos  # always on (see its help): nothing to do
    _check("--num-prompts", 1 <= num_prompts <= MAX_REQUESTS, f"an integer from 1 to {MAX_REQUESTS:,}", num_prompts)
    if workload not in WORKLOADS and not workload.startswith("trace:"):
        raise TokenmillError(f"--workload (--dataset-name) must be one of {'|'.join(WORKLOADS)} (got {workload!r})")
    check_output("--output-file", output_file)  # before the run, not found unwritable after it
    check_save_result(save_result, result_dir, result_filename, output_file)
    pct_metrics, pct_values = percentile_flags(percentile_metrics, metric_percentiles)
    if concurrency is not None:
        _check("--concurrency", concurrency >= 1, "a positive integer", concurrency)
    if request_rate is not None:
        _check("--request-rate", request_rate > 0, "> 0 (or inf)", request_rate)
    if burstiness is not None:
        check_burstiness(burstiness, request_rate, workload, "--request-rate", given=True)
    if concurrency is None and request_rate is None and not workload.startswith("trace:"):
        raise TokenmillError("give --concurrency C (closed loop) or --request-rate R (Poisson), or both")
    _check("--isl", isl >= 1, "a positive integer", isl)
    _check("--osl", osl >= 1, "a positive integer", osl)
    _check("--random-range-ratio", 0 <= range_ratio <= 1, "between 0 and 1", range_ratio)
    _check("--turns", turns >= 1, "a positive integer", turns)
    _check("--timeout-s", timeout_s > 0 and math.isfinite(timeout_s), "a finite number > 0", timeout_s)
    if tokenizer_vocab is not None:
        _check("--tokenizer-vocab", tokenizer_vocab >= 2, "an integer >= 2", tokenizer_vocab)
    _check("--seed", seed >= 0, "an integer >= 0", seed)
    _check("--num-warmups", 0 <= num_warmups <= MAX_REQUESTS, f"an integer from 0 to {MAX_REQUESTS:,}", num_warmups)
    slo = slo_from_flags(slo_ttft_ms, slo_tpot_ms)
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise TokenmillError("tokenmill bench needs httpx: pip install httpx") from None
    model, vocab = _model_and_vocab(base_url, model, tokenizer_vocab)
    config = BenchConfig(base_url=base_url, model=model, endpoint=endpoint, seed=seed, vocab=vocab, timeout_s=timeout_s)
    saved = None
    if save_result:  # the whole target, now that the model is known: before the run, not after it
        saved = result_path(result_dir, result_filename, config.backend, request_rate, concurrency, model)
        check_output("--save-result", saved)
    bursts = burstiness if burstiness is not None else 1.0
    wl = _build_workload(
        workload, num_prompts, request_rate, concurrency, seed, isl, osl, range_ratio, turns, burstiness=bursts
    )
    # The warm-up: the workload drawn again with seed + 1 (other prompts, so none of the timed ones
    # is in the server's prefix cache before it is sent), closed loop at --concurrency or all at once.
    warm = None
    if num_warmups:
        rate = None if concurrency else math.inf
        try:
            warm = _build_workload(workload, num_warmups, rate, concurrency, seed + 1, isl, osl, range_ratio, turns)
        except TokenmillError as exc:
            raise TokenmillError(str(exc).replace("--num-prompts", "--num-warmups")) from None
    extra: dict[str, Any] = {"num_warmups": num_warmups, "tokenizer_vocab": vocab}
    if workload == "random":
        extra |= {"random_input_len": isl, "random_output_len": osl, "random_range_ratio": range_ratio}

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    show = not json_out and sys.stderr.isatty()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), disable=not show, transient=True) as progress:
        if warm is not None:
            warming = progress.add_task("warm-up", total=len(warm.requests))
            warm_result = run(warm, replace(config, seed=seed + 1), on_done=lambda _o: progress.advance(warming))
            failed = [o for o in warm_result.outcomes if o.error is not None]
            if failed:
                raise TokenmillError(
                    f"--num-warmups: {len(failed)} of {len(warm.requests)} warm-up requests failed, "
                    f"the first with: {failed[0].error}"
                )
        task = progress.add_task(f"bench {workload}", total=len(wl.requests))
        result = run(wl, config, on_done=lambda _o: progress.advance(task))
    summary = bench_summary(
        result,
        config,
        slo,
        dataset_name=workload,
        request_rate=request_rate,
        max_concurrency=concurrency,
        extra=extra,
        burstiness=bursts,
        percentile_metrics=pct_metrics,
        metric_percentiles=pct_values,
    )
    for flag, path in (("--output-file", output_file), ("--save-result", saved)):
        if path is not None:
            try:
                path.write_text(json.dumps(summary | request_details(result), indent=2) + "\n")
            except OSError as exc:
                raise TokenmillError(f"{flag} {str(path)!r}: {exc.strerror or exc}") from None
    if json_out:
        print(json.dumps(summary, indent=2))
        return
    print_summary(summary, f"{model} at {config.url}: {workload}, {len(wl.requests)} requests")
    if saved is not None:  # its name has the time in it: say which file it is
        print(f"results saved to {saved}", file=sys.stderr)
    if summary["errors"]:
        distinct = list(dict.fromkeys(e.split(": ", 1)[1] for e in summary["errors"]))
        print(f"{len(summary['errors'])} requests failed; errors:", file=sys.stderr)
        for message in distinct[:5]:
            print(f"  {message}", file=sys.stderr)
