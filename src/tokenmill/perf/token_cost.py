"""What a million tokens cost at a price per GPU-hour: the y-axis InferenceX puts beside its
throughput-per-GPU curves (its dashboard's cost per million tokens is the GPU's TCO per hour over
the tokens one GPU serves in that hour; shared/reference/model-math-and-workloads.md §5.3).

Prices are the user's (``--usd-per-gpu-hour``): a rental rate, or a TCO that counts power,
hosting and depreciation. One price for every GPU of a comparison, or one per GPU kind
(``h100=2.1,a100=1.1``), since ``predict --compare gpu=G`` puts several side by side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokenmill.errors import TokenmillError


@dataclass(frozen=True)
class GpuPrices:
    """US dollars per GPU-hour: ``default`` for every GPU, or ``by_gpu`` per catalog name."""

    default: float | None = None
    by_gpu: tuple[tuple[str, float], ...] = ()

    def for_gpu(self, gpu: str, flag: str = "--usd-per-gpu-hour") -> float:
        """The price of one hour of ``gpu``; a one-line error naming ``flag`` where none is given."""
        for name, price in self.by_gpu:
            if name == gpu:
                return price
        if self.default is None:
            given = ", ".join(name for name, _ in self.by_gpu)
            raise TokenmillError(f"{flag} gives no price for {gpu} (given: {given}); add {gpu}=PRICE")
        return self.default


def parse_prices(text: str, flag: str = "--usd-per-gpu-hour") -> GpuPrices:
    """``2.5`` (every GPU) or ``h100=2.1,a100=1.1`` (per GPU; a bare number among them is the
    default); each price a finite number > 0. GPU names are resolved as ``--gpu`` resolves them."""
    from tokenmill.hardware import load_gpu

    default: float | None = None
    by_gpu: list[tuple[str, float]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.rpartition("=")
        price = _price(value if sep else item, flag, item)
        if not sep:
            if default is not None:
                raise TokenmillError(f"{flag}: two prices for every GPU ({default:g} and {price:g})")
            default = price
            continue
        try:
            gpu = load_gpu(name.strip()).name
        except TokenmillError as exc:
            raise TokenmillError(f"{flag} {item!r}: {exc}") from None
        if any(g == gpu for g, _ in by_gpu):
            raise TokenmillError(f"{flag}: two prices for {gpu}")
        by_gpu.append((gpu, price))
    if default is None and not by_gpu:
        raise TokenmillError(f"{flag} needs a price in US dollars per GPU-hour: 2.5, or h100=2.1,a100=1.1")
    return GpuPrices(default, tuple(by_gpu))


def _price(text: str, flag: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise TokenmillError(f"{flag}: {item!r} is not a price in US dollars per GPU-hour > 0")
    return value


def usd_per_million_tokens(usd_per_gpu_hour: float, tokens_per_s_per_gpu: float) -> float | None:
    """Dollars per million tokens when one GPU, at ``usd_per_gpu_hour``, serves
    ``tokens_per_s_per_gpu``; None where it serves none (no finite cost)."""
    if not tokens_per_s_per_gpu > 0:
        return None
    return usd_per_gpu_hour / (tokens_per_s_per_gpu * 3600.0) * 1e6
