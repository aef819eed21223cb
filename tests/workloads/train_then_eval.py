"""Training, then an evaluation loop under no_grad, then training again: the step boundaries of
a training job that evaluates.

Each training step runs --accumulate micro-batches with autograd on, one forward of the model
under no_grad (a target, as in DQN or distillation from the model itself), backward and
optimizer.step(). After --steps training steps, --eval-batches forwards under torch.no_grad()
with model.eval(), then --steps-after more training steps.

Prints "step N loss X" lines for training steps, "eval done" after the evaluation loop, and
"final loss: <float.hex()>". Globals for `probing eval`: model, optimizer, batch_size.

    python3 tests/workloads/train_then_eval.py --steps 20 --eval-batches 300 --steps-after 5
"""
import torch
from torch import nn

import _workload as wl

parser = wl.make_parser(__doc__.splitlines()[0], steps=20)
parser.add_argument("--eval-batches", type=int, default=300)
parser.add_argument("--steps-after", type=int, default=5)
parser.add_argument("--accumulate", type=int, default=2, help="micro-batches per training step")
parser.add_argument("--batch-size", type=int, default=16)


def train_step(model, optimizer, g, accumulate, batch_size):
    optimizer.zero_grad(set_to_none=True)
    loss = None
    for _ in range(accumulate):
        x = torch.randn(batch_size, 32, generator=g)
        with torch.no_grad():
            target = model(x).roll(1, dims=1)  # a no_grad forward inside the training step
        loss = nn.functional.mse_loss(model(x), target) / accumulate
        loss.backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    batch_size = args.batch_size
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(5)
    step, loss = 0, None
    for _ in range(args.steps):
        step += 1
        loss = train_step(model, optimizer, g, args.accumulate, batch_size)
        wl.report_step(step, loss, args.print_every)
    model.eval()
    with torch.no_grad():
        for _ in range(args.eval_batches):
            model(torch.randn(batch_size, 32, generator=g))
    wl.say("eval done")
    model.train()
    for _ in range(args.steps_after):
        step += 1
        loss = train_step(model, optimizer, g, args.accumulate, batch_size)
        wl.report_step(step, loss, args.print_every)
    wl.report_final(loss)
    wl.hold(args.hold_file)
