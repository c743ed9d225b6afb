"""``tokenmill models`` and ``tokenmill gpus``: the bundled model presets and the GPU catalog."""

import json
from typing import Any

from tokenmill.cli.options import JsonOpt


def models(json_out: JsonOpt = False) -> None:
    """The bundled model presets."""
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table
    from tokenmill.spec import PRESETS, load_model
    from tokenmill.units import GiB

    rows: list[dict[str, Any]] = []
    for name in PRESETS:
        m = load_model(name)
        counts = m.layer_kind_counts()
        rows.append(
            {
                "name": name,
                "hf_id": m.hf_id,
                "model_type": m.model_type,
                "family": m.family,
                "layers": m.num_layers,
                "layer_kinds": counts,
                "total_params": m.total_params,
                "active_params": m.active_params,
                "checkpoint_bytes": m.checkpoint_bytes,
            }
        )
    if json_out:
        print(json.dumps(rows, indent=2))
        return
    t = Table(title="model presets")
    for col in ("name", "model_type", "family", "layers", "params (B)", "active (B)", "checkpoint (GiB)"):
        t.add_column(col, justify="left" if col in ("name", "model_type", "family", "layers") else "right")
    for row in rows:
        kinds = ", ".join(f"{v} {k}" for k, v in row["layer_kinds"].items() if not k.startswith("ffn_"))
        t.add_row(
            row["name"],
            row["model_type"],
            row["family"],
            f"{row['layers']} ({kinds})",
            f"{row['total_params'] / 1e9:,.1f}",
            f"{row['active_params'] / 1e9:,.1f}",
            f"{row['checkpoint_bytes'] / GiB:,.1f}",
        )
    print_table(Console(), t)


def gpus(json_out: JsonOpt = False) -> None:
    """The GPU catalog."""
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table
    from tokenmill.hardware import GPU_TABLE_COLUMNS, gpu_table_rows, list_gpus
    from tokenmill.perf.calibrated import constants_source, load_table

    catalog = list_gpus(include_local=True)
    table = load_table()
    source = {g.name: constants_source(g.name, table) for g in catalog}
    if json_out:
        print(json.dumps([g.model_dump() | {"constants": source[g.name]} for g in catalog], indent=2))
        return
    t = Table(
        title="GPU catalog (dense peak figures; GiB = 1024³ B, GB = 10⁹ B); constants: where predict's "
        "per-GPU constants come from (docs/perf.md §3, fallbacks)"
    )
    for col in (*GPU_TABLE_COLUMNS, "arch", "constants"):
        t.add_column(col, justify="left" if col in ("GPU", "arch", "constants") else "right")
    for row, gpu in zip(gpu_table_rows(catalog), catalog, strict=True):
        t.add_row(*(row[c] for c in GPU_TABLE_COLUMNS), gpu.architecture, source[gpu.name])
    print_table(Console(), t)
