"""Options shared by several commands (model, GPU, layout), declared once.

``with_layout_options`` adds the layout flags of ``tokenmill plan`` to a command's signature and
hands them to it as one ``layout_flags`` dict, so ``plan``, ``simulate`` and ``sweep`` accept
exactly the same flags with the same help.
"""

import functools
import inspect
import os
import sys
from collections import Counter
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.errors import TokenmillError
from tokenmill.paths import path_exists, path_is_dir

FIGURE_SUFFIXES = (".png", ".svg")


def check_output(flag: str, path: Path | None, suffixes: tuple[str, ...] = ()) -> None:
    """Refuse, before any work, an output file the command could not write at the end: a suffix
    it does not write, a folder that is missing, a directory where the file should be. A command
    writes everything it was asked to or nothing, and a long run should not end in a traceback at
    its last file."""
    if path is None:
        return
    if suffixes and path.suffix.lower() not in suffixes:
        raise TokenmillError(f"{flag} must end in {' or '.join(suffixes)} (got {path.name!r})")
    try:
        path.stat()
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte: no file could be written there
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        shown = str(path) if len(str(path)) <= 80 else str(path)[:80] + "…"
        raise TokenmillError(f"{flag}: cannot write {shown!r}: {reason}") from None
    folder = path.parent
    if path_is_dir(path):
        raise TokenmillError(f"{flag}: {path} is a directory, not a file")
    if not path_is_dir(folder):
        raise TokenmillError(f"{flag}: cannot write {path}: no such directory {folder}")
    if not os.access(folder, os.W_OK) or (path_exists(path) and not os.access(path, os.W_OK)):
        raise TokenmillError(f"{flag}: cannot write {path}: permission denied")


def check_distinct_outputs(outputs: list[tuple[str, Path | None]], source: tuple[str, Path] | None = None) -> None:
    """Refuse an output that is the input file or another output: the run would destroy what it
    reads, or write one file twice and keep the last (``--figure P.png --latency-figure P.png``)."""
    seen: dict[Path, str] = {}
    if source is not None:
        seen[source[1].resolve()] = source[0]
    for flag, path in outputs:
        if path is None:
            continue
        key = path.resolve()
        if key in seen and seen[key] == flag:
            raise TokenmillError(f"{flag}: {path} is named twice: name each file once")
        if key in seen:
            raise TokenmillError(f"{flag}: {path} is also {seen[key]}: write it to another file")
        seen[key] = flag


def check_figures(flag: str, paths: list[Path] | None) -> list[Path]:
    """The files of a repeatable figure flag (``--figure m.png --figure m.svg``: one run draws the
    same figure as a picture and as a vector file), each checked as ``check_output`` checks one, and
    none named twice."""
    figures = list(paths or [])
    for path in figures:
        check_output(flag, path, FIGURE_SUFFIXES)
    check_distinct_outputs([(flag, path) for path in figures])
    return figures


def _flag_bool(value: str) -> bool:
    if value.lower() in ("1", "true", "on", "yes"):
        return True
    if value.lower() in ("0", "false", "off", "no"):
        return False
    raise ValueError(value)


#: The layout fields a KEY=VALUE item may set (``--compare``, ``--decode-layout``) and how each is
#: parsed: a Python type, or the name of a parser in ``tokenmill.plan`` (imported only when an item
#: is parsed, so that the CLI's start does not pay for the planner).
_LAYOUT_PARSERS: dict[str, Any] = {
    "tp": int,
    "ep": int,
    "pp": int,
    "dp_attention": int,
    "dcp": int,
    "page_size": int,
    "swa_full_tokens_ratio": float,
    "max_running_requests": int,
    "avg_request_tokens": int,
    "pool_ratio": float,
    "mem_fraction_static": float,
    "kv_cache_dtype": "KVDtype.parse",
    "prefix_cache": "PrefixCache",
    "speculative": "Speculation.parse",
    "replayssm": _flag_bool,
    "moe_a2a_backend": str,
}
#: Those fields as an item spells them (dashes for underscores).
ITEM_KEYS = tuple(k.replace("_", "-") for k in _LAYOUT_PARSERS)


