"""Inference only: model.eval() and torch.no_grad(), a forward loop with no optimizer and no
backward. Under probing each root forward is one step.

Prints "step N" lines and at the end "final output: <float.hex() of the last output's sum>".
Globals for `probing eval`: model, batch_size.

    python3 tests/workloads/inference.py --steps 50
"""
import torch
from torch import nn

import _workload as wl


class Classifier(nn.Module):
    def __init__(self, features=32, width=64, classes=10):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(features, width), nn.ReLU(),
                                     nn.Linear(width, width), nn.ReLU())
        self.dropout = nn.Dropout(0.5)  # a no-op in eval mode
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.dropout(self.encoder(x)))


parser = wl.make_parser(__doc__.splitlines()[0], steps=50)
parser.add_argument("--batch-size", type=int, default=32)

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)

    batch_size = args.batch_size
    model = Classifier()
    model.eval()
    g = torch.Generator().manual_seed(99)
    output = None
    with torch.no_grad():
        for step in range(1, args.steps + 1):
            x = torch.randn(batch_size, 32, generator=g)
            output = model(x)
            wl.report_step(step, output.sum(), args.print_every, name="output_sum")
    wl.report_final(None if output is None else output.sum(), label="final output")
    wl.hold(args.hold_file)
