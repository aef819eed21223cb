"""A small transformer encoder (pre-norm, causal self-attention written by hand), trained with
Adam to predict the next token of synthetic sequences.

What it exercises: a deeper module tree (~60 modules) with the qualified names the seed's
attention query looks for (`layers.N.attn`, `layers.N.attn.q_proj`, ...), LayerNorm, GELU,
an embedding, Adam, and optional activation checkpointing of each block (--checkpointing).

Globals for `probing eval`: model (with model.config.max_position_embeddings, .hidden_size,
.num_attention_heads, as a Hugging Face model has), train_loader, optimizer, batch_size, trainer.
Every block has a `gradient_checkpointing` attribute, as Hugging Face blocks do.

    python3 tests/workloads/transformer.py --steps 250
"""
import math
import types

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset

import _workload as wl


class SyntheticSequences(Dataset):
    """Sequence i is fixed by i alone. Tokens follow t[k+1] = (3 t[k] + 1) mod vocab with some
    noise, so there is something to learn."""

    def __init__(self, length, seq_len, vocab):
        self.length, self.seq_len, self.vocab = length, seq_len, vocab

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(20_000 + index)
        tokens = torch.empty(self.seq_len + 1, dtype=torch.long)
        tokens[0] = torch.randint(self.vocab, (1,), generator=g)
        noise = torch.rand(self.seq_len, generator=g) < 0.1
        random_tokens = torch.randint(self.vocab, (self.seq_len,), generator=g)
        for k in range(self.seq_len):
            nxt = (3 * int(tokens[k]) + 1) % self.vocab
            tokens[k + 1] = random_tokens[k] if noise[k] else nxt
        return tokens[:-1], tokens[1:]


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, t, c = x.shape
        h = self.heads

        def split(y):
            return y.view(b, t, h, c // h).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // h)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        out = scores.softmax(dim=-1) @ v
        return self.out_proj(out.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = SelfAttention(hidden, heads)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)
        self.gradient_checkpointing = False

    def _body(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def forward(self, x):
        if self.gradient_checkpointing and self.training:
            return checkpoint(self._body, x, use_reentrant=False)
        return self._body(x)


class TinyTransformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        c = config
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.embed_positions = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.layers = nn.ModuleList(
            Block(c.hidden_size, c.num_attention_heads) for _ in range(c.num_hidden_layers))
        self.ln_f = nn.LayerNorm(c.hidden_size)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1])
        x = self.embed_tokens(tokens) + self.embed_positions(positions)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_f(x))


def next_token_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


parser = wl.make_parser(__doc__.splitlines()[0], steps=100)
parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--checkpointing", action="store_true",
                    help="activation checkpointing on every block")

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)

    config = types.SimpleNamespace(vocab_size=64, hidden_size=64, num_attention_heads=4,
                                   num_hidden_layers=args.layers, max_position_embeddings=32)
    batch_size = args.batch_size
    train_loader = DataLoader(
        SyntheticSequences(512, config.max_position_embeddings, config.vocab_size),
        batch_size=batch_size, shuffle=True, num_workers=args.workers, drop_last=True,
        generator=torch.Generator().manual_seed(args.seed))
    model = TinyTransformer(config)
    for block in model.layers:
        block.gradient_checkpointing = args.checkpointing
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    trainer = wl.Trainer(model, train_loader, optimizer, next_token_loss)

    model.train()
    loss = None
    for step in range(1, args.steps + 1):
        loss = trainer.train_step()
        wl.report_step(step, loss, args.print_every)
    wl.report_final(loss)
    wl.hold(args.hold_file)