def layout_converters() -> dict[str, Any]:
    """``_LAYOUT_PARSERS`` with the planner's parsers resolved: each raises a ValueError or a
    one-line TokenmillError for a bad value."""
    import tokenmill.plan as plan

    def resolve(parser: Any) -> Any:
        if not isinstance(parser, str):
            return parser
        owner, _, attr = parser.partition(".")
        obj = getattr(plan, owner)
        return getattr(obj, attr) if attr else obj

    return {key: resolve(parser) for key, parser in _LAYOUT_PARSERS.items()}


def layout_changes(items: list[tuple[str, str]], where: str) -> dict[str, Any]:
    """(field name, value) pairs → layout fields, the pool sizing's two alternatives kept apart;
    one-line errors naming ``where`` and the key."""
    converters = layout_converters()
    changes: dict[str, Any] = {}
    for key, value in items:
        flag = key.replace("_", "-")
        conv = converters[key]
        try:
            changes[key] = conv(value.strip())
        except TokenmillError as exc:  # the parser's own one-line error, which names the flag
            raise TokenmillError(f"{where}: {exc}") from None
        except ValueError:
            kind = {int: "an integer", float: "a number", _flag_bool: "true or false"}.get(conv)
            if kind is None and isinstance(conv, type) and issubclass(conv, Enum):
                kind = "one of " + "|".join(str(m.value) for m in conv)
            if kind is not None:
                raise TokenmillError(f"{where}: {flag} must be {kind} (got {value.strip()!r})") from None
            raise TokenmillError(f"{where}: {flag}: bad value {value.strip()!r}") from None
    if "pool_ratio" in changes:
        changes.setdefault("avg_request_tokens", None)
    if "avg_request_tokens" in changes and changes["avg_request_tokens"] is not None:
        changes.setdefault("pool_ratio", None)
    return changes


def apply_overrides(base: Any, spec: str, gpus: int) -> tuple[Any, int]:
    """``--compare "dcp=8,pool-ratio=8.82"``: a layout that differs from the base in a few flags."""
    converters = layout_converters()
    items: list[tuple[str, str]] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or (key not in converters and key != "gpus"):
            allowed = ", ".join(sorted(k.replace("_", "-") for k in converters)) + ", gpus, gpu"
            raise TokenmillError(f"--compare item {item!r} must be KEY=VALUE with KEY one of {allowed}")
        if key == "gpus":
            try:
                gpus = int(value)
            except ValueError:
                raise TokenmillError(f"--compare gpus must be a positive integer (got {value.strip()!r})") from None
        else:
            items.append((key, value))
    return base.with_(**layout_changes(items, "--compare")), gpus


def compared_plans(base: Any, compare: list[str] | None, label: list[str] | None, gpus: int) -> list[tuple[str, Any]]:
    """The base plan and one per ``--compare`` item, each with its name: its ``--label`` (in order),
    else its description, with its ``--compare`` item where that repeats an earlier name
    (``TP8 (pool-ratio=0.9)``), and the GPU where the items put layouts on several (``gpu=a100``).
    More labels than layouts, or two layouts with one name, is an error: results are keyed by
    name, and one would replace the other."""
    from tokenmill.plan import plan_memory

    plans = [base]
    for item in compare or []:
        gpu, rest = compared_gpu(item, base.gpu)
        layout, n = apply_overrides(base.layout, rest, gpus)
        plans.append(plan_memory(base.model, gpu, n, layout))
    described = on_gpus([plan.layout.describe() for plan in plans], [plan.gpu.name for plan in plans])
    names = layout_names(described, compare, label)
    return list(zip(names, plans, strict=True))


def compared_gpu(item: str, default: Any, key: str = "gpu") -> tuple[Any, str]:
    """A ``--compare`` item's GPU under ``key`` (``gpu=a100``, or ``decode-gpu=h20`` for the decode
    workers; ``default`` without one) and the rest of the item, a one-line error naming the item
    for a GPU the catalog does not know."""
    from tokenmill.hardware import load_gpu

    gpu, rest = default, []
    for part in filter(None, (s.strip() for s in item.split(","))):
        name, sep, value = part.partition("=")
        if sep and name.strip().lstrip("-").replace("_", "-") == key:
            try:
                gpu = load_gpu(value.strip())
            except TokenmillError as exc:
                raise TokenmillError(f"--compare {item!r}: {key}: {exc}") from None
        else:
            rest.append(part)
    return gpu, ",".join(rest)


