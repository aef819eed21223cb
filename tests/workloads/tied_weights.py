"""Parameters that share storage, trained with Adam: what python.memory_breakdown must count once.

- tied weights: the output projection uses the embedding's weight (one Parameter, two modules),
  as language models do;
- two Parameters that are views of one flat buffer (what optimizers with contiguous parameter
  buffers do): two tensors, one storage.

`model.parameters()` yields the tied weight once, so the seed's sum of p.numel() *
p.element_size() over it is the memory the parameters hold; adding up each parameter's whole
storage instead would count the flat buffer twice. Globals for `probing eval`: model, optimizer,
train_loader.

    python3 tests/workloads/tied_weights.py --steps 5
"""
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import _workload as wl

VOCAB, DIM, CONTEXT = 64, 32, 8


class FlatPair(nn.Module):
    """A scale and a shift, both views into one buffer."""

    def __init__(self, dim):
        super().__init__()
        flat = torch.cat([torch.ones(dim), torch.zeros(dim)])
        self.scale = nn.Parameter(flat[:dim])
        self.shift = nn.Parameter(flat[dim:])

    def forward(self, x):
        return x * self.scale + self.shift


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.mix = nn.Linear(DIM, DIM)
        self.norm = FlatPair(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied

    def forward(self, tokens):
        x = self.norm(torch.tanh(self.mix(self.embed(tokens))))
        return self.head(x)


parser = wl.make_parser(__doc__.splitlines()[0], steps=5)

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    g = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, VOCAB, (256, CONTEXT + 1), generator=g)
    train_loader = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=16,
                              shuffle=True, drop_last=True,
                              generator=torch.Generator().manual_seed(args.seed))
    model = TinyLM()
    assert model.norm.scale.untyped_storage().data_ptr() == \
        model.norm.shift.untyped_storage().data_ptr()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    trainer = wl.Trainer(model, train_loader, optimizer, loss_fn)
    loss = None
    for step in range(1, args.steps + 1):
        loss = trainer.train_step()
        wl.report_step(step, loss, args.print_every)
    wl.report_final(loss)
    wl.hold(args.hold_file)
