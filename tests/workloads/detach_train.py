"""Training that probing detaches from halfway, for tests/integration/test_detach.py.

A small MLP over a DataLoader, deterministic. After the last step it holds (--hold-file), then
prints what probing would have changed, one "state <name>: <value>" line each, and the final
loss. A run that never saw probing prints the same lines; a run that probing detached from must
too: Module.__call__ and the wrapped methods are torch's own again, torch's global hook
registries are empty, nothing of probing is left in sys.meta_path.
"""
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import _workload as w


def describe(obj):
    return f"{type(obj).__name__} {getattr(obj, '__qualname__', '?')}"


def print_state():
    import torch.nn.modules.module as module
    import torch.optim.optimizer as optimizer
    from torch.utils.data import dataloader

    call = nn.Module.__dict__["__call__"]
    w.say(f"state call_is_torchs: {call is nn.Module.__dict__['_wrapped_call_impl']}")
    w.say(f"state call: {describe(call)}")
    w.say(f"state zero_grad: {describe(torch.optim.Optimizer.__dict__['zero_grad'])}")
    w.say(f"state dataloader_next: {describe(dataloader._BaseDataLoaderIter.__dict__['__next__'])}")
    w.say(f"state cuda_synchronize: {describe(torch.cuda.synchronize)}")
    from torch.autograd.function import Function
    w.say(f"state function_register_hook_own: {'_register_hook' in Function.__dict__}")
    own = sorted(name for name in ("item", "tolist", "cpu") if name in torch.Tensor.__dict__)
    w.say(f"state tensor_own_methods: {own} {describe(torch.Tensor.item)}")
    for name in ("_global_forward_pre_hooks", "_global_forward_hooks",
                 "_global_forward_hooks_always_called", "_global_backward_pre_hooks",
                 "_global_backward_hooks"):
        w.say(f"state {name}: {len(getattr(module, name, {}))}")
    for name in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"):
        w.say(f"state {name}: {len(getattr(optimizer, name, {}))}")
    finders = [type(f).__module__ for f in sys.meta_path]
    w.say(f"state probing_finders: {sum(m.startswith('probing') for m in finders)}")


def main():
    args = w.make_parser(__doc__, steps=3000).parse_args()
    w.make_deterministic(0)
    x = torch.randn(512, 32)
    y = (x.sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    trainer = w.Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=0.05),
                        nn.CrossEntropyLoss())
    loss = None
    for step in range(args.steps):
        loss = trainer.train_step()
        w.report_step(step, loss, args.print_every)
    w.hold(args.hold_file)
    print_state()
    w.report_final(loss)


main()