def on_gpus(described: list[str], gpus: list[str]) -> list[str]:
    """Layout descriptions with `` on GPU`` where the layouts run on more than one kind of GPU."""
    return [f"{d} on {g}" for d, g in zip(described, gpus, strict=True)] if len(set(gpus)) > 1 else described


def layout_names(described: list[str], compare: list[str] | None, label: list[str] | None) -> list[str]:
    """Names of the base and its ``--compare`` layouts (``described``: their descriptions, the base
    first): the ``--label`` values in order, else the description, with its ``--compare`` item
    where that repeats an earlier name. More labels than layouts, or two layouts with one name, is
    an error: results are keyed by name, and one would replace the other."""
    names = list(label or [])
    if len(names) > len(described):
        raise TokenmillError(
            f"{len(names)} --label values for {len(described)} layout(s): the base and one per --compare"
        )
    for i in range(len(names), len(described)):
        name = described[i]
        names.append(f"{name} ({(compare or [])[i - 1]})" if i and name in names else name)
    repeated = [name for name, n in Counter(names).items() if n > 1]
    if repeated:
        raise TokenmillError(f"two layouts share the name {repeated[0]!r}: give each its own --label")
    return names


def parse_number_list(text: str | None, flag: str, cast: Callable[[str], Any]) -> list[Any]:
    """``1,16,64`` → [1, 16, 64] (``cast`` each), or [] for no text; one-line errors naming ``flag``
    for a value that is not a number of that kind, or not finite and > 0."""
    if not text:
        return []
    try:
        values = [cast(v) for v in text.split(",") if v.strip()]
    except ValueError:
        kind = "integers" if cast is int else "numbers"
        raise TokenmillError(f"{flag} must be a comma-separated list of {kind} (got {text!r})") from None
    if not values or any(not 0 < v < float("inf") for v in values):  # also refuses nan
        raise TokenmillError(f"{flag} values must be finite numbers > 0 (got {text!r})")
    return values


ModelOpt = Annotated[str, typer.Option("--model", help="Preset name, config.json path or model directory.")]
GpuOpt = Annotated[str, typer.Option("--gpu", help="GPU name from `tokenmill gpus`, or a .toml file.")]
GpusOpt = Annotated[int, typer.Option("--gpus", help="GPUs in the deployment.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object and nothing else.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="A what-if on the cost model's constants after the fitted ones: KEY=VALUE, e.g. "
        "collective_latency_s=5e-6 for a build with faster all-reduces (repeatable).",
    ),
]

