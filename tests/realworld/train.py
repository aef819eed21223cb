"""Trains one of models.py's architectures the way its upstream example does, inside main().

    python train.py ARCH [--steps N] [--hold-file F] [--upstream]

Prints `step N` after each step and `final loss: X` (repr of the last loss, all digits) at the
end. With --hold-file it keeps training past --steps until F exists (so a test can capture and
query while it trains), then ends the same way. Deterministic: one thread, fixed seed.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def batches(arch, step, g):
    if arch in ("resnet",):
        return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
    if arch in ("gpt2",):
        ids = torch.randint(0, 256, (4, 33), generator=g)
        return ids[:, :-1], ids[:, 1:]
    if arch in ("bert",):
        return torch.randint(0, 256, (8, 32), generator=g), torch.randint(0, 4, (8,), generator=g)
    if arch in ("lstm",):
        ids = torch.randint(0, 256, (21, 8), generator=g)
        return ids[:-1], ids[1:]
    if arch in ("compiled",):
        return torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
    raise ValueError(arch)


def hf_gpt2(args):
    """Hugging Face's own GPT2LMHeadModel (Conv1D GEMMs), small, no dropout, no weights loaded."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=256, n_positions=64, n_embd=256 if args.wide else 64, n_layer=2, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


def train_gan(args, g):
    netG = models.Generator()
    netD = models.Discriminator()
    criterion = nn.BCELoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    step = 0
    while True:
        real = torch.randn(8, 3, 16, 16, generator=g)
        noise = torch.randn(8, 16, 1, 1, generator=g)
        # (1) update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        output = netD(real)
        errD_real = criterion(output, torch.full((8,), 1.0))
        errD_real.backward()
        fake = netG(noise)
        output = netD(fake.detach())
        errD_fake = criterion(output, torch.full((8,), 0.0))
        errD_fake.backward()
        optimizerD.step()
        # (2) update G: maximize log(D(G(z)))
        netG.zero_grad()
        output = netD(fake)
        errG = criterion(output, torch.full((8,), 1.0))
        errG.backward()
        optimizerG.step()
        step += 1
        print(f"step {step}", flush=True)
        if step >= args.steps and (not args.hold_file or os.path.exists(args.hold_file)):
            return errG.item() + errD_real.item() + errD_fake.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("arch")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--hold-file")
    ap.add_argument("--upstream", action="store_true")
    ap.add_argument("--wide", action="store_true", help="transformers 4x wider (ms-sized GEMMs)")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    if args.arch == "gan":
        print(f"final loss: {train_gan(args, g)!r}", flush=True)
        return
    if args.arch == "resnet":
        model = models.SmallResNet(upstream=args.upstream)
    elif args.arch == "gpt2":
        model = models.GPT2LMHeadModel(n_embd=256 if args.wide else 64) if not args.upstream else hf_gpt2(args)
    elif args.arch == "bert":
        model = models.TinyBert(hidden=256 if args.wide else 64)
    elif args.arch == "lstm":
        model = models.RNNModel()
    elif args.arch == "compiled":
        model = torch.compile(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)))
    else:
        raise SystemExit(f"unknown architecture {args.arch!r}")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.MSELoss() if args.arch == "compiled" else nn.CrossEntropyLoss()
    step = 0
    while True:
        x, y = batches(args.arch, step, g)
        optimizer.zero_grad()
        if args.arch == "lstm":
            out, _ = model(x, model.init_hidden(x.size(1)))
            loss = criterion(out, y.reshape(-1))
        elif args.arch == "gpt2":
            out = model(x)
            loss = criterion(getattr(out, "logits", out).reshape(-1, 256), y.reshape(-1))
        else:
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
        print(f"step {step}", flush=True)
        if step >= args.steps and (not args.hold_file or os.path.exists(args.hold_file)):
            break
    print(f"final loss: {loss.item()!r}", flush=True)


if __name__ == "__main__":
    main()
