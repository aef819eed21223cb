"""Training loops with one common cause of lost time each, written the way training scripts
write them (tests/integration/test_report_rules.py runs each under `probing run` and checks the
report's answer; `healthy` is the twin that must stay clean). CPU, an MLP on synthetic data.

    python3 tests/workloads/loop_causes.py --case generator --steps 60

cases:
  healthy     a DataLoader over a TensorDataset, nothing else in the loop
  generator   batches built in Python by a generator (no DataLoader): parsing text records
  logging     every step: loss.item(), per-parameter gradient norms, a JSON line to a log file
  leak        keeps every step's hidden features in a list "for later analysis"
  eval        every --every steps: an evaluation pass over a validation loader (no_grad)
  checkpoint  every --every steps: torch.save of the model and the optimizer
  gil_thread  a background thread ("metrics-aggregator") summarising the losses in pure Python
"""
import json
import os
import random
import tempfile
import threading
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import _workload as wl

CASES = ("healthy", "generator", "logging", "leak", "eval", "checkpoint", "gil_thread")

parser = wl.make_parser(__doc__.splitlines()[0], steps=60)
parser.add_argument("--case", choices=CASES, default="healthy")
parser.add_argument("--every", type=int, default=20, help="eval/checkpoint period in steps")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--hidden", type=int, default=512, help="hidden width of the MLP")

feature_bank = []  # the leak: every step's features, never cleared


class Net(nn.Module):
    def __init__(self, width, hidden, classes):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(),
                                     nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        features = self.encoder(x)
        return self.head(features), features


def text_records(n, width, classes, seed):
    """Records as a CSV-like text source would give them."""
    rnd = random.Random(seed)
    for _ in range(n):
        values = [rnd.gauss(0, 1) for _ in range(width)]
        yield ",".join(f"{v:.6f}" for v in values) + f";{max(range(classes), key=lambda c: values[c])}"


def batches_from_text(records, batch_size):
    """The input pipeline of the generator case: parse, then stack, in the training process."""
    xs, ys = [], []
    for line in records:
        features, label = line.split(";")
        xs.append([float(v) for v in features.split(",")])
        ys.append(int(label))
        if len(xs) == batch_size:
            yield torch.tensor(xs), torch.tensor(ys)
            xs, ys = [], []


def aggregate_forever(history, stop):
    """A metrics thread as people write them: recomputes running statistics over everything
    seen so far, in Python, without pause; it holds the GIL for most of its time slice."""
    while not stop.is_set():
        values = list(history) or [0.0]
        mean = sum(values) / len(values)
        _ = sorted((v - mean) ** 2 for v in values * 50)


def main():
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    width, hidden, classes = 256, args.hidden, 8
    g = torch.Generator().manual_seed(4321)
    inputs = torch.randn(4096, width, generator=g)
    labels = inputs[:, :classes].argmax(dim=1)
    train_loader = DataLoader(TensorDataset(inputs, labels), batch_size=args.batch_size,
                              shuffle=True, drop_last=True,
                              generator=torch.Generator().manual_seed(args.seed))
    val_loader = DataLoader(TensorDataset(inputs[:2048], labels[:2048]), batch_size=256)
    model = Net(width, hidden, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    tmp = tempfile.TemporaryDirectory(prefix="probing-report-loop-")  # removed at the end
    workdir = tmp.name
    log = open(os.path.join(workdir, "metrics.jsonl"), "w")

    def batches():
        if args.case == "generator":
            while True:
                yield from batches_from_text(text_records(4 * args.batch_size, width, classes,
                                                          args.seed), args.batch_size)
        while True:
            yield from train_loader

    history, stop = [], threading.Event()
    if args.case == "gil_thread":
        threading.Thread(target=aggregate_forever, args=(history, stop),
                         name="metrics-aggregator", daemon=True).start()
    model.train()
    loss = None
    data = batches()
    for step in range(1, args.steps + 1):
        x, y = next(data)
        optimizer.zero_grad()
        logits, features = model(x)
        loss = criterion(logits, y)
        loss.backward()
        optimizer.step()
        if args.case == "logging":
            record = {"step": step, "loss": loss.item(),
                      "grad_norms": {n: p.grad.norm().item() for n, p in model.named_parameters()},
                      "head": model.head.weight.detach().tolist(),
                      "logits": logits.detach().tolist()}
            log.write(json.dumps(record) + "\n")
        elif args.case == "leak":
            feature_bank.append(features.detach())
        elif args.case == "eval" and step % args.every == 0:
            model.eval()
            correct = 0
            with torch.no_grad():
                for vx, vy in val_loader:
                    correct += (model(vx)[0].argmax(dim=1) == vy).sum().item()
            model.train()
            wl.say(f"eval step {step} accuracy {correct / 2048:.3f}")
        elif args.case == "checkpoint" and step % args.every == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, os.path.join(workdir, "checkpoint.pt"))
        history.append(loss.item())
        wl.report_step(step, loss, args.print_every)
    stop.set()
    log.close()
    tmp.cleanup()
    wl.report_final(loss)
    wl.hold(args.hold_file)


if __name__ == "__main__":
    main()
