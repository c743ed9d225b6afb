"""Train the embedded default model's tokenizer: a byte-level BPE of 4,096 tokens.

Trained once on a fixed corpus (the files listed below, at the commit that added this script)
and committed as ``src/tokenmill/runtime/assets/tokenizer.json``; nothing downloads. Rerun to
regenerate: ``.venv/bin/python scripts/make_tokenizer.py`` (needs the `tokenizers` package).
Special tokens follow Kimi's chat format, so the Kimi-style reasoning and tool-call parsers have
real tokens to work on.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "tokenmill" / "runtime" / "assets"
VOCAB_SIZE = 4096
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_end|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_system|>",
    "<|im_middle|>",
    "<think>",
    "</think>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
]
CORPUS_GLOBS = ["README.md", "docs/*.md", "src/tokenmill/**/*.py", "src/tokenmill/spec/presets/*.json"]

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}<|im_system|>system<|im_middle|>"
    "{%- elif message['role'] == 'user' -%}<|im_user|>user<|im_middle|>"
    "{%- elif message['role'] == 'tool' -%}<|im_system|>tool<|im_middle|>"
    "{%- else -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
    "{{ message['content'] if message['content'] is string else '' }}<|im_end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)


def corpus() -> list[str]:
    files = sorted({p for pattern in CORPUS_GLOBS for p in ROOT.glob(pattern) if p.is_file()})
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def main() -> None:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
        "additional_special_tokens": SPECIAL_TOKENS,
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"vocab {tok.get_vocab_size()} tokens -> {OUT}")


if __name__ == "__main__":
    main()
