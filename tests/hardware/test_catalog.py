"""Tests for the GPU catalog: bundled data, name lookup, user-file validation, dtype lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.hardware import (
    GPU,
    GPU_TABLE_COLUMNS,
    gpu_table_rows,
    known_gpu_names,
    list_gpus,
    load_gpu,
    parse_gpu_toml,
)
from tokenmill.units import GB, GiB, MiB

BUNDLED = [
    "a100", "b200", "b300", "gb200", "gb300", "h100", "h20", "h200", "h800", "l40s", "mi300x", "mi325x", "mi355x"
]  # fmt: skip

VALID_TOML = """\
name = "testgpu"
display_name = "Test GPU"
vendor = "acme"
architecture = "testarch"
memory_sold_gb = 96
memory_visible_mib = 97871
hbm_bandwidth_tb_s = 4.0

[dense_tflops]
bf16 = 500
fp8 = 1000

[scale_up]
domain_gpus = 8
bandwidth_gb_s = 450

[node]
gpus_per_node = 8
nic_gb_s = 50

[power]
tdp_w = 700
"""


def _assert_one_line_error(exc: pytest.ExceptionInfo[TokenmillError], *needles: str) -> str:
    message = str(exc.value)
    assert "\n" not in message, f"error message is not one line: {message!r}"
    for needle in needles:
        assert needle in message, f"{needle!r} missing from {message!r}"
    return message


# --- bundled catalog ------------------------------------------------------------------------


def test_catalog_ships_exactly_the_expected_gpus() -> None:
    assert known_gpu_names() == BUNDLED
    assert [gpu.name for gpu in list_gpus()] == BUNDLED


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_gpu_loads_with_positive_values(name: str) -> None:
    gpu = load_gpu(name)
    assert gpu.name == name
    assert gpu.display_name and gpu.vendor and gpu.architecture
    for value in (
        gpu.memory_sold_bytes,
        gpu.memory_visible_bytes,
        gpu.hbm_bandwidth_bytes_per_s,
        gpu.scale_up_domain_gpus,
        gpu.scale_up_bandwidth_bytes_per_s,
        gpu.gpus_per_node,
        gpu.nic_bandwidth_bytes_per_s,
        gpu.power_watts,
    ):
        assert value > 0
    assert "bf16" in gpu.dense_flops
    assert all(rate > 0 for rate in gpu.dense_flops.values())
    # Visible memory is a whole number of MiB because nvidia-smi reports integer MiB.
    assert gpu.memory_visible_bytes % MiB == 0


def test_b300_visible_memory_matches_seed_article_nvidia_smi_reading_268_6_gib() -> None:
    gpu = load_gpu("b300")
    assert gpu.memory_visible_gib == pytest.approx(268.6, abs=0.05), (
        "the seed article's nvidia-smi reading on B300 is 275046 MiB = 268.6 GiB"
    )


def test_h200_sold_memory_is_141_decimal_gb() -> None:
    gpu = load_gpu("h200")
    assert gpu.memory_sold_bytes == 141 * GB
    # The seed article's H200 bar: 141 GB decimal is 131 GiB.
    assert gpu.memory_sold_bytes / GiB == pytest.approx(131.3, abs=0.05)


def test_canonical_units_are_converted_from_source_units() -> None:
    h100 = load_gpu("h100")
    assert h100.memory_visible_bytes == 81559 * MiB
    assert h100.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h100.flops("bf16") == pytest.approx(989e12)
    assert h100.scale_up_bandwidth_bytes_per_s == pytest.approx(450e9)
    assert h100.nic_bandwidth_bytes_per_s == pytest.approx(50e9)
    assert load_gpu("gb200").scale_up_domain_gpus == 72
    assert load_gpu("gb200").gpus_per_node == 4


@pytest.mark.parametrize(
    ("name", "bf16_tflops", "fp8_tflops", "hbm_tb_s", "link_gb_s", "visible_mib"),
    [
        # each figure the datasheet's (dense: the "with sparsity" one halved), in its own units
        ("a100", 312, None, 2.039, 300, 81920),  # A100 80GB SXM: 312 | 624 TFLOPS BF16, 2,039 GB/s, NVLink 600 GB/s
        ("h800", 989, 1979, 3.35, 200, 81559),  # H800 SXM5: H100's die and HBM3, NVLink 400 GB/s
        ("h20", 148, 296, 4.0, 450, 97871),  # H20: 148 TFLOPS BF16, 296 FP8, 4.0 TB/s, NVLink 900 GB/s
        ("l40s", 362, 733, 0.864, 32, 46068),  # L40S: 362.05 | 733 BF16, 864 GB/s, PCIe Gen4 64 GB/s both ways
        ("mi300x", 1307.4, 2614.9, 5.3, 448, 196592),  # MI300X: 1307.4 BF16, 5.3 TB/s, 7 x 128 GB/s IF
        ("mi325x", 1307.4, 2614.9, 6.0, 448, 262128),  # MI325X: MI300X's die, 256 GB HBM3E at 6 TB/s
    ],
)
def test_added_gpus_carry_their_datasheet_figures(
    name: str, bf16_tflops: float, fp8_tflops: float | None, hbm_tb_s: float, link_gb_s: float, visible_mib: int
) -> None:
    gpu = load_gpu(name)
    assert gpu.flops("bf16") == pytest.approx(bf16_tflops * 1e12)
    assert gpu.dense_flops.get("fp8") == (None if fp8_tflops is None else pytest.approx(fp8_tflops * 1e12))
    assert "fp4" not in gpu.dense_flops, f"{name} has no 4-bit tensor cores"
    assert gpu.hbm_bandwidth_bytes_per_s == pytest.approx(hbm_tb_s * 1e12)
    assert gpu.scale_up_bandwidth_bytes_per_s == pytest.approx(link_gb_s * 1e9)
    assert gpu.memory_visible_bytes == visible_mib * MiB


def test_gpu_architectures_group_dies_the_fit_can_share() -> None:
    """H800 and H20 are Hopper dies (they borrow H100's fitted kernel efficiencies); A100, L40S and
    the CDNA 3 parts share no architecture with a fitted GPU (they take the fitted GPUs' medians)."""
    arch = {name: load_gpu(name).architecture for name in BUNDLED}
    assert arch["h800"] == arch["h20"] == arch["h100"] == "hopper"
    assert arch["mi300x"] == arch["mi325x"] == "cdna3" != arch["mi355x"]
    assert (arch["a100"], arch["l40s"]) == ("ampere", "ada")


def test_blackwell_ultra_has_no_int8_rate() -> None:
    assert "int8" not in load_gpu("b300").dense_flops
    assert "int8" in load_gpu("b200").dense_flops


def test_gpu_is_frozen() -> None:
    gpu = load_gpu("h100")
    with pytest.raises(ValueError):
        gpu.power_watts = 1.0


# --- name lookup ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("B300", "b300"),
        ("b300_sxm", "b300"),
        ("h200-sxm", "h200"),
        ("H100_SXM", "h100"),
        ("h100-sxm5", "h100"),
        ("b200_sxm", "b200"),
        ("gb200", "gb200"),
        ("GB300", "gb300"),
        ("gb200-nvl72", "gb200"),
        (" MI355X ", "mi355x"),
        ("A100-SXM4-80GB", "a100"),
        ("a100_80gb", "a100"),
        ("H800_SXM5", "h800"),
        ("L40S-PCIe", "l40s"),
        ("MI300X", "mi300x"),
    ],
)
def test_aliases_resolve(alias: str, expected: str) -> None:
    assert load_gpu(alias).name == expected


