"""OpenAI-compatible request bodies (validated with pydantic: a wrong type is a 400 naming the
field). Unknown fields are accepted and ignored, as OpenAI's API and SGLang/vLLM do, except that
the SGLang/vLLM extensions ``ignore_eos``, ``min_tokens``, ``top_k`` and ``seed`` are honoured, and
that asking for ``logprobs`` is a 400: this server does not compute them, and a client that
asked should not read a silent ``null`` as an answer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tokenmill.runtime.sampling import SEED_MAX, SEED_MIN


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: int = Field(default=0, ge=0)
    n: int = Field(default=1, ge=1, le=1)
    # what a torch generator takes (a 64-bit seed, signed or not): larger ones used to kill the engine
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    min_tokens: int = Field(default=0, ge=0)
    user: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(part.get("text", "")) for part in self.content if isinstance(part, dict))
        return self.content or ""


class ChatCompletionRequest(_Body):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class CompletionRequest(_Body):
    prompt: str | list[int] | list[str] = Field(min_length=1)
    echo: bool = False
    logprobs: int | None = None


def error_body(
    message: str, param: str | None = None, kind: str = "invalid_request_error", code: int = 400
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
