"""Typed reads from a Hugging Face ``config.json`` with one-line errors that name the field."""

from __future__ import annotations

from typing import Any

from tokenmill.errors import TokenmillError

_MISSING = object()


class ConfigReader:
    """Wraps one config dict; every failed read names the source file, the field and the model type."""

    def __init__(self, config: dict[str, Any], source: str, model_type: str) -> None:
        self.config = config
        self.source = source
        self.model_type = model_type

    def _fail(self, key: str, what: str) -> TokenmillError:
        return TokenmillError(f"{self.source}: field '{key}' {what} (model_type {self.model_type})")

    def has(self, key: str) -> bool:
        return self.config.get(key) is not None

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        value = self.config.get(key)
        if value is None:
            if default is _MISSING:
                raise self._fail(key, "is missing")
            return default
        return value

    def get_int(self, key: str, default: Any = _MISSING) -> int:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise self._fail(key, f"must be an integer (got {value!r})")
        return value

    def pos_int(self, key: str, default: Any = _MISSING, maximum: int | None = None) -> int:
        value = self.get_int(key, default)
        if value <= 0:
            raise self._fail(key, f"must be a positive integer (got {value})")
        if maximum is not None and value > maximum:
            raise self._fail(key, f"must be at most {maximum:,} (got {value:,})")
        return value

    def opt_int(self, key: str) -> int | None:
        return None if self.config.get(key) is None else self.get_int(key)

    def first_int(self, *keys: str, default: Any = _MISSING) -> int:
        """The first of several alternative names that is present (configs rename fields)."""
        for key in keys:
            if self.config.get(key) is not None:
                return self.get_int(key)
        if default is _MISSING:
            raise self._fail(keys[0], "is missing" + (f" (also looked for {', '.join(keys[1:])})" if keys[1:] else ""))
        return int(default)

    def get_float(self, key: str, default: Any = _MISSING) -> float:
        value = self.raw(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(key, f"must be a number (got {value!r})")
        return float(value)

    def get_bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, f"must be true or false (got {value!r})")
        return value

    def get_str(self, key: str, default: Any = _MISSING) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise self._fail(key, f"must be a string (got {value!r})")
        return value

    def int_list(self, key: str, default: Any = _MISSING) -> list[int]:
        value = self.raw(key, default)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self._fail(key, "must be a list of integers")
        return list(value)

    def str_list(self, key: str, default: Any = _MISSING) -> list[str]:
        value = self.raw(key, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(key, "must be a list of strings")
        return list(value)

    def sub(self, key: str) -> ConfigReader:
        value = self.raw(key)
        if not isinstance(value, dict):
            raise self._fail(key, "must be an object")
        return ConfigReader(value, f"{self.source} [{key}]", self.model_type)

    def fail(self, key: str, what: str) -> TokenmillError:
        """An error about ``key`` for checks the reader cannot express."""
        return self._fail(key, what)