def test_unknown_gpu_error_is_one_line_and_lists_known_names() -> None:
    with pytest.raises(TokenmillError) as exc:
        load_gpu("a100x")
    _assert_one_line_error(exc, "unknown GPU 'a100x'", f"known: {', '.join(BUNDLED)}")


def test_user_toml_path_loads(tmp_path: Path) -> None:
    path = tmp_path / "testgpu.toml"
    path.write_text(VALID_TOML, encoding="utf-8")
    gpu = load_gpu(str(path))
    assert gpu.name == "testgpu"
    assert gpu.flops("fp8") == pytest.approx(1000e12)
    assert gpu.memory_sold_bytes == 96 * GB


def test_user_toml_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "testgpu.toml"  # as some Windows editors save UTF-8
    path.write_bytes(b"\xef\xbb\xbf" + VALID_TOML.encode())
    assert load_gpu(str(path)).name == "testgpu"


def test_missing_user_toml_path_is_a_tokenmill_error(tmp_path: Path) -> None:
    with pytest.raises(TokenmillError) as exc:
        load_gpu(str(tmp_path / "nope.toml"))
    _assert_one_line_error(exc, "nope.toml", "not found")


# --- user TOML validation -------------------------------------------------------------------


def test_valid_user_toml_parses() -> None:
    gpu = parse_gpu_toml(VALID_TOML, "user.toml")
    assert isinstance(gpu, GPU)
    assert set(gpu.dense_flops) == {"bf16", "fp8"}


