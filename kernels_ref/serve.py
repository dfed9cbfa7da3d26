"""The reference runner as an OpenAI-compatible engine: `python -m kernels_ref.serve`.

    python -m kernels_ref.serve --target DIR [--drafter DIR] [--inject FAULT] [--port N]

Serves `POST /v1/completions` (non-streaming, one prompt, one choice), `GET /v1/models`,
`GET /health` and `GET /metrics` on 127.0.0.1 with starlette + uvicorn. Without a drafter it
decodes autoregressively, with one speculatively (the `kernels_ref.loop` draft-verify loop);
`temperature > 0` samples with exact speculative rejection sampling. Completions carry
`logprobs` / `top_logprobs` (from one teacher-forced target forward over the output) and, like
vLLM, `token_ids` with `return_token_ids` and `token_id:N` tokens with
`return_tokens_as_token_ids`. With a drafter, `/metrics` publishes vLLM's spec-decode counters.

Text prompts are encoded with the target's own `tokenizer.json` (any target that has one; others
take token ids). Stop tokens (the target's `eos_token_id`, `stop_token_ids`, single-token `stop`
strings) are kept in the output, as `kernels_ref.loop` does. Once loaded and listening it
prints one line, `READY http://HOST:PORT`, on stdout.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from kernels_ref.checkpoint import eos_token_ids
from kernels_ref.drafter import Drafter
from kernels_ref.faults import Fault
from kernels_ref.generate import generate
from kernels_ref.load import load_drafter, load_target
from kernels_ref.logprobs import output_logprobs
from kernels_ref.loop import Generation
from kernels_ref.model import Target
from kernels_ref.plant import FirstBlockPrefixCache, decode_fault
from kernels_ref.prompts import PromptSetError, is_int, prompt_token_ids
from kernels_ref.sampling import SamplingParams
from kernels_ref.tokenizer import Tokenizer, load_tokenizer

MAX_LOGPROBS = 20
# Greedy-loop faults, and the sampler faults a greedy-drafting loop can show (not the reuse of
# drafting random numbers: the runner's drafter draws none), and the faults of this server itself.
SERVABLE_FAULTS = tuple(fault for fault in Fault if fault.runner or fault.serve_only)
DEFAULT_MAX_TOKENS = 16


class RequestError(ValueError):
    """A request the server refuses with HTTP 400 (OpenAI error shape)."""


@dataclass
class SpecCounters:
    """Cumulative speculative-decoding counters, named as vLLM publishes them."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    requests: int = 0