_LAYOUT: list[tuple[str, Any, Any]] = [
    ("tp", Annotated[int | None, typer.Option("--tp", help="Tensor parallel size (default: gpus / pp).")], None),
    ("ep", Annotated[int, typer.Option("--ep", help="Expert parallel size.")], 1),
    ("pp", Annotated[int, typer.Option("--pp", help="Pipeline stages.")], 1),
    ("dp_attention", Annotated[int, typer.Option("--dp-attention", help="Attention data-parallel size (1 = off).")], 1),
    ("dcp", Annotated[int, typer.Option("--dcp", help="Decode context parallel size.")], 1),
    ("kv_cache_dtype", Annotated[str, typer.Option("--kv-cache-dtype", help="auto|bf16|fp8_e4m3")], "auto"),
    ("state_dtype", Annotated[str | None, typer.Option("--state-dtype", help="fp32|bf16 (default: model's)")], None),
    (
        "prefix_cache",
        Annotated[str, typer.Option("--prefix-cache", help="extra_buffer|extra_buffer_lazy|no_buffer|off")],
        "extra_buffer",
    ),
    ("speculative", Annotated[str, typer.Option("--speculative", help="none|dspark:B|mtp:N")], "none"),
    (
        "replayssm",
        Annotated[bool, typer.Option("--replayssm/--no-replayssm", help="ReplaySSM for speculation.")],
        False,
    ),
    ("mem_fraction_static", Annotated[float, typer.Option("--mem-fraction-static")], 0.85),
    (
        "weight_format",
        Annotated[
            str | None,
            typer.Option(
                "--weight-format",
                help="Linear weights served as bf16|fp16|fp8|fp8_block|nvfp4 (default: the checkpoint's).",
            ),
        ],
        None,
    ),
    ("expert_format", Annotated[str | None, typer.Option("--expert-format", help="mxfp4|nvfp4|fp8|bf16")], None),
    ("pool_ratio", Annotated[float | None, typer.Option("--pool-ratio", help="State pool ÷ KV pool bytes.")], None),
    (
        "avg_request_tokens",
        Annotated[int | None, typer.Option("--avg-request-tokens", help="L for the ratio calculator.")],
        None,
    ),
    ("max_running_requests", Annotated[int | None, typer.Option("--max-running-requests")], None),
    ("page_size", Annotated[int, typer.Option("--page-size")], 64),
    (
        "swa_full_tokens_ratio",
        Annotated[
            float | None,
            typer.Option(
                "--swa-full-tokens-ratio",
                help="Sliding-window layers' cache tokens per full layer's (SGLang's; default 0.8; "
                "Gemma 2/3 keep one pool, 1, whatever it says).",
            ),
        ],
        None,
    ),
    ("moe_a2a_backend", Annotated[str, typer.Option("--moe-a2a-backend", help="none|deepep|megamoe")], "none"),
    (
        "pool_budget_gib",
        Annotated[float | None, typer.Option("--pool-budget-gib", help="Bytes left for both pools (skips profiling).")],
        None,
    ),
]
LAYOUT_KEYS = tuple(name for name, _, _ in _LAYOUT)
_LAYOUT_DEFAULTS = {name: default for name, _, default in _LAYOUT}
LaunchOpt = Annotated[
    str | None,
    typer.Option(
        "--launch",
        help="An SGLang or vLLM launch command, quoted: its model, GPUs, parallel sizes, memory, cache "
        "and speculation flags stand in for tokenmill's (a layout flag that disagrees is an error; "
        "--model and --gpus, when given, win).",
    ),
]


def _flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def apply_launch(text: str, kwargs: dict[str, Any], flags: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """Fold a ``--launch`` command into a command's arguments (``kwargs``: model, gpus, backend
    where the command has them; ``defaults``: their declared defaults) and its layout ``flags``, in
    place; return the notes to print. A layout flag given on tokenmill's command line and set
    otherwise by the launch command is refused: which of the two was meant is not ours to guess."""
    from tokenmill.plan.launch_reading import read_launch

    reading = read_launch(text)
    if "gpu" in kwargs:
        from tokenmill.hardware.engines import check_engine_runs_on

        check_engine_runs_on(reading.engine, load_gpu_flag(kwargs["gpu"]), "--launch: engine")
    for key, value in reading.flags.items():
        given = flags.get(key, _LAYOUT_DEFAULTS[key])
        if given != _LAYOUT_DEFAULTS[key] and given != value:
            raise TokenmillError(
                f"{_flag_name(key)} {given} disagrees with --launch, which sets it to {value}: give one of the two"
            )
        flags[key] = value
    try:  # the reading's values through the checks of the flags they stand for, named as its own
        layout_from_flags({**_LAYOUT_DEFAULTS, **flags}, reading.gpus)
    except TokenmillError as exc:
        if any(_flag_name(key) in str(exc) for key in reading.flags):
            raise TokenmillError(f"--launch: {exc}") from None
    notes: list[str] = list(reading.notes)
    if "model" in kwargs and reading.model is not None:
        if kwargs["model"] == defaults.get("model"):
            kwargs["model"] = reading.model
        elif kwargs["model"] != reading.model:
            notes.append(f"--model {kwargs['model']} stands in for the command's {reading.model}")
    if "gpus" in kwargs and kwargs["gpus"] == defaults.get("gpus"):
        kwargs["gpus"] = reading.gpus
    if "backend" in kwargs and kwargs["backend"] == defaults.get("backend"):
        kwargs["backend"] = reading.engine
    if reading.not_read:
        notes.append("not read (no effect on memory or time): " + " ".join(reading.not_read))
    if reading.not_modelled:
        notes.append("not modelled: " + " ".join(reading.not_modelled))
    return [f"--launch: {n}" for n in notes]


def with_layout_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Append the layout flags to ``fn``'s CLI signature; ``fn`` gets them as ``layout_flags``."""
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.name != "layout_flags"]
    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
        for name, ann, default in [*_LAYOUT, ("launch", LaunchOpt, None)]
    ]
    defaults = {p.name: p.default for p in params}
    positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keyword = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in params
        if p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        flags = {k: kwargs.pop(k) for k in LAYOUT_KEYS if k in kwargs}
        launch = kwargs.pop("launch", None)
        notes = apply_launch(launch, kwargs, flags, defaults) if launch is not None else []
        result = fn(*args, layout_flags=flags, **kwargs)
        for note in notes:  # after the answer: a command that refuses prints its one line alone
            print(f"note: {note}", file=sys.stderr)
        return result

    wrapper.__signature__ = sig.replace(parameters=[*positional, *keyword, *extra])  # type: ignore[attr-defined]
    return wrapper


