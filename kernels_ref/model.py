"""Qwen3 and Llama decoder-only transformers and their KV cache, in plain PyTorch (gpt-fast style).

Per layer: RMSNorm -> GQA attention (Qwen3: per-head RMSNorm on q and k; RoPE from `rope.py`,
`default` or Llama-3.1's `llama3`) -> residual -> RMSNorm -> SwiGLU MLP -> residual. The two
families differ only in the q/k norms, their config defaults and Llama's optional MLP bias (a
`Family` each, in `config.py`, which also refuses by name what these layers do not implement).
Module names mirror Hugging Face `Qwen3ForCausalLM`/`LlamaForCausalLM`, so a real checkpoint's
safetensors load unchanged.
References: transformers' modeling_qwen3.py and modeling_llama.py; gpt-fast model.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kernels_ref.config import ModelConfig


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in at least float32 (as Qwen3 does)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate `x` `[1, heads, T, head_dim]` by the tables of its positions."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """GQA attention with q/k norms over a preallocated `KVCache` layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm: nn.Module = nn.Identity()
        self.k_norm: nn.Module = nn.Identity()
        if cfg.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def project_kv(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """Keys (normed, rotated) and values `[B, n_kv, T, head_dim]` of `x` `[B, T, hidden]`."""
        b, t = x.shape[:2]
        k = self.k_norm(self.k_proj(x).view(b, t, self.n_kv, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        return apply_rope(k, cos, sin), v

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache, layer: int, mask: Tensor
    ) -> Tensor:
        """Attend `x` `[B, T, hidden]` over `cache`'s layer after writing x's own keys/values
        into it at the cache's length; `mask` `[T, max_len]` (True = may attend)."""
        b, t = x.shape[:2]
        q = self.q_norm(self.q_proj(x).view(b, t, self.n_heads, self.head_dim)).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k, v = cache.write(layer, *self.project_kv(x, cos, sin))  # [B, n_kv, max_len, head_dim]
        groups = self.n_heads // self.n_kv
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, heads, T, head_dim]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    """SwiGLU feed-forward."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        bias = cfg.mlp_bias
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm attention and MLP blocks with residuals."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache, layer: int, mask: Tensor
    ) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, layer, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class KVCache:
    """Preallocated per-layer keys/values `[B, n_kv, max_len, head_dim]` and a device length.

    The one cache kind, for the target and the drafter (gpt-fast's `KVCache`). Writes go to
    `length..length+T-1` (`index_copy_`), attention runs over the whole buffers with a mask
    hiding the unwritten tail, and `crop(n)` only sets the length (the stale tail is masked,
    then overwritten). Nothing is reallocated or read back to the host while decoding, so a
    step over it can be captured as a CUDA graph.
    """

    def __init__(
        self,
        n_layers: int,
        n_kv: int,
        head_dim: int,
        max_len: int,
        *,
        batch: int = 1,
        device: torch.device | str,
        dtype: torch.dtype,
    ) -> None:
        shape = (batch, n_kv, max_len, head_dim)  # zeros, not empty: masked NaNs would leak
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.max_len = max_len
        self.length = torch.zeros((), dtype=torch.long, device=device)  # [] on the device

    def __len__(self) -> int:
        return int(self.length)  # a host read: not for use inside a captured step

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store `k`, `v` `[B, n_kv, T, head_dim]` at positions length..length+T-1 of `layer`;
        return its whole buffers. The length moves only with `advance`."""
        index = self.length + torch.arange(k.shape[2], device=k.device)
        keys, values = self.keys[layer], self.values[layer]
        keys.index_copy_(2, index, k.to(keys.dtype))
        values.index_copy_(2, index, v.to(values.dtype))
        return keys, values

    def causal_mask(self, t: int) -> Tensor:
        """`[t, max_len]`: query i (at position length+i) sees positions 0..length+i."""
        device = self.length.device
        last = self.length + torch.arange(t, device=device)  # [t]
        return torch.arange(self.max_len, device=device)[None, :] <= last[:, None]

    def block_mask(self, t: int) -> Tensor:
        """`[t, max_len]`: every query sees positions 0..length+t-1 (a bidirectional block)."""
        visible = torch.arange(self.max_len, device=self.length.device) < self.length + t
        return visible.expand(t, -1)

    def advance(self, t: int) -> None:
        self.length.add_(t)

    def crop(self, length: int) -> None:
        """Forget every position from `length` on (rejected draft tokens)."""
        self.length.fill_(length)


class DecoderStack(nn.Module):
    """The decoder stack (`model.*` in HF names)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Target(nn.Module):
    """A Qwen3ForCausalLM or LlamaForCausalLM: decoder stack plus LM head (tied to the embedding
    when configured)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = DecoderStack(cfg)
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        )

    def head(self, normed: Tensor) -> Tensor:
        """Logits of final-normed hidden states (the drafter borrows this head)."""
        if self.lm_head is None:
            return normed @ self.model.embed_tokens.weight.T
        return self.lm_head(normed)

    def new_cache(self, max_len: int | None = None, batch: int = 1) -> KVCache:
        """An empty cache for `max_len` positions (default `max_position_embeddings`) on the
        model's device and dtype."""
        weight = self.model.embed_tokens.weight
        return KVCache(
            self.config.num_hidden_layers,
            self.config.num_key_value_heads,
            self.config.head_dim,
            max_len or self.config.max_position_embeddings,
            batch=batch,
            device=weight.device,
            dtype=weight.dtype,
        )

    def forward(
        self, ids: Tensor, positions: Tensor, cache: KVCache
    ) -> tuple[Tensor, list[Tensor]]:
        """Run `ids` `[B, T]` at `positions` `[T]` after the cached prefix, appending to `cache`.

        Returns logits `[B, T, vocab]` and the hidden states at every layer boundary
        (HF `hidden_states`: index 0 the embeddings, index L+1 the output of layer L).
        """
        x = self.model.embed_tokens(ids)
        cos, sin = self.config.rope.tables(positions, self.config.head_dim, x.dtype)
        mask = cache.causal_mask(ids.shape[1])  # [T, max_len]
        hidden = [x]
        for index, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, cache, index, mask)
            hidden.append(x)
        cache.advance(ids.shape[1])
        return self.head(self.model.norm(x)), hidden
