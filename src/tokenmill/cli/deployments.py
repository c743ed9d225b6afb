"""The deployments ``tokenmill predict`` answers for: one aggregated worker, or prefill and decode
workers, the base from the flags and one per ``--compare`` item.

``--compare`` takes the layout keys of ``sweep --compare`` (``options.apply_overrides``) and, for
``predict``, the keys of disaggregation: ``prefill-workers``, ``decode-workers``, ``decode-gpus``
and ``decode-KEY`` for each ``--decode-layout`` KEY. An item inherits what it does not set from
the base: the layout flags, the workers and the decode worker's sizes; ``decode-workers=0`` makes
it aggregated. So the question the seeds ask of a rack, whether splitting prefill from decoding
pays at the same GPUs, is one command: ``--gpus 16 --compare
gpus=8,prefill-workers=1,decode-workers=1``. ``weight-format=F`` serves the same checkpoint's
linear weights in another format (``--weight-format``): FP8 against NVFP4 is one command too, and
``gpu=G`` runs it on another GPU of the catalog (A100 against H100 against MI300X, each with its
own constants and band), with ``gpus=N`` where it needs another count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tokenmill.cli.options import ITEM_KEYS, apply_overrides, compared_gpu, layout_changes, layout_names, on_gpus
from tokenmill.errors import TokenmillError

#: What ``--decode-layout`` may set: the layout keys of ``--compare``, the decode worker's GPUs
#: being ``--decode-gpus``.
DECODE_LAYOUT_KEYS = ITEM_KEYS
#: ``--compare`` keys of disaggregation besides ``decode-KEY`` (predict only).
WORKER_KEYS = ("prefill-workers", "decode-workers", "decode-gpus", "decode-gpu")
#: ``--compare`` key of the decode workers' GPU (predict only): ``--decode-gpu``.
DECODE_GPU_KEY = "decode-gpu"
#: ``--compare`` key of the model's weight format (predict only): the model it names is loaded anew.
FORMAT_KEY = "weight-format"
#: ``--compare`` key of the GPU (predict only): the deployment on another GPU of the catalog.
GPU_KEY = "gpu"


@dataclass(frozen=True)
class Deployment:
    """One deployment of the comparison: ``plan`` is the aggregated worker, or each of the
    ``prefill_workers`` prefill workers when ``decode`` (each of the ``decode_workers`` decode
    workers) is set."""

    name: str
    plan: Any
    decode: Any | None = None
    prefill_workers: int = 1
    decode_workers: int = 0

    def named(self, name: str | None = None) -> Deployment:
        """This deployment under ``name`` (default: its description)."""
        return replace(self, name=self.describe() if name is None else name)

    def describe(self) -> str:
        if self.decode is None:
            return _worker(self.plan)
        on = f" on {self.decode.gpu.name}" if self.mixed else ""  # decode workers on another GPU say which
        return (
            f"{self.prefill_workers} prefill × {_worker(self.plan)} ({self.plan.gpus} GPUs) + "
            f"{self.decode_workers} decode × {_worker(self.decode)} ({self.decode.gpus} GPUs{on})"
        )

    @property
    def mixed(self) -> bool:
        """Whether its decode workers run on another kind of GPU than its prefill workers."""
        return self.decode is not None and self.decode.gpu.name != self.plan.gpu.name


def _worker(plan: Any) -> str:
    """A worker's layout, and its weights' format where ``--weight-format`` set one."""
    fmt = plan.model.weight_format
    return str(plan.layout.describe()) + (f" {fmt}-weights" if fmt else "")


def decode_changes(spec: str | None, where: str = "--decode-layout") -> dict[str, Any]:
    """``tp=8,dp-attention=8`` → the decode worker's layout fields; one-line errors naming ``where``."""
    items: list[tuple[str, str]] = []
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip().replace("_", "-")  # dp_attention as the layout's field, or as the flag
        if not sep or key not in DECODE_LAYOUT_KEYS:
            raise TokenmillError(
                f"{where}: {item.strip()!r} is not KEY=VALUE with KEY one of {', '.join(DECODE_LAYOUT_KEYS)}"
            )
        items.append((key.replace("-", "_"), value))
    return layout_changes(items, where)


