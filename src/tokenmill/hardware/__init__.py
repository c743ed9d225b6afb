"""GPU hardware catalog: cited per-GPU data files loaded into frozen, canonical-unit models.

Import from here rather than from ``catalog`` so the storage format can change underneath.
"""

from tokenmill.hardware.catalog import (
    DTYPE_ALIASES,
    DTYPES,
    GPU,
    GPU_TABLE_COLUMNS,
    gpu_table_rows,
    known_gpu_names,
    list_gpus,
    load_gpu,
    local_hardware_names,
    parse_gpu_toml,
)

__all__ = [
    "DTYPES",
    "DTYPE_ALIASES",
    "GPU",
    "GPU_TABLE_COLUMNS",
    "gpu_table_rows",
    "known_gpu_names",
    "list_gpus",
    "load_gpu",
    "local_hardware_names",
    "parse_gpu_toml",
]
