#!/usr/bin/python3
"""The PyTorch twin of Kiln's nn::GPT (nn/models/gpt.h).

A GPT-2-style decoder with nanoGPT's module and parameter names
("transformer.wte.weight", ..., "transformer.h.0.attn.c_attn.weight", ...,
"transformer.ln_f.weight", "lm_head.weight"), written for this project and
equivalent to nanoGPT's model.py: the same layers, the same GPT-2
initialisation, lm_head.weight tied to transformer.wte.weight, and
configure_optimizers' weight-decay groups. Attention runs through
torch's fused scaled_dot_product_attention where torch has it (2.x, the
speed anchor of bench/gpt_vs_pytorch.sh) and is written out (softmax of the
masked scores) on Debian's torch 1.13, the parity oracle; the causal mask is
a non-persistent buffer, so state dicts hold exactly nanoGPT's keys. As Kiln's
GPT, forward can extend a key/value cache (one dict per layer) for
generation. The parity tests import it:

    from gpt_torch import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=65, block_size=16, n_layer=2, n_head=2, n_embd=32))
    model.load_state_dict(safetensors_torch.load_file("gpt.safetensors"))

As a command, `gpt_torch.py` prints a small model and its parameter names,
shapes and count.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 50304
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """LayerNorm whose bias can be switched off (torch 1.13's cannot)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        causal = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("causal", causal.view(1, 1, config.block_size, config.block_size), persistent=False)

    def forward(self, x, cache=None):
        B, T, E = x.shape
        H, D = self.n_head, E // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        if cache is not None:  # the keys and values of the tokens before these
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        # A prompt is causal; one new token attends every cached key.
        causal = T > 1
        if hasattr(F, "scaled_dot_product_attention"):
            p = self.attn_dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # (B, H, T, Tk)
            if causal:
                att = att.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, E)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln_1(x), cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # One tensor under two names: state_dict() lists both keys,
        # named_parameters() the first ("transformer.wte.weight").
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None, caches=None):
        """caches: None, or one dict per layer, extended by idx's keys and values."""
        T = idx.size(1)
        past = caches[0]["k"].size(2) if caches and "k" in caches[0] else 0
        assert past + T <= self.config.block_size, f"sequence of length {past + T}, block_size is only {self.config.block_size}"
        pos = torch.arange(past, past + T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for i, block in enumerate(self.transformer.h):
            x = block(x, None if caches is None else caches[i])
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def optimizer_groups(self, weight_decay):
        """configure_optimizers' groups: weights of 2+ dims decay, the rest do not."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]


def _main():
    model = GPT(GPTConfig(vocab_size=65, block_size=16, n_layer=2, n_head=2, n_embd=32))
    print(model)
    for name, p in model.named_parameters():
        print(f"{name}: {list(p.shape)}")
    print("state_dict keys:", list(model.state_dict()))
    print("parameters:", sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    _main()