def decode_plan(
    prefill: Any, changes: dict[str, Any], gpus: int, where: str = "--decode-layout", gpu: Any = None
) -> Any:
    """The decode worker's plan: the prefill worker's layout with ``changes``, over ``gpus`` GPUs
    (of ``gpu``'s kind, default the prefill worker's: ``--decode-gpu``), its TP all of them over
    its pipeline stages unless given. A decode server keeps no prefix cache unless given one:
    SGLang's PD decode server runs a chunk cache, one state slot per request instead of the radix
    cache's copies (shared/reference/sglang-memory-accounting.md §2.2)."""
    from tokenmill.plan import PrefixCache, plan_memory

    pp = changes.get("pp", prefill.layout.pp)
    defaults = {"tp": max(1, gpus // max(1, pp)), "prefix_cache": PrefixCache.OFF}
    try:
        layout = prefill.layout.with_(**{**defaults, **changes})
        return plan_memory(prefill.model, prefill.gpu if gpu is None else gpu, gpus, layout)
    except TokenmillError as exc:  # a layout the decode worker cannot have: say it is the decode worker's
        raise TokenmillError(f"decode worker ({where}, --decode-gpus {gpus}): {exc}") from None


def base_deployment(
    plan: Any,
    prefill_workers: int,
    decode_workers: int,
    decode_gpus: int | None,
    decode_layout: str | None,
    gpus: int,
    decode_gpu: Any = None,
) -> tuple[Deployment, dict[str, Any], int]:
    """The deployment of the flags, with its decode changes and decode GPUs (for ``--compare`` items
    to inherit); ``decode_gpu`` the decode workers' kind of GPU where it is not the prefill
    workers' (``--decode-gpu``); one-line errors for flags that contradict each other."""
    if decode_workers < 0:
        raise TokenmillError(f"--decode-workers must be 0 (aggregated) or more (got {decode_workers})")
    given = decode_gpus is not None or decode_layout is not None or decode_gpu is not None or prefill_workers != 1
    if not decode_workers and given:
        raise TokenmillError(
            "--prefill-workers, --decode-gpus, --decode-gpu and --decode-layout need --decode-workers ≥ 1"
        )
    if not plan.fits:
        raise TokenmillError(f"prefill worker: {plan.reason}" if decode_workers else str(plan.reason))
    changes = decode_changes(decode_layout)
    dgpus = gpus if decode_gpus is None else decode_gpus
    if not decode_workers:
        return Deployment("", plan).named(), changes, dgpus
    dep = Deployment("", plan, decode_plan(plan, changes, dgpus, gpu=decode_gpu), prefill_workers, decode_workers)
    return dep.named(), changes, dgpus


def _split(item: str) -> tuple[dict[str, str], str]:
    """A ``--compare`` item's disaggregation and format keys (as written), and the rest for
    ``apply_overrides``."""
    workers: dict[str, str] = {}
    rest = []
    for part in filter(None, (s.strip() for s in item.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lstrip("-").replace("_", "-")
        if sep and (key in WORKER_KEYS or key in (FORMAT_KEY, GPU_KEY) or key.startswith("decode-")):
            workers[key] = value.strip()
        else:
            rest.append(part)
    return workers, ",".join(rest)


def _count(item: str, key: str, value: str, least: int) -> int:
    try:
        n = int(value)
    except ValueError:
        n = least - 1
    if n < least:
        raise TokenmillError(f"--compare {key} must be an integer ≥ {least} (got {value!r} in {item!r})")
    return n


def compared(
    base: Deployment,
    base_changes: dict[str, Any],
    base_decode_gpus: int,
    compare: list[str] | None,
    label: list[str] | None,
    gpus: int,
    model_in: Callable[[str], Any] | None = None,
) -> list[Deployment]:
    """The base and one deployment per ``--compare`` item, named by ``--label`` (in order) or their
    description (with the item where that repeats an earlier name); more labels than deployments,
    two with one name, or an item a deployment cannot be built from is a one-line error naming it.
    ``model_in`` loads the model with another weight format (a ``weight-format`` item); a ``gpu``
    item plans it on that GPU."""
    from tokenmill.perf.predict import check_disaggregated
    from tokenmill.plan import plan_memory

    out = [base]
    for item in compare or []:
        workers, rest = _split(item)
        layout, n = apply_overrides(base.plan.layout, rest, gpus)
        given = dict(workers)
        model = base.plan.model
        if FORMAT_KEY in given:
            if model_in is None:
                raise TokenmillError(f"--compare {item!r}: {FORMAT_KEY} is not a key of this command")
            try:
                model = model_in(given.pop(FORMAT_KEY))
            except TokenmillError as exc:
                raise TokenmillError(f"--compare {item!r}: {exc}") from None
        given.pop(GPU_KEY, None)
        gpu, _ = compared_gpu(item, base.plan.gpu)
        plan = plan_memory(model, gpu, n, layout)
        # the decode workers' GPU kind: the item's, else the base's decode workers' where the item
        # keeps the base's GPU, else the item's prefill GPU
        dkind = given.pop(DECODE_GPU_KEY, None)
        inherited = base.decode.gpu if base.decode is not None and gpu.name == base.plan.gpu.name else gpu
        dgpu, _ = compared_gpu(item, inherited, DECODE_GPU_KEY)
        d = _count(item, "decode-workers", given.pop("decode-workers"), 0) if "decode-workers" in given else None
        d = base.decode_workers if d is None else d
        p = _count(item, "prefill-workers", given.pop("prefill-workers"), 1) if "prefill-workers" in given else None
        dg = _count(item, "decode-gpus", given.pop("decode-gpus"), 1) if "decode-gpus" in given else None
        if not d:
            if p is not None or dg is not None or given or dkind is not None:
                raise TokenmillError(
                    f"--compare {item!r}: prefill-workers, decode-gpus, decode-gpu and decode-KEY need "
                    "decode-workers ≥ 1"
                )
            out.append(Deployment("", plan))
            continue
        spec = ",".join(f"{k.removeprefix('decode-')}={v}" for k, v in given.items())
        changes = {**base_changes, **decode_changes(spec, f"--compare {item!r}")}
        dgpus = dg if dg is not None else (base_decode_gpus if base.decode is not None else n)
        prefill_workers = p if p is not None else base.prefill_workers
        decode = decode_plan(plan, changes, dgpus, f"--compare {item!r}", dgpu)
        out.append(Deployment("", plan, decode, prefill_workers, d))
    names = layout_names(on_gpus([d.describe() for d in out], [d.plan.gpu.name for d in out]), compare, label)
    result = [d.named(name) for name, d in zip(names, out, strict=True)]
    for dep in result[1:]:
        try:
            if dep.decode is None:
                if not dep.plan.fits:
                    raise TokenmillError(str(dep.plan.reason))
            else:
                check_disaggregated(dep.plan, dep.decode)
        except TokenmillError as exc:
            raise TokenmillError(f"layout {dep.name!r}: {exc}") from None
    return result
