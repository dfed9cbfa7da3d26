"""Sampled decoding: temperature / top-k / top-p, and exact speculative rejection sampling.

Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding") and Chen et
al. 2023 ("Accelerating LLM Decoding with Speculative Sampling"): draft token x_i is accepted with
probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection the next token is drawn from the
normalised max(0, p_i - q_i); when every draft is accepted a bonus token is drawn from p_K. The
committed tokens are then distributed exactly as autoregressive sampling from p. A greedy (argmax)
draft is the one-hot q: accept with probability p(x), otherwise resample from p with x removed.

Randomness comes from two separate `torch.Generator` streams: one for drafting, one for the
verifier's accept tests and resampling. Every function is vectorised over a leading batch of draws.
`RejectionSampler` is the runner loop's sampled verifier. `SamplerHooks` are the sampler's
random-number and residual choices; `kernels_ref.plant` overrides one to plant a known bug, so the
statistical check can prove it catches it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How the target's logits become the distribution p (temperature 0 means greedy)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError("top_k must be >= 1")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class BlockVerdict:
    """The verifier's decision for a batch of drafted blocks."""

    accepted: torch.Tensor  # [N] number of draft tokens accepted, 0..K
    next_token: torch.Tensor  # [N] the resampled token (after a rejection) or the bonus token


def probs_from_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """p over the last axis: temperature, then top-k, then top-p (nucleus), in float64."""
    logits = logits.double()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()
    scaled = logits / params.temperature
    if params.top_k is not None and params.top_k < scaled.shape[-1]:
        kth = scaled.topk(params.top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p is not None and params.top_p < 1:
        ordered, order = scaled.sort(dim=-1, descending=True)
        ordered_probs = ordered.softmax(-1)
        before = ordered_probs.cumsum(-1) - ordered_probs  # mass strictly ahead of each token
        drop_sorted = before >= params.top_p  # keeps the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled.softmax(-1)


def seeded(seed: int) -> torch.Generator:
    """A CPU generator seeded with any integer (taken mod 2**64, as torch takes the ones it
    accepts: a seed derived by arithmetic never overflows)."""
    return torch.Generator().manual_seed(seed % 2**64)


def sample_with_uniforms(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: one token per row of `probs` [..., V] from `uniforms` [...]."""
    cdf = probs.cumsum(-1)
    target = uniforms.to(cdf.dtype).unsqueeze(-1) * cdf[..., -1:]
    index = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return index.clamp(max=probs.shape[-1] - 1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of `probs` [..., V], drawing uniforms from `generator`."""
    uniforms = torch.rand(probs.shape[:-1], generator=generator, dtype=torch.float64)
    return sample_with_uniforms(probs, uniforms)


def draft_block(
    draft_logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator,
    *,
    greedy_draft: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Choose draft tokens from the drafter's logits [N, K, V].

    Returns (tokens [N, K], q [N, K, V] or None for a greedy one-hot draft, the drafting
    uniforms [N, K] or None). A greedy draft draws no random numbers.
    """
    if greedy_draft or params.greedy:
        return draft_logits.argmax(-1), None, None
    q = probs_from_logits(draft_logits, params)
    uniforms = torch.rand(q.shape[:-1], generator=generator, dtype=torch.float64)
    return sample_with_uniforms(q, uniforms), q, uniforms


class SamplerHooks:
    """The verifier's choices that a biased sampler gets wrong, each made exactly."""

    def accept_uniforms(
        self, fresh: torch.Tensor, draft_uniforms: torch.Tensor | None
    ) -> torch.Tensor:
        """The uniforms `[N, K]` of the accept tests: fresh ones from the verifier's stream."""
        return fresh

    def residual(self, p_next: torch.Tensor, q_next: torch.Tensor) -> torch.Tensor:
        """The (unnormalised) distribution `[N, V]` to draw from after a rejection (or at the
        bonus position, where q is 0): max(0, p - q)."""
        return (p_next - q_next).clamp_min(0)

    def next_uniforms(
        self, fresh: torch.Tensor, uniforms: torch.Tensor, accepted: torch.Tensor
    ) -> torch.Tensor:
        """The uniforms `[N]` that draw the resampled or bonus token: fresh ones."""
        return fresh


def verify_block(
    p: torch.Tensor,
    draft: torch.Tensor,
    q: torch.Tensor | None,
    generator: torch.Generator,
    *,
    draft_uniforms: torch.Tensor | None = None,
    hooks: SamplerHooks | None = None,
) -> BlockVerdict:
    """Speculative rejection sampling over a batch of blocks.

    p: [N, K+1, V] the target's distributions at the block positions (p[:, i] is the
    distribution of the token after the anchor and draft[:, :i]); draft: [N, K];
    q: [N, K, V] the draft distributions, or None for a greedy draft (one-hot q).
    `generator` is the verifier's own stream (never the drafter's). `hooks` (default: exact)
    may carry a planted sampler fault (`kernels_ref.plant`).
    """
    hooks = hooks or SamplerHooks()
    n, k = draft.shape
    p = p.double()
    q = torch.nn.functional.one_hot(draft, p.shape[-1]).double() if q is None else q.double()
    p_draft = p[:, :k].gather(-1, draft.unsqueeze(-1)).squeeze(-1)  # [N, K]
    q_draft = q.gather(-1, draft.unsqueeze(-1)).squeeze(-1).clamp_min(1e-300)
    fresh = torch.rand((n, k), generator=generator, dtype=torch.float64)
    uniforms = hooks.accept_uniforms(fresh, draft_uniforms)
    accept = uniforms < p_draft / q_draft  # u < min(1, p/q)
    accepted = accept.long().cumprod(-1).sum(-1)  # [N] longest accepted prefix

    rows = torch.arange(n)
    p_next = p[rows, accepted]  # [N, V]: at the first rejection, or the bonus position K
    q_next = torch.cat([q, q.new_zeros((n, 1, q.shape[-1]))], dim=1)[rows, accepted]  # bonus: 0
    residual = hooks.residual(p_next, q_next)
    mass = residual.sum(-1, keepdim=True)
    residual = torch.where(mass > 0, residual, p_next)  # p == q: rejection had probability 0
    next_uniforms = torch.rand(n, generator=generator, dtype=torch.float64)
    next_uniforms = hooks.next_uniforms(next_uniforms, uniforms, accepted)
    return BlockVerdict(accepted, sample_with_uniforms(residual, next_uniforms))


class RejectionSampler:
    """The sampled verifier of the runner loop: exact rejection sampling of a greedy (one-hot)
    draft, drawing every random number from its own `generator` (drafting draws none)."""

    def __init__(
        self,
        params: SamplingParams,
        generator: torch.Generator,
        hooks: SamplerHooks | None = None,
    ) -> None:
        self.params, self.generator, self.hooks = params, generator, hooks

    def first(self, logits: torch.Tensor) -> int:
        """The first new token, drawn from p at the prompt's last position (`logits` `[V]`)."""
        return int(sample(probs_from_logits(logits[None].cpu(), self.params), self.generator)[0])

    def verify(self, drafts: list[int], logits: torch.Tensor) -> tuple[int, int]:
        """(drafts accepted, the resampled or bonus token) from logits `[1 + K, V]`."""
        p = probs_from_logits(logits.cpu(), self.params).unsqueeze(0)  # [1, K+1, V]
        draft = torch.tensor([drafts], dtype=torch.long)  # [1, K]
        verdict = verify_block(p, draft, None, self.generator, hooks=self.hooks)
        return int(verdict.accepted[0]), int(verdict.next_token[0])
