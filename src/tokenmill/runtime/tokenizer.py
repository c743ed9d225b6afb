"""Tokenizer and chat template: a model directory's ``tokenizer.json`` + ``tokenizer_config.json``
(Hugging Face format, read with the ``tokenizers`` library), or the embedded default's.

The chat template is the model's Jinja template when it has one; otherwise tokenmill's documented
default, Kimi's format: ``<|im_user|>user<|im_middle|>…<|im_end|>`` per message and
``<|im_assistant|>assistant<|im_middle|>`` to prompt the answer.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.jsonfile import read_json_object, read_json_text

DEFAULT_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif message['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- elif message['role'] == 'tool' -%}<|im_system|>tool<|im_middle|>"
    "{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
    "{{ message['content'] if message['content'] is string else '' }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)


class Tokenizer:
    def __init__(self, directory: Path | None = None) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        if directory is None:
            assets = resources.files("tokenmill.runtime") / "assets"
            tok_json = assets.joinpath("tokenizer.json").read_text(encoding="utf-8")
            config: dict[str, Any] = json.loads(assets.joinpath("tokenizer_config.json").read_text(encoding="utf-8"))
        else:
            path = directory / "tokenizer.json"
            if not path.exists():
                raise TokenmillError(f"{directory}: no tokenizer.json (a Hugging Face fast tokenizer is required)")
            tok_json = read_json_text(path)
            cfg_path = directory / "tokenizer_config.json"
            config = read_json_object(cfg_path) if cfg_path.exists() else {}
        try:
            self._tok = HFTokenizer.from_str(tok_json)
        except Exception as exc:  # the library's own parse error: a Rust message, sometimes several lines
            where = "the bundled tokenizer" if directory is None else str(directory / "tokenizer.json")
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise TokenmillError(f"{where}: not a tokenizer the tokenizers library reads ({first})") from None
        self.config = config
        self.chat_template: str = self.config.get("chat_template") or DEFAULT_CHAT_TEMPLATE
        eos = self.config.get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        self.eos_token_id = self._tok.token_to_id(eos) if isinstance(eos, str) else None

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size())

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=skip_special_tokens))

    def token_id(self, token: str) -> int | None:
        found = self._tok.token_to_id(token)
        return int(found) if found is not None else None

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        template = env.from_string(self.chat_template)
        return str(template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt))