def layout_from_flags(flags: dict[str, Any], gpus: int) -> Any:
    """A ``Layout`` from the shared flags, with one-line errors naming the flag."""
    from tokenmill.plan import KVDtype, Layout, PrefixCache, Speculation, StateDtype
    from tokenmill.units import gib_to_bytes

    pp = flags["pp"]
    tp = flags["tp"] if flags["tp"] is not None else max(1, gpus // max(1, pp))
    if flags["pool_ratio"] is not None and flags["avg_request_tokens"] is not None:
        raise TokenmillError("--pool-ratio and --avg-request-tokens are alternatives: give one")
    try:
        prefix = PrefixCache(flags["prefix_cache"])
    except ValueError:
        allowed = "|".join(p.value for p in PrefixCache)
        raise TokenmillError(f"--prefix-cache must be one of {allowed} (got {flags['prefix_cache']!r})") from None
    budget = flags["pool_budget_gib"]
    if budget is not None and not 0 < budget < float("inf"):  # also refuses nan
        raise TokenmillError(f"--pool-budget-gib must be a finite number > 0 (got {budget})")
    return Layout(
        tp=tp,
        ep=flags["ep"],
        pp=pp,
        dp_attention=flags["dp_attention"],
        dcp=flags["dcp"],
        kv_cache_dtype=KVDtype.parse(flags["kv_cache_dtype"]),
        state_dtype=StateDtype.parse(flags["state_dtype"]) if flags["state_dtype"] else None,
        prefix_cache=prefix,
        speculative=Speculation.parse(flags["speculative"]),
        replayssm=flags["replayssm"],
        mem_fraction_static=flags["mem_fraction_static"],
        pool_ratio=flags["pool_ratio"],
        avg_request_tokens=flags["avg_request_tokens"],
        max_running_requests=flags["max_running_requests"],
        page_size=flags["page_size"],
        swa_full_tokens_ratio=flags["swa_full_tokens_ratio"],
        moe_a2a_backend=flags["moe_a2a_backend"],
        pool_budget_bytes=gib_to_bytes(budget) if budget is not None else None,
    )


def load_gpu_flag(name: str, flag: str = "--gpu") -> Any:
    from tokenmill.hardware import load_gpu

    try:
        return load_gpu(name)
    except TokenmillError as exc:
        raise TokenmillError(f"{flag}: {exc}") from None


def build_plan(model: str, gpu: str, gpus: int, flags: dict[str, Any]) -> Any:
    """Model, GPU and layout flags → a ``MemoryPlan`` (the common first step of several commands)."""
    from tokenmill.plan import plan_memory
    from tokenmill.spec import load_model

    spec = load_model(model, flags.get("expert_format"), flags.get("weight_format"))
    hw = load_gpu_flag(gpu)
    layout = layout_from_flags(flags, gpus)
    return plan_memory(spec, hw, gpus, layout)
