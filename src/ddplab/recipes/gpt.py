"""gpt: a character-level transformer language model trained with DDP, reporting tokens/s (and MFU on GPUs).

Run it (both give the same result):

    ddplab train gpt --nproc 2                                   # a CPU-sized toy on the bundled stories
    torchrun --nproc-per-node 2 -m ddplab.recipes.gpt

    ddplab train gpt --nproc 2 --text my.txt --epochs 3          # your own UTF-8 text
    ddplab train gpt --nproc 2 --checkpoint-dir runs/gpt         # checkpoints, metrics.jsonl, model.pt

GPT-2-small sized on GPUs (124M-parameter shape, bf16, compiled; MFU against the GPU's dense BF16 peak):

    ddplab train gpt --nproc 8 --size small --stride 128 --batch-size 16 --amp bf16 --compile --lr 6e-4
    ddplab memory gpt --size medium --batch-size 8 --nproc 2        # will it fit? ddp, zero1 or fsdp
    ddplab train gpt --nproc 8 --size xl --strategy fsdp --stride 128 --batch-size 4 --amp bf16
    (--stride 128 makes overlapping windows, so the small bundled text still gives thousands of samples;
     --peak-tflops X sets the peak for a GPU that ddplab's table does not know)

The model follows nanoGPT: token and position embeddings, pre-norm blocks of causal self-attention through
torch's scaled_dot_product_attention (flash/memory-efficient kernels where available) and a GELU MLP, and an output
layer tied to the token embedding. The data is the text cut into windows of --block-size characters; a sample's
target is its window shifted by one character. The default text, stories.txt, ships with ddplab (made by
ddplab/data/make_stories.py, public domain); nothing is downloaded.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ddplab.errors import DdplabError
from ddplab.train.config import TrainConfig, opt
from ddplab.train.data import TensorData
from ddplab.train.loop import Recipe

BUNDLED = "stories.txt"

# --size presets: GPT-2's published shapes (Radford et al. 2019, table 2; the 124M/350M/774M/1558M checkpoints'
# config.json on the Hugging Face hub), and GPT-3 XL's 1.3B (Brown et al. 2020, table 2.1), with GPT-2's
# 50257-token vocabulary, so that parameter counts and memory match the real models.
SIZES = {
    "small": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257),  # 124M
    "medium": dict(n_layer=24, n_head=16, n_embd=1024, block_size=1024, vocab_size=50257),  # 350M
    "large": dict(n_layer=36, n_head=20, n_embd=1280, block_size=1024, vocab_size=50257),  # 774M
    "xl": dict(n_layer=48, n_head=25, n_embd=1600, block_size=1024, vocab_size=50257),  # 1558M
    "1.3b": dict(n_layer=24, n_head=16, n_embd=2048, block_size=1024, vocab_size=50257),  # GPT-3 XL, 1.3B
}


@dataclass
class Config(TrainConfig):
    text: str = opt("", "UTF-8 text file to learn (default: the stories bundled with ddplab)")
    block_size: int = opt(64, "context length in characters", shape=True)
    stride: int = opt(0, "characters between window starts (0 = block size: windows do not overlap)")
    n_layer: int = opt(4, "transformer blocks", shape=True)
    n_head: int = opt(4, "attention heads per block", shape=True)
    n_embd: int = opt(128, "model width; must be divisible by --n-head", shape=True)
    vocab_size: int = opt(0, "embedding rows (0 = the text's characters; GPT-2 has 50257 tokens)", shape=True)
    size: str = opt(
        "",
        "a real model's shape: small, medium, large, xl (GPT-2 124M..1.5B) or 1.3b (GPT-3 XL); "
        "sets --n-layer --n-head --n-embd --block-size --vocab-size (default: none, those flags decide)",
        choices=tuple(SIZES),  # argparse checks a given value only: the empty default needs no choice of its own
    )
    dropout: float = opt(0.0, "dropout probability (0 for short runs: nothing to regularise yet)")
    weight_decay: float = opt(0.1, "AdamW weight decay on matrices only (as in GPT-2)")
    warmup: int = opt(20, "optimizer steps of linear learning-rate warm-up, then cosine decay to lr/10")
    peak_tflops: float = opt(0.0, "the GPU's dense BF16 peak for MFU, when ddplab's table lacks it (0 = table)")
    epochs: int = opt(1, "passes over the data; one over the bundled text takes seconds on 2 CPU ranks (9 s here)")
    batch_size: int = opt(16, "samples per rank per micro-batch; a sample is a window of --block-size characters")
    grad_clip: float = opt(1.0, "clip the gradient norm to this (0 = off); on, as GPT training usually does")

    def __post_init__(self) -> None:
        for name, value in SIZES.get(self.size, {}).items():  # a preset wins over the shape flags it sets
            setattr(self, name, value)

    def check(self) -> None:
        super().check()
        if self.size and self.size not in SIZES:
            raise DdplabError(f"--size {self.size}: use one of {', '.join(SIZES)}")
        if self.vocab_size < 0:
            raise DdplabError(f"--vocab-size {self.vocab_size}: must be 0 (the text's characters) or positive")
        if self.text and not Path(self.text).is_file():
            raise DdplabError(
                f"--text {self.text}: no such file: pass a UTF-8 text file, or omit --text to use the bundled stories"
            )
        if self.n_embd % self.n_head:
            raise DdplabError(
                f"--n-embd {self.n_embd} is not divisible by --n-head {self.n_head}: pick widths "
                "that are (e.g. --n-embd 768 --n-head 12)"
            )
        for name in ("block_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) < 1:
                raise DdplabError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be at least 1")
        if self.stride < 0 or not 0 <= self.dropout < 1:
            raise DdplabError("--stride must be >= 0 and --dropout in [0, 1)")


# ------------------------------------------------------------------------------------------------- data


def read_text(cfg: Config) -> str:
    try:
        if cfg.text:
            return Path(cfg.text).read_text(encoding="utf-8")
        return resources.files("ddplab").joinpath("data", BUNDLED).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DdplabError(f"cannot read --text {cfg.text or BUNDLED}: {e}: pass a readable UTF-8 text file") from None


def make_data(cfg: Config) -> TensorData:
    text = read_text(cfg)
    vocab = "".join(sorted(set(text)))  # every rank reads the same file, so every rank gets the same vocabulary
    index = {ch: i for i, ch in enumerate(vocab)}
    tokens = torch.tensor([index[ch] for ch in text], dtype=torch.long)
    stride = cfg.stride or cfg.block_size
    windows = max((len(tokens) - cfg.block_size - 1) // stride + 1, 0)
    offsets = {}  # per device, made once

    def take(tensors, indices):
        # A batch of windows in one indexing operation: rows start at index*stride, columns walk the window.
        (toks,) = tensors
        if toks.device not in offsets:
            offsets[toks.device] = torch.arange(cfg.block_size + 1, device=toks.device)
        rows = toks[(indices * stride).unsqueeze(1) + offsets[toks.device]]
        return rows[:, :-1], rows[:, 1:]

    return TensorData(tokens, size=windows, take=take, info={"vocab": vocab})


# ------------------------------------------------------------------------------------------------- model


class SelfAttention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.n_embd), SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
            nn.GELU(),
            nn.Linear(4 * cfg.n_embd, cfg.n_embd),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: Config, vocab_size: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied: one matrix reads and writes characters
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by depth
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def make_model(cfg: Config, data: TensorData) -> nn.Module:
    # Extra rows beyond the text's characters are never looked up; they give a real model's size and memory.
    return GPT(cfg, vocab_size=max(len(data.info["vocab"]), cfg.vocab_size))


def make_optimizer(cfg: Config, model: nn.Module) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embeddings; not biases or norms
    rest = [p for p in model.parameters() if p.dim() < 2]
    fused = next(model.parameters()).device.type == "cuda"  # one kernel for the whole update on GPUs
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        fused=fused,
    )


def lr_at(cfg: Config, step: int, total: int) -> float:
    """Linear warm-up, then cosine decay to lr/10: a pure function of the step, so a resumed run gets the same."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(total - cfg.warmup, 1)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(progress, 1.0))))


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))


