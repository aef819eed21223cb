"""A small model under torch.compile, in the ways that make compiled training slow:

    --shapes every     the batch size changes every step (dynamic=False): a recompile each step,
                       until torch._dynamo.config.recompile_limit (--limit) makes the frame eager
    --shapes rotate    four batch sizes in turn (dynamic=False): four compiles, then none
    --shapes fixed     one batch size: one compile (the healthy case)
    --graph-break      forward calls .item() on a tensor: a graph break on every call
    --backend NAME     torch.compile backend (default "eager": Dynamo without Inductor's
                       compile time; "inductor" for the real thing)
    --width N          the layers' width (default 1024: a step of tens of ms, so the loop's own
                       Python is a small share of it)

    python3 tests/workloads/compiled.py --steps 12 --shapes every
"""
import torch
from torch import nn

import _workload as wl


class Net(nn.Module):
    def __init__(self, width, graph_break=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width))
        self.head = nn.Linear(width, 1)
        self.graph_break = graph_break

    def forward(self, x):
        h = self.body(x)
        if self.graph_break and h.sum().item() > 1e9:  # .item(): Dynamo breaks the graph here
            h = h * 0
        return self.head(h.relu())


parser = wl.make_parser(__doc__.splitlines()[0], steps=12)
parser.add_argument("--shapes", choices=("every", "rotate", "fixed"), default="fixed")
parser.add_argument("--graph-break", action="store_true")
parser.add_argument("--backend", default="eager")
parser.add_argument("--limit", type=int, default=8, help="torch._dynamo.config.recompile_limit")
parser.add_argument("--width", type=int, default=1024)

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    torch.use_deterministic_algorithms(False)
    import torch._dynamo

    torch._dynamo.config.recompile_limit = args.limit
    model = Net(args.width, args.graph_break)
    compiled = torch.compile(model, backend=args.backend,
                             dynamic=False if args.shapes != "fixed" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(7)
    loss = None
    for step in range(args.steps):
        if args.shapes == "every":
            batch = 32 + step
        elif args.shapes == "rotate":
            batch = (32, 40, 48, 56)[step % 4]
        else:
            batch = 48
        x = torch.randn(batch, args.width, generator=g)
        loss = compiled(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        wl.report_step(step, loss, args.print_every)
    wl.report_final(loss)
    # torch's own counts, for the tests to hold python.compiles against
    from torch._dynamo.utils import counters

    wl.say(f"dynamo: frames {counters['frames']['total']} graph_breaks "
           f"{counters['graph_break'].total()} unique_graphs {counters['stats']['unique_graphs']}")
    wl.hold(args.hold_file)
