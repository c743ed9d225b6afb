"""Reading a JSON object from a file someone handed us (a model's config.json, a tokenizer's
config, a safetensors index): one reader, so every kind of bad file gives the same one-line error
naming the file, never a traceback.

JSON is UTF-8 (RFC 8259); a byte-order mark, which some editors write, is read as none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError


def read_json_text(path: Path | str) -> str:
    """The text of a JSON file, for a parser of its own (a tokenizer's): unreadable or not UTF-8
    is the same one-line error as for ``read_json_object``."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise TokenmillError(f"cannot read {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TokenmillError(f"{p}: not a UTF-8 JSON file (byte {exc.start})") from None


def read_json_object(path: Path | str) -> dict[str, Any]:
    """The JSON object in ``path``, or a ``TokenmillError`` saying in one line why not."""
    p = Path(path)
    try:
        data = json.loads(read_json_text(p))
    except json.JSONDecodeError as exc:
        raise TokenmillError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise TokenmillError(f"{p}: not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise TokenmillError(f"{p}: expected a JSON object, got {type(data).__name__}")
    return data
