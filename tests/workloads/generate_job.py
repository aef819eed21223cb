"""Inference with Hugging Face transformers: a tiny random-weight GPT-2 (from a config, nothing
downloaded) under model.generate(), greedy, batched. No optimizer, no backward.

--steps N generate() calls, each on --batch-size prompts of --prompt-tokens tokens, for
--new-tokens new tokens (min_new_tokens too, so every call makes exactly that many). Prints
"step N tokens <checksum>" per call and at the end "final tokens: <hex of a hash of every token
id generated>", so two runs can be compared bit for bit. --no-cache: use_cache=False (each
decode forward recomputes the whole sequence).

    python3 tests/workloads/generate_job.py --steps 6
"""
import hashlib

import torch

import _workload as wl

parser = wl.make_parser(__doc__.splitlines()[0], steps=6)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--prompt-tokens", type=int, default=12)
parser.add_argument("--new-tokens", type=int, default=16)
parser.add_argument("--no-cache", action="store_true")

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=1, pad_token_id=1)
    model = GPT2LMHeadModel(config)
    model.eval()
    g = torch.Generator().manual_seed(7)
    digest = hashlib.sha256()
    for step in range(1, args.steps + 1):
        prompts = torch.randint(2, 256, (args.batch_size, args.prompt_tokens), generator=g)
        out = model.generate(prompts, attention_mask=torch.ones_like(prompts),
                             max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                             do_sample=False, use_cache=not args.no_cache, pad_token_id=1)
        digest.update(out.numpy().tobytes())
        wl.report_step(step, int(out.sum()), args.print_every, name="tokens")
    wl.say(f"final tokens: {digest.hexdigest()}")
    wl.hold(args.hold_file)
