"""A model server: a tiny random-weight torch model decoded greedily (--model tiny), or a tiny
random-weight GPT-2 (from a config, nothing downloaded) under greedy model.generate() (--model
gpt2), behind the standard library's ThreadingHTTPServer (--server http) or a FastAPI
application under uvicorn (--server asgi), with --clients threads posting --requests requests in
all on loopback, each on one keep-alive connection. No optimizer, no backward.

Each request is POST /generate {"i": N, "text": ...}: the handler tokenises the text (--case
healthy: its bytes; --case tokeniser: a slow pure-Python tokeniser), generates --new-tokens
tokens for it (a forward each), and answers {"i": N, "tokens": [...]}. --case lock: the model
sits behind one global lock, with --lock-ms of work inside it, so requests are served one at a
time. Every 9th
request (--missing-every) asks for a path the server does not have and gets a 404. Prints
"final tokens: <hex of a hash of every answer, in request order>" so two runs can be compared
bit for bit.

    python3 tests/workloads/serve_job.py --requests 24 --clients 4 --case tokeniser
"""
import hashlib
import http.client
import json
import socket
import threading
import time

import torch

import _workload as wl

parser = wl.make_parser(__doc__.splitlines()[0], steps=0)
parser.add_argument("--server", choices=("http", "asgi"), default="http")
parser.add_argument("--model", choices=("tiny", "gpt2"), default="tiny",
                    help="tiny: a random-weight torch model decoded greedily by a loop of "
                         "forwards; gpt2: a tiny random-weight GPT-2 under generate()")
parser.add_argument("--case", choices=("healthy", "tokeniser", "lock"), default="healthy")
parser.add_argument("--requests", type=int, default=24)
parser.add_argument("--clients", type=int, default=4)
parser.add_argument("--prompt-tokens", type=int, default=12)
parser.add_argument("--new-tokens", type=int, default=8)
parser.add_argument("--tokeniser-rounds", type=int, default=300,
                    help="passes of the slow tokeniser over the text (--case tokeniser)")
parser.add_argument("--lock-ms", type=float, default=20.0)
parser.add_argument("--missing-every", type=int, default=9)


class TinyLM(torch.nn.Module):
    """A random-weight next-token model: embeddings, a few MLP blocks, logits."""

    def __init__(self, vocab=256, width=128, blocks=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                torch.nn.Linear(4 * width, width)) for _ in range(blocks))
        self.head = torch.nn.Linear(width, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def make_model(kind):
    if kind == "tiny":
        return TinyLM().eval()
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=1, pad_token_id=1)
    model = GPT2LMHeadModel(config)
    model.eval()
    return model


def slow_tokenise(text, rounds):
    """A pure-Python tokeniser: character pairs merged by a rolling hash, pass after pass (all
    host work on the request's thread, none of it in the model)."""
    ids = [ord(c) for c in text]
    for _ in range(rounds):
        merged = []
        h = 7
        for a in ids:
            h = (h * 31 + a) % 251
            merged.append((a + h) % 254 + 2)
        ids = merged
    return ids


class Service:
    def __init__(self, args):
        self.args = args
        self.model = make_model(args.model)
        self.lock = threading.Lock()

    def tokens(self, text):
        if self.args.case == "tokeniser":
            ids = slow_tokenise(text, self.args.tokeniser_rounds)
        else:
            ids = [b % 254 + 2 for b in text.encode()]
        return ids[: self.args.prompt_tokens]

    def generate(self, ids):
        prompt = torch.tensor([ids])
        with torch.no_grad():
            if self.args.model == "tiny":
                seq = prompt
                for _ in range(self.args.new_tokens):
                    nxt = self.model(seq)[:, -1].argmax(-1, keepdim=True)
                    seq = torch.cat([seq, nxt], dim=1)
                return seq[0, prompt.shape[1]:].tolist()
            out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                      max_new_tokens=self.args.new_tokens,
                                      min_new_tokens=self.args.new_tokens, do_sample=False,
                                      pad_token_id=1)
        return out[0, prompt.shape[1]:].tolist()

    def answer(self, body):
        ids = self.tokens(body["text"])
        if self.args.case == "lock":
            with self.lock:  # one request in the model at a time
                time.sleep(self.args.lock_ms / 1e3)
                made = self.generate(ids)
        else:
            made = self.generate(ids)
        return {"i": body["i"], "tokens": made}


def serve_http(service, ready):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per client

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/generate":
                self.send_error(404)
                return
            data = json.dumps(service.answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ready.set()
    return server.server_address[1], server.serve_forever, server.shutdown


def serve_asgi(service, ready):
    import uvicorn
    from fastapi import FastAPI, HTTPException
    from pydantic import BaseModel

    app = FastAPI()

    class Body(BaseModel):
        i: int
        text: str

    @app.post("/generate")
    def generate(body: Body):  # a sync endpoint: FastAPI runs it in a worker thread
        return service.answer({"i": body.i, "text": body.text})

    @app.post("/{other}")
    def missing(other: str):
        raise HTTPException(status_code=404)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)

    def run():
        server.run(sockets=[sock])

    def stop():
        server.should_exit = True

    def started():
        while not server.started:
            time.sleep(0.01)
        ready.set()

    threading.Thread(target=started, daemon=True).start()
    return sock.getsockname()[1], run, stop


def client(port, indices, answers, args, errors):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        for i in indices:
            text = f"request {i}: " + "the quick brown fox jumps over the lazy dog " * 40
            path = "/missing" if args.missing_every and i % args.missing_every == args.missing_every - 1 \
                else "/generate"
            conn.request("POST", path, body=json.dumps({"i": i, "text": text}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            answers[i] = (resp.status, json.loads(data)["tokens"] if resp.status == 200 else None)
    except Exception as exc:  # reported by the main thread
        errors.append(repr(exc))
    finally:
        conn.close()


if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    service = Service(args)
    service.generate(service.tokens("warm up"))  # one generation before serving, as servers do
    ready = threading.Event()
    port, run, stop = (serve_http if args.server == "http" else serve_asgi)(service, ready)
    answers, errors = {}, []

    def clients():
        ready.wait(60)
        shares = [list(range(c, args.requests, args.clients)) for c in range(args.clients)]
        threads = [threading.Thread(target=client, args=(port, s, answers, args, errors))
                   for s in shares]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop()

    driver = threading.Thread(target=clients)
    driver.start()
    run()
    driver.join()
    if errors:
        raise SystemExit(f"client errors: {errors}")
    digest = hashlib.sha256()
    for i in range(args.requests):
        status, made = answers[i]
        digest.update(json.dumps([i, status, made]).encode())
    wl.say(f"served {len(answers)} requests")
    wl.say(f"final tokens: {digest.hexdigest()}")
    wl.hold(args.hold_file)