@pytest.mark.parametrize(
    ("old", "new", "needles"),
    [
        # unknown key (a typo of bandwidth_gb_s)
        (
            "bandwidth_gb_s = 450",
            "bandwidth_gbs = 450",
            ("unknown key", "scale_up.bandwidth_gbs", "bandwidth_gb_s"),
        ),
        # unknown dtype in [dense_tflops]
        ("fp8 = 1000", "fp9 = 1000", ("unknown key", "dense_tflops.fp9")),
        # unknown top-level key
        ('vendor = "acme"', 'vendor = "acme"\ncolour = "green"', ("unknown key", "'colour'")),
        # missing key
        ("tdp_w = 700", "", ("missing key", "power.tdp_w", "watts")),
        # missing required dtype
        ("bf16 = 500", "", ("missing key", "dense_tflops.bf16")),
        # missing table ([power] alone may be left out: a measured CPU has no datasheet TDP)
        ("[node]\ngpus_per_node = 8\nnic_gb_s = 50", "", ("missing table", "[node]")),
        # string where a number is expected
        ("bf16 = 500", 'bf16 = "fast"', ("dense_tflops.bf16", "positive number", "TFLOP/s", "'fast'")),
        # negative bandwidth
        ("nic_gb_s = 50", "nic_gb_s = -50", ("node.nic_gb_s", "positive number", "-50")),
        # zero is not positive either
        ("hbm_bandwidth_tb_s = 4.0", "hbm_bandwidth_tb_s = 0", ("hbm_bandwidth_tb_s", "positive")),
        # inf is not a usable rate
        ("bf16 = 500", "bf16 = inf", ("dense_tflops.bf16", "positive number")),
        # boolean is not a number even though bool subclasses int in Python
        ("domain_gpus = 8", "domain_gpus = true", ("scale_up.domain_gpus", "positive integer")),
        # integer keys reject fractions
        ("memory_visible_mib = 97871", "memory_visible_mib = 97871.5", ("memory_visible_mib", "integer")),
        # upper-case catalog name
        ('name = "testgpu"', 'name = "TestGPU"', ("key 'name'", "lower-case")),
        # a table where a number is expected
        ("tdp_w = 700", "tdp_w = { max = 700 }", ("power.tdp_w", "a table")),
        # a typo of a few zeros: found by fuzzing, 1e300 GB overflowed the byte count to a traceback
        ("memory_sold_gb = 96", "memory_sold_gb = 1e300", ("memory_sold_gb", "up to 100,000", "1e+300")),
        ("memory_visible_mib = 97871", "memory_visible_mib = 1000000000000", ("memory_visible_mib", "up to")),
    ],
)
def test_bad_user_toml_is_one_line_error_naming_dotted_key(old: str, new: str, needles: tuple[str, ...]) -> None:
    assert old in VALID_TOML
    text = VALID_TOML.replace(old, new)
    with pytest.raises(TokenmillError) as exc:
        parse_gpu_toml(text, "my_gpu.toml")
    _assert_one_line_error(exc, "my_gpu.toml", *needles)


def test_scalar_where_table_expected_is_one_line_error() -> None:
    text = "power = 700\n" + VALID_TOML.replace("[power]\ntdp_w = 700", "")
    with pytest.raises(TokenmillError) as exc:
        parse_gpu_toml(text, "my_gpu.toml")
    _assert_one_line_error(exc, "my_gpu.toml", "'power'", "must be a table")


def test_malformed_toml_is_one_line_error() -> None:
    with pytest.raises(TokenmillError) as exc:
        parse_gpu_toml("name = \n[[", "broken.toml")
    _assert_one_line_error(exc, "broken.toml", "invalid TOML")


# --- dtype lookup ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("bfloat16", "bf16"),
        ("BF16", "bf16"),
        ("float16", "fp16"),
        ("half", "fp16"),
        ("fp8_e4m3", "fp8"),
        ("e4m3", "fp8"),
        ("mxfp4", "fp4"),
        ("nvfp4", "fp4"),
    ],
)
def test_dtype_aliases(alias: str, canonical: str) -> None:
    gpu = load_gpu("b200")
    assert gpu.flops(alias) == gpu.flops(canonical)


def test_bfloat16_equals_bf16() -> None:
    gpu = load_gpu("h100")
    assert gpu.flops("bfloat16") == gpu.flops("bf16")


def test_fp4_on_h100_raises_naming_dtype_gpu_and_available_dtypes() -> None:
    gpu = load_gpu("h100")
    with pytest.raises(TokenmillError) as exc:
        gpu.flops("fp4")
    _assert_one_line_error(exc, "fp4", "'h100'", "bf16, fp16, fp8, int8, tf32")


def test_fp4_alias_on_h100_error_mentions_both_spellings() -> None:
    with pytest.raises(TokenmillError) as exc:
        load_gpu("h100").flops("nvfp4")
    _assert_one_line_error(exc, "nvfp4", "fp4")


# --- display rows ---------------------------------------------------------------------------


def test_gpu_table_rows() -> None:
    rows = gpu_table_rows(list_gpus())
    assert [row["GPU"] for row in rows] == BUNDLED
    assert all(tuple(row) == GPU_TABLE_COLUMNS for row in rows)
    by_name = {row["GPU"]: row for row in rows}
    assert by_name["b300"]["visible (GiB)"] == "268.6"
    assert by_name["h200"]["sold (GB)"] == "141"
    assert by_name["h100"]["HBM (TB/s)"] == "3.35"
    assert by_name["h100"]["BF16 (TFLOP/s)"] == "989"
    assert by_name["h100"]["FP4 (TFLOP/s)"] == "-"
    assert by_name["mi355x"]["scale-up (GB/s)"] == "537.6"
    assert by_name["gb300"]["NIC (GB/s)"] == "100"
    assert by_name["b300"]["power (W)"] == "1100"
