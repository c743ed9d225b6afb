"""Files someone hands us as JSON (a config.json, a tokenizer, a safetensors index): every bad one
is a one-line error naming the file, never a traceback; a byte-order mark is read as none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenmill.errors import TokenmillError
from tokenmill.jsonfile import read_json_object
from tokenmill.runtime.models.config import read_config
from tokenmill.runtime.tokenizer import Tokenizer

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x00\xff\xfe", "not a UTF-8 JSON file (byte 1)"),
        (b'{"a": ', "not valid JSON (line 1: Expecting value)"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (BOM + BOM + b"{}", "not valid JSON (line 1: Unexpected UTF-8 BOM"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(TokenmillError) as info:
        read_json_object(path)
    text = str(info.value)
    assert text.startswith(str(path)) and message in text and "\n" not in text


def test_a_missing_file_and_a_byte_order_mark(tmp_path: Path) -> None:
    with pytest.raises(TokenmillError, match=r"^cannot read .*nope\.json: No such file or directory$"):
        read_json_object(tmp_path / "nope.json")
    marked = tmp_path / "marked.json"
    marked.write_bytes(BOM + b'{"model_type": "llama"}')
    assert read_json_object(marked) == {"model_type": "llama"}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_give_an_object_or_a_one_line_error(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("j") / "f.json"
    path.write_bytes(data)
    try:
        assert isinstance(read_json_object(path), dict)
    except TokenmillError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)


def test_a_checkpoints_config_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes(b"\x00\xff{")
    with pytest.raises(TokenmillError, match=r"config\.json: not a UTF-8 JSON file \(byte 1\)$"):
        read_config(tmp_path)


def test_a_tokenizer_the_library_cannot_read_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "nothing-like-this"}}))
    with pytest.raises(TokenmillError) as info:
        Tokenizer(tmp_path)
    assert "tokenizer.json: not a tokenizer the tokenizers library reads (" in str(info.value)
    assert "\n" not in str(info.value)
    (tmp_path / "tokenizer.json").write_bytes(b"\xff")
    with pytest.raises(TokenmillError, match=r"tokenizer\.json: not a UTF-8 JSON file \(byte 0\)$"):
        Tokenizer(tmp_path)
