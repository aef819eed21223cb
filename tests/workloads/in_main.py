"""A training loop that keeps its model, DataLoader and optimizer inside main(), as most training
scripts do (nothing in the module's globals): for the report's conditions, which must find them in
the running frames (tests/integration/test_report.py).

    python3 tests/workloads/in_main.py --steps 20
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import _workload as wl


def main():
    args = wl.make_parser(__doc__, 20).parse_args()
    wl.make_deterministic(args.seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    data = TensorDataset(torch.randn(480, 16), torch.randint(0, 4, (480,)))
    loader = DataLoader(data, batch_size=48, shuffle=False, num_workers=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss, step = None, 0
    while step < args.steps:
        for x, y in loader:
            if step >= args.steps:
                break
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            wl.report_step(step, loss, args.print_every)
            step += 1
    wl.report_final(loss)
    wl.hold(args.hold_file)


if __name__ == "__main__":
    main()