class ReferenceEngine:
    """The loaded models plus what a completions request needs: tokenizer, stops, counters."""

    def __init__(
        self,
        target_dir: Path,
        drafter_dir: Path | None = None,
        *,
        inject: Fault | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        model_name: str | None = None,
    ) -> None:
        if inject is not None and drafter_dir is None:
            raise ValueError("--inject plants a bug in the speculative path: it needs --drafter")
        if inject is not None and not (inject.runner or inject.serve_only):
            raise ValueError(f"{inject} needs a sampled draft; this runner drafts greedily")
        self.target: Target = load_target(target_dir, device, dtype)
        self.drafter: Drafter | None = (
            load_drafter(drafter_dir, self.target, device, dtype) if drafter_dir else None
        )
        self.inject = inject
        self.tokenizer: Tokenizer | None = load_tokenizer(target_dir)
        self.eos = eos_token_ids(target_dir)
        self.name = model_name or target_dir.resolve().name
        self.counters = SpecCounters()
        self._lock = threading.Lock()  # counters; forwards run concurrently
        # What a request's prompt becomes before decoding: itself, unless a fault says otherwise.
        self.rewrite_prompt: Callable[[list[int]], list[int]] = (
            FirstBlockPrefixCache() if inject is Fault.PREFIX_CACHE_FIRST_BLOCK else list
        )

    # ------------------------------------------------------------------ request handling

    def _prompt_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if not isinstance(prompt, str | list):
            raise RequestError("`prompt` must be one string or one list of token ids")
        try:
            ids = list(prompt_token_ids(prompt, self.tokenizer, self.target.config.vocab_size))
        except PromptSetError as error:
            raise RequestError(str(error)) from None
        if len(ids) >= self.target.config.max_position_embeddings:
            raise RequestError("the prompt does not fit the model's context")
        return ids

    def _stop_ids(self, body: dict[str, Any]) -> frozenset[int]:
        stops = set(self.eos)
        extra = body.get("stop_token_ids") or []
        if not isinstance(extra, list) or not all(is_int(t) for t in extra):
            raise RequestError("`stop_token_ids` must be a list of integers")
        stops.update(extra)
        words = body.get("stop") or []
        for word in [words] if isinstance(words, str) else words:
            token = None
            if self.tokenizer is not None and isinstance(word, str):
                token = self.tokenizer.token_id(word)
            if token is None:
                raise RequestError(f"stop {word!r} is not a single token (the only kind served)")
            stops.add(token)
        return frozenset(stops)

    def complete(self, body: Any) -> dict[str, Any]:
        """Answer one `/v1/completions` body (raises RequestError for a bad request)."""
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        for flag, allowed in (("stream", False), ("echo", False), ("n", 1), ("best_of", 1)):
            if body.get(flag, allowed) not in (allowed, None):
                raise RequestError(f"`{flag}` other than {allowed!r} is not supported")
        prompt = self._prompt_ids(body.get("prompt"))
        max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
        logprobs = body.get("logprobs")
        if not is_int(max_tokens) or max_tokens < 1:
            raise RequestError("`max_tokens` must be a positive integer")
        if logprobs is not None and (not is_int(logprobs) or not 0 <= logprobs <= MAX_LOGPROBS):
            raise RequestError(f"`logprobs` must be an integer in 0..{MAX_LOGPROBS}")
        try:
            params = SamplingParams(
                temperature=float(body.get("temperature", 1.0)),
                top_k=body.get("top_k") if body.get("top_k", -1) not in (-1, 0) else None,
                top_p=float(body["top_p"]) if body.get("top_p") is not None else None,
            )
        except (TypeError, ValueError) as error:
            raise RequestError(f"bad sampling parameters: {error}") from None
        seed = body.get("seed")
        if seed is not None and not is_int(seed):
            raise RequestError("`seed` must be an integer")

        generation = self._generate(prompt, max_tokens, self._stop_ids(body), params, seed)
        tokens = generation.tokens
        self._count(len(prompt), generation)
        choice: dict[str, Any] = {
            "index": 0,
            "text": self._decode(tokens),
            "finish_reason": "stop" if generation.stop_reason == "stop" else "length",
            "logprobs": None,
        }
        if logprobs is not None:
            choice["logprobs"] = self._logprobs(
                prompt, tokens, logprobs, bool(body.get("return_tokens_as_token_ids"))
            )
        if body.get("return_token_ids"):
            choice["token_ids"] = tokens
            choice["prompt_token_ids"] = prompt
        return {
            "id": f"cmpl-{secrets.token_hex(8)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(tokens),
                "total_tokens": len(prompt) + len(tokens),
            },
        }

    def _generate(
        self,
        prompt: list[int],
        max_tokens: int,
        stops: frozenset[int],
        params: SamplingParams,
        seed: int | None,
    ) -> Generation:
        return generate(self.target, self.drafter, self.rewrite_prompt(prompt),
                        max_new_tokens=max_tokens, stop_ids=stops,
                        inject=decode_fault(self.inject, params.greedy), sampling=params,
                        seed=secrets.randbits(63) if seed is None else seed)

    def _count(self, prompt_tokens: int, generation: Generation) -> None:
        with self._lock:
            c = self.counters
            c.requests += 1
            c.prompt_tokens += prompt_tokens
            c.generation_tokens += len(generation.tokens)
            if self.drafter is not None:
                c.drafts += len(generation.steps)
                c.draft_tokens += sum(step.block_size - 1 for step in generation.steps)
                c.accepted_tokens += sum(step.accepted for step in generation.steps)

    def _decode(self, tokens: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(f"<|id:{t}|>" for t in tokens)
        return self.tokenizer.decode(tokens)

    def _token_name(self, token: int, as_id: bool) -> str:
        return f"token_id:{token}" if as_id else self._decode([token])

    def _logprobs(
        self, prompt: list[int], tokens: list[int], top: int, as_ids: bool
    ) -> dict[str, Any]:
        """The target's log-probabilities of `tokens` after `prompt` (one teacher-forced pass)."""
        if not tokens:
            return {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        scores = output_logprobs(self.target, prompt, tokens[:-1])
        chosen = scores.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).tolist()
        best = scores.topk(top, dim=-1) if top else None
        tops, offsets, offset = [], [], 0
        for position, token in enumerate(tokens):
            entry = {}
            if best is not None:
                for value, index in zip(best.values[position].tolist(),
                                        best.indices[position].tolist(), strict=True):
                    entry[self._token_name(index, as_ids)] = value
            entry.setdefault(self._token_name(token, as_ids), chosen[position])
            tops.append(entry)
            offsets.append(offset)
            offset += len(self._decode([token]))
        return {
            "tokens": [self._token_name(t, as_ids) for t in tokens],
            "token_logprobs": chosen,
            "top_logprobs": tops,
            "text_offset": offsets,
        }

    def metrics_text(self) -> str:
        """Prometheus text: request/token counters, and vLLM spec-decode counters with a drafter."""
        c, label = self.counters, f'{{model_name="{self.name}"}}'
        rows = [
            ("vllm:request_success", "Finished requests.", c.requests),
            ("vllm:prompt_tokens", "Prefill tokens processed.", c.prompt_tokens),
            ("vllm:generation_tokens", "Generation tokens processed.", c.generation_tokens),
        ]
        if self.drafter is not None:
            rows += [
                ("vllm:spec_decode_num_drafts", "Draft-verify steps.", c.drafts),
                ("vllm:spec_decode_num_draft_tokens", "Draft tokens proposed.", c.draft_tokens),
                ("vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.",
                 c.accepted_tokens),
            ]
        lines = []
        for name, help_text, value in rows:
            lines += [f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter",
                      f"{name}_total{label} {float(value)}"]
        return "\n".join(lines) + "\n"


def _error(message: str, status: int = 400) -> JSONResponse:
    kind = "invalid_request_error" if status == 400 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status)


