"""The model in-process: greedy decoding with top-5 logprobs recorded at every step.

llama-cpp-python returns logprobs only for a model created with `logits_all=True`,
which keeps n_ctx x n_vocab floats and slows prompt evaluation. Instead a logits
processor log-softmaxes the scores at each sampling step (the custom sampler stage
runs first, so the scores are the model's own, indexed by token id) and keeps the top 5;
greedy sampling then takes the top-1, unchanged. `Llama.generate` reuses the longest
common token prefix with what is in the KV cache, so consecutive decisions of a task
(and the shared system prompt across tasks) are not evaluated again.

The prompt is rendered with the GGUF's own chat template, exactly as llama-cpp-python's
server renders the bench's requests (`Jinja2ChatFormatter` with the request's messages,
tools and tool_choice).
"""

from __future__ import annotations

import codecs
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

TOP_LOGPROBS = 5
CALL_END = "</tool_call>"  # the end of the first call written in content: stop there
_JSON = json.JSONDecoder()


def first_call_closed(text: str) -> bool:
    """True once the first JSON object of an untagged reply has closed: the model writes
    its call as bare JSON (or fenced JSON), so nothing after it can change that call."""
    if "<tool_call>" in text:
        return CALL_END in text
    start = text.find("{")
    if start < 0:
        return False
    try:
        _JSON.raw_decode(text, start)
    except ValueError:
        return False
    return True


class LogprobRecorder:
    """A logits processor that remembers the log-softmax of the last step's scores."""

    def __init__(self) -> None:
        self.last: npt.NDArray[np.float64] | None = None

    def __call__(self, input_ids: npt.NDArray[np.intc],
                 scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        values = scores.astype(np.float64)
        peak = values.max()
        self.last = values - (peak + np.log(np.exp(values - peak).sum()))
        return scores


@dataclass(frozen=True)
class Generation:
    completion: dict[str, Any]  # OpenAI-shaped, with logprobs.content
    text: str
    prompt_tokens: int
    reused_tokens: int  # prompt tokens already in the KV cache (prefix reuse)
    completion_tokens: int
    finish_reason: str
    seconds: float


class Model:
    """One GGUF loaded once; decisions are asked one after another."""

    def __init__(self, path: Path, n_ctx: int, threads: int) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads,
                                   n_threads_batch=threads, verbose=False)
        template = self.llm.metadata["tokenizer.chat_template"]
        eos_id = self.llm.token_eos()
        self.eos_ids = {eos_id}
        self.formatter = Jinja2ChatFormatter(
            template=template, eos_token=self._piece(eos_id), bos_token=self._piece(
                self.llm.token_bos()), stop_token_ids=[eos_id])
        self.model_name = path.stem

    def close(self) -> None:
        self.llm.close()

    def _piece(self, token: int) -> str:
        return self.llm.detokenize([token], special=True).decode("utf-8", errors="replace")

    def prompt_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                      tool_choice: str) -> list[int]:
        # the server hands the request's JSON to the template as it came: plain dicts
        rendered = self.formatter(messages=messages, tools=tools,  # type: ignore[arg-type]
                                  tool_choice=tool_choice)  # type: ignore[arg-type]
        tokens: list[int] = self.llm.tokenize(rendered.prompt.encode("utf-8"),
                                              add_bos=not rendered.added_special, special=True)
        return tokens

    def _reusable(self, tokens: list[int]) -> int:
        cached = self.llm._input_ids[: self.llm.n_tokens]
        same = 0
        for a, b in zip(cached, tokens, strict=False):
            if a != b:
                break
            same += 1
        return same

    def _top(self, logprobs: npt.NDArray[np.float64]) -> list[dict[str, Any]]:
        ids = np.argpartition(-logprobs, TOP_LOGPROBS)[:TOP_LOGPROBS]
        ids = ids[np.argsort(-logprobs[ids])]
        out = []
        for token in ids:
            raw = self.llm.detokenize([int(token)], special=True)
            out.append({"token": raw.decode("utf-8", errors="replace"),
                        "logprob": float(logprobs[token]), "bytes": list(raw)})
        return out

    def generate(self, tokens: list[int], max_tokens: int, record: bool = True) -> Generation:
        """Greedy decoding until the end of the first call, EOS, or max_tokens."""
        import llama_cpp

        started = time.perf_counter()
        reused = self._reusable(tokens)
        recorder = LogprobRecorder()
        processors = llama_cpp.LogitsProcessorList([recorder]) if record else None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        entries: list[dict[str, Any]] = []
        text = ""
        count = 0
        finish = "length"
        for token in self.llm.generate(tokens, temp=0.0, repeat_penalty=1.0,
                                       logits_processor=processors):
            if token in self.eos_ids or self.llm.token_eos() == token:
                finish = "stop"
                break
            count += 1
            raw = self.llm.detokenize([token], special=True)
            piece = decoder.decode(raw)
            text += piece
            if record and recorder.last is not None:
                entries.append({"token": piece, "logprob": float(recorder.last[token]),
                                "bytes": list(raw), "top_logprobs": self._top(recorder.last)})
            if ("}" in piece or ">" in piece) and first_call_closed(text):
                finish = "stop"
                break
            if count >= max_tokens:
                break
        seconds = time.perf_counter() - started
        completion = {
            "object": "chat.completion", "model": self.model_name,
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": text},
                         "logprobs": {"content": entries} if record else None}],
            "usage": {"prompt_tokens": len(tokens), "completion_tokens": count},
        }
        return Generation(completion, text, len(tokens), reused, count, finish, seconds)
