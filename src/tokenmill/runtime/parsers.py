"""Output parsers: split a model's text into reasoning, content and tool calls.

Pluggable by name (``PARSERS``). The Kimi-style parser reads ``<think>…</think>`` as reasoning and
Kimi's tool-call section::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{"a": 1}
    <|tool_call_end|><|tool_calls_section_end|>

Streaming: ``feed`` returns the content and reasoning deltas that are safe to show now; a tool
call is held until its section closes and then delivered whole (as SGLang's parser does).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass
class ParsedDelta:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


_CALL = re.compile(
    r"<\|tool_call_begin\|>\s*(?:functions\.)?(?P<name>[\w\-\.]+?)(?::(?P<idx>\d+))?\s*"
    r"<\|tool_call_argument_begin\|>(?P<args>.*?)<\|tool_call_end\|>",
    re.S,
)
_MARKERS = ("<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")


class KimiParser:
    """Incremental parser for Kimi's reasoning and tool-call markup."""

    def __init__(self, reasoning: bool = True) -> None:
        self.reasoning = reasoning
        self._buf = ""
        self._in_think = False
        self._in_tools = False
        self._tools_text = ""
        self._calls = 0

    def _safe_split(self, text: str) -> tuple[str, str]:
        """Keep back a suffix that could be the start of a marker."""
        for k in range(min(len(text), max(len(m) for m in _MARKERS)), 0, -1):
            tail = text[-k:]
            if any(m.startswith(tail) for m in _MARKERS):
                return text[:-k], tail
        return text, ""

    def feed(self, text: str, final: bool = False) -> ParsedDelta:
        out = ParsedDelta()
        self._buf += text
        while self._buf:
            if self._in_tools:
                end = self._buf.find("<|tool_calls_section_end|>")
                if end < 0:
                    self._tools_text += self._buf
                    self._buf = ""
                    break
                self._tools_text += self._buf[:end]
                self._buf = self._buf[end + len("<|tool_calls_section_end|>") :]
                out.tool_calls.extend(self._calls_from(self._tools_text))
                self._tools_text, self._in_tools = "", False
                continue
            if self._in_think:
                end = self._buf.find("</think>")
                if end < 0:
                    safe, keep = (self._buf, "") if final else self._safe_split(self._buf)
                    out.reasoning += safe
                    self._buf = keep
                    break
                out.reasoning += self._buf[:end]
                self._buf = self._buf[end + len("</think>") :]
                self._in_think = False
                continue
            starts = [(self._buf.find(m), m) for m in ("<think>", "<|tool_calls_section_begin|>")]
            starts = [(i, m) for i, m in starts if i >= 0 and (m != "<think>" or self.reasoning)]
            if not starts:
                safe, keep = (self._buf, "") if final else self._safe_split(self._buf)
                out.content += safe
                self._buf = keep
                break
            i, marker = min(starts)
            out.content += self._buf[:i]
            self._buf = self._buf[i + len(marker) :]
            if marker == "<think>":
                self._in_think = True
            else:
                self._in_tools = True
        if final and self._in_tools and self._tools_text:
            out.tool_calls.extend(self._calls_from(self._tools_text))
            self._tools_text, self._in_tools = "", False
        return out

    def _calls_from(self, text: str) -> list[ToolCall]:
        calls = []
        for m in _CALL.finditer(text):
            args = m.group("args").strip()
            with contextlib.suppress(json.JSONDecodeError):  # else hand the model's text over as is
                args = json.dumps(json.loads(args))
            calls.append(ToolCall(id=f"call_{self._calls}", name=m.group("name"), arguments=args))
            self._calls += 1
        return calls


class PlainParser(KimiParser):
    """No reasoning split, no tool calls: everything is content."""

    def feed(self, text: str, final: bool = False) -> ParsedDelta:
        return ParsedDelta(content=text)


PARSERS: dict[str, type[KimiParser]] = {"kimi": KimiParser, "kimi_k3": KimiParser, "none": PlainParser}