def make_app(engine: ReferenceEngine) -> Starlette:
    """The starlette application serving `engine`."""

    async def completions(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error("the body is not valid JSON")
        try:
            return JSONResponse(await run_in_threadpool(engine.complete, body))
        except RequestError as error:
            return _error(str(error))

    async def models(request: Request) -> Response:
        card = {"id": engine.name, "object": "model", "owned_by": "kernels_ref"}
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(engine.metrics_text(), media_type="text/plain; version=0.0.4")

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),
            Route("/metrics", metrics),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels_ref.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, required=True, help="target model folder")
    parser.add_argument("--drafter", type=Path, help="DFlash drafter folder (speculative mode)")
    parser.add_argument("--inject", choices=[str(fault) for fault in SERVABLE_FAULTS],
                        help="plant a known engine bug in the speculative path")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model-name", help="served model name (default: the target folder)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    try:
        inject = Fault.parse(args.inject) if args.inject else None  # argparse checked the name
        engine = ReferenceEngine(args.target, args.drafter, inject=inject,
                                 device=args.device, dtype=args.dtype, model_name=args.model_name)
    except Exception as error:  # noqa: BLE001 - one line, never a traceback
        if os.environ.get("DFLASH_GUARD_DEBUG"):
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2
    sock.listen(128)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(make_app(engine), log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2)
    print(f"READY http://{host}:{port}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