def flops_per_sample(cfg: Config, model: nn.Module) -> float:
    """Training FLOPs per window (forward + backward): 6 per parameter per token, plus attention's
    12 * layers * width * context per token (the PaLM paper's appendix B; nanoGPT's estimate_mfu)."""
    params = sum(p.numel() for p in model.parameters()) - model.pos.weight.numel()
    per_token = 6 * params + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size
    return per_token * cfg.block_size


def memory_floor(cfg: Config) -> tuple[int, int]:
    """(parameters, activation bytes of one fp32 training step at cfg.batch_size) by arithmetic on the shapes, for
    `ddplab train`'s check that the ranks fit a CPU machine's RAM before any starts (train/hostfit.py), where a trace
    on fake tensors would cost every run seconds. Fitted to that trace (ddplab.perf.memory, tests/train/
    test_hostfit.py): per layer ~15 tensors of batch x context x width survive to backward; the logits of batch x
    context x vocabulary are held three times at the loss (the logits, the softmax, its gradient). Attention's
    context x context scores are not counted: torch's CPU and GPU kernels (flash, memory-efficient) never hold them."""
    vocab = cfg.vocab_size or len(set(read_text(cfg)))
    e, t = cfg.n_embd, cfg.block_size
    params = vocab * e + t * e + cfg.n_layer * (12 * e * e + 13 * e) + 2 * e  # the output layer is tied
    tokens = cfg.batch_size * t
    return params, 4 * (15 * cfg.n_layer * tokens * e + 3 * tokens * vocab)


RECIPE = Recipe(
    name="gpt",
    config=Config,
    data=make_data,
    model=make_model,
    optimizer=make_optimizer,
    loss=loss_fn,
    lr_at=lr_at,
    flops_per_sample=flops_per_sample,
    tokens_per_sample=lambda cfg: cfg.block_size,
)

if __name__ == "__main__":
    sys.exit(RECIPE.main())
