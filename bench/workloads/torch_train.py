#!/usr/bin/env python3
"""PyTorch training workloads for the allocator benchmark.

  torch_train.py --model gpt|convnet|smallconv|decode|generate --steps N --json OUT
                 [--record-trace FILE]

gpt:     a GPT-style decoder (12 layers, d=1024, 16 heads, vocab 32000, untied head), random
         weights, AdamW, bf16 autocast; every step draws a new sequence length in [64, 2048]
         and a batch size so that tokens <= 24576: shapes change every step, which is what
         fragments a caching allocator.
convnet: torchvision ResNet-50, random weights, SGD, bf16 autocast, channels-last; every step
         draws a batch in [16, 96] and an image side in {128, 160, 192, 224, 256}.
decode:  token-by-token decoding with a KV cache (many small short-lived tensors per token).
generate: a Hugging Face-style `generate` loop: a GPT-2-style model of nn.Modules (6 layers,
         d=768, 12 heads) keeps its past keys and values per layer (grown by torch.cat, like a
         dynamic cache), extends an attention mask, applies temperature and top-k to the
         logits and samples; one step is one token for a batch of 4, a new 32-token prompt every
         128 tokens.
smallconv: a fast-step convnet (three 3x3 conv layers of 64, 128 and 256 channels with ReLU and
         pooling, a linear head), SGD, fp32, 128x128 images, every step a batch in [16, 64]:
         ~50 steps/s on an H200, so the cost of each allocation shows (the heavy workloads
         above hide it).
Both use a fixed seed for weights, data and the shape schedule, so every allocator mode must
print the same losses. The allocator mode is chosen by the environment (PYTORCH_CUDA_ALLOC_CONF,
PYTORCH_NO_CUDA_MEMORY_CACHING, LD_PRELOAD); the script only reports what it saw.
--record-trace writes every allocation and free PyTorch's caching allocator made (its memory
history) as "a <addr> <bytes> <stream>" / "f <addr>" lines for bench/replay.
BENCH_TORCH_HISTORY=python|all turns PyTorch's own recorder on for the whole run
(torch.cuda.memory._record_memory_history(stacks=...), its defaults otherwise): the cost peer
of gmem's observation in bench/paired_rounds.py.
"""
import argparse
import os
import random
import sys
import time

# Deterministic kernels, so that every allocator mode must print bit-identical losses (the
# first baseline run showed flash-attention/embedding backward drifting 1e-4 between two runs
# of the same mode). Must be set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmem_probe  # noqa: E402


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=32000, d=1024, layers=12, heads=16, max_t=2048):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_t, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def gpt_setup(rng):
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(i):
        t = rng.randint(64, 2048)
        b = rng.randint(1, max(1, 24576 // t))
        g = torch.Generator(device="cuda").manual_seed(i)
        idx = torch.randint(0, 32000, (b, t + 1), device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def convnet_setup(rng):
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(i):
        b = rng.randint(16, 96)
        side = rng.choice((128, 160, 192, 224, 256))
        g = torch.Generator(device="cuda").manual_seed(i)
        x = torch.randn(b, 3, side, side, device="cuda", generator=g)
        x = x.to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (b,), device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


class SmallConv(nn.Module):
    def __init__(self, classes=100):
        super().__init__()
        self.c1 = nn.Conv2d(3, 64, 3, padding=1)
        self.c2 = nn.Conv2d(64, 128, 3, padding=1)
        self.c3 = nn.Conv2d(128, 256, 3, padding=1)
        self.head = nn.Linear(256, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = F.relu(self.c3(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def smallconv_setup(rng):
    model = SmallConv().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(i):
        b = rng.randint(16, 64)
        g = torch.Generator(device="cuda").manual_seed(i)
        x = torch.randn(b, 3, 128, 128, device="cuda", generator=g)
        y = torch.randint(0, 100, (b,), device="cuda", generator=g)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def decode_setup(rng):
    """Token-by-token decoding with a KV cache: no gradients, a batch of 8 sequences, 8 layers
    of d=512 with 8 heads; every step appends one token's keys and values to each layer's cache
    (torch.cat: new tensors each token) and runs attention over the whole cache, so every token
    makes and frees many small, short-lived tensors. A new prompt of 64 tokens every 256 steps."""
    d, heads, layers, vocab, batch, prompt = 512, 8, 8, 32000, 8, 64
    g = torch.Generator(device="cuda").manual_seed(rng.randint(0, 1 << 30))
    p = lambda *shape: torch.randn(*shape, device="cuda", generator=g) / shape[0] ** 0.5  # noqa
    emb = p(vocab, d)
    ws = [(p(d, 3 * d), p(d, d), p(d, 4 * d), p(4 * d, d)) for _ in range(layers)]
    head = p(d, vocab)
    state = {}

    def forward(x):  # x: (batch, t, d) -> next-token logits
        for li, (wqkv, wo, w1, w2) in enumerate(ws):
            q, k, v = (F.layer_norm(x, (d,)) @ wqkv).split(d, dim=-1)
            shape = (batch, -1, heads, d // heads)
            q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
            ck, cv = state["cache"][li]
            k = k if ck is None else torch.cat([ck, k], dim=2)
            v = v if cv is None else torch.cat([cv, v], dim=2)
            state["cache"][li] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=ck is None)
            x = x + a.transpose(1, 2).reshape(batch, -1, d) @ wo
            x = x + F.gelu(F.layer_norm(x, (d,)) @ w1) @ w2
        return F.layer_norm(x[:, -1], (d,)) @ head

    @torch.no_grad()
    def step(i):
        if i % 256 == 0:
            state["cache"] = [(None, None)] * layers
            tokens = torch.randint(0, vocab, (batch, prompt), device="cuda", generator=g)
        else:
            tokens = state["next"]
        logits = forward(emb[tokens])
        state["next"] = logits.argmax(dim=-1, keepdim=True)
        return logits.float().logsumexp(dim=-1).mean()

    return step


class GenBlock(nn.Module):
    """A GPT-2 block that takes and returns its layer's past keys and values."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x, past, mask):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        # The padding mask over all positions so far, causal inside the new tokens.
        full = mask[:, None, None, :].bool()
        if t > 1:
            full = full & torch.ones(t, k.shape[2], dtype=torch.bool, device=x.device).tril(
                k.shape[2] - t)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)))), (k, v)


class GenModel(nn.Module):
    def __init__(self, vocab=32000, d=768, layers=6, heads=12, max_t=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_t, d)
        self.h = nn.ModuleList(GenBlock(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids, past, mask, positions):
        x = self.wte(ids) + self.wpe(positions)
        presents = []
        for i, blk in enumerate(self.h):
            x, kv = blk(x, past[i] if past is not None else None, mask)
            presents.append(kv)
        return self.lm_head(self.ln_f(x)), tuple(presents)


def generate_setup(rng):
    vocab, batch, prompt, per_prompt = 32000, 4, 32, 128
    model = GenModel(vocab).cuda().eval()
    g = torch.Generator(device="cuda").manual_seed(rng.randint(0, 1 << 30))
    state = {}

    @torch.no_grad()
    def step(i):
        if i % per_prompt == 0:  # a new prompt: prefill
            ids = torch.randint(0, vocab, (batch, prompt), device="cuda", generator=g)
            state.update(past=None, mask=torch.ones(batch, prompt, dtype=torch.long,
                                                    device="cuda"),
                         unfinished=torch.ones(batch, dtype=torch.long, device="cuda"))
            positions = torch.arange(prompt, device="cuda")[None, :].expand(batch, -1)
        else:
            ids = state["next"][:, None]
            state["mask"] = torch.cat([state["mask"], state["mask"].new_ones(batch, 1)], dim=-1)
            positions = (state["mask"].sum(-1, keepdim=True) - 1)
        logits, state["past"] = model(ids, state["past"], state["mask"], positions)
        scores = logits[:, -1, :].float() / 0.8  # temperature
        top = torch.topk(scores, 50).values[..., -1, None]  # top-k
        scores = scores.masked_fill(scores < top, float("-inf"))
        probs = F.softmax(scores, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=g).squeeze(1)
        nxt = nxt * state["unfinished"] + 0 * (1 - state["unfinished"])  # pad finished rows
        state["unfinished"] = state["unfinished"] & (nxt != 2).long()
        state["next"] = nxt
        if state["unfinished"].max() == 0:  # the stopping check: a host sync each token
            state["unfinished"].fill_(1)
        return scores.logsumexp(dim=-1).mean()

    return step


def write_trace(path):
    """PyTorch's memory history -> "a addr bytes stream" / "f addr" lines."""
    snap = torch.cuda.memory._snapshot()
    n = 0
    with open(path, "w") as f:
        f.write("# gmem-bench alloc trace v1: a <addr> <bytes> <stream> | f <addr>\n")
        for dev_trace in snap["device_traces"]:
            for e in dev_trace:
                act = e["action"]
                if act == "alloc":
                    f.write(f"a {e['addr']:x} {e['size']} {e.get('stream', 0):x}\n")
                    n += 1
                elif act == "free_completed":
                    f.write(f"f {e['addr']:x}\n")
                    n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("gpt", "convnet", "smallconv", "decode", "generate"),
                    default="gpt")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--mode", default="", help="label for the report")
    ap.add_argument("--json", default="")
    ap.add_argument("--record-trace", default="")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    # Strict mode for the GPT: with warn_only=True flash attention's backward stays
    # non-deterministic (losses drifted 1e-5 between modes). ResNet-50's pooling backward has no
    # deterministic kernel, so it runs with warn_only (its losses were identical anyway). If
    # strict mode refuses an op, the first step says so and the run falls back to warn_only.
    determinism = "strict" if args.model == "gpt" else "warn_only"
    torch.use_deterministic_algorithms(True, warn_only=determinism != "strict")
    rng = random.Random(args.seed)
    free0, total = torch.cuda.mem_get_info()
    if args.record_trace:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=4_000_000)
    history = os.environ.get("BENCH_TORCH_HISTORY", "")
    if history:
        if history not in ("python", "all") or args.record_trace:
            sys.exit(f"torch_train: BENCH_TORCH_HISTORY={history!r}: python or all, and not "
                     "with --record-trace")
        torch.cuda.memory._record_memory_history(stacks=history)
    setups = {"gpt": gpt_setup, "convnet": convnet_setup, "smallconv": smallconv_setup,
              "decode": decode_setup, "generate": generate_setup}
    step = setups[args.model](rng)
    state = {"determinism": determinism}

    def run_step(i):
        try:
            return step(i)
        except RuntimeError as e:
            if state["determinism"] != "strict" or "deterministic" not in str(e):
                raise
            print(f"torch_train: strict determinism refused an op ({str(e)[:200]}); "
                  "falling back to warn_only", file=sys.stderr)
            state["determinism"] = "warn_only (strict refused)"
            torch.use_deterministic_algorithms(True, warn_only=True)
            return step(i)

    losses = [run_step(i).item() for i in range(args.warmup)]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    pending = []
    # One timing event at each step's start (and after the last) on the current stream: the
    # step periods as the device saw them, idle gaps included, without a synchronization.
    # The host's clock at the same points says which steps the host made slow.
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
    host = [0.0] * (args.steps + 1)
    for k, i in enumerate(range(args.warmup, args.warmup + args.steps)):
        host[k] = time.perf_counter()
        marks[k].record()
        pending.append(run_step(i).detach())
    host[-1] = time.perf_counter()
    marks[-1].record()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    periods = [a.elapsed_time(b) for a, b in zip(marks, marks[1:])]
    host_ms = [(b - a) * 1e3 for a, b in zip(host, host[1:])]
    step_ms = sorted(periods)

    def slowest(values, n=5):  # [step after the warm-up, ms], slowest first
        return [[k, round(values[k], 3)] for k in sorted(range(len(values)),
                                                         key=lambda k: -values[k])[:n]]
    losses += [float(x) for x in pending]
    free1, _ = torch.cuda.mem_get_info()
    rec = {
        "kind": "workload", "framework": "torch", "workload": args.model, "mode": args.mode,
        "steps": args.steps, "warmup": args.warmup, "seconds": elapsed,
        "steps_per_s": args.steps / elapsed, "losses": losses,
        "step_ms_mean": sum(step_ms) / len(step_ms),
        "step_ms_p99": step_ms[min(len(step_ms) - 1, int(0.99 * len(step_ms)))],
        "step_ms_slowest": slowest(periods), "host_step_ms_slowest": slowest(host_ms),
        "torch_max_reserved": torch.cuda.max_memory_reserved(),
        "torch_max_allocated": torch.cuda.max_memory_allocated(),
        "mem_get_info_used_delta_end": free0 - free1, "device_total": total,
        "env": {k: v for k, v in os.environ.items()
                if k.startswith(("PYTORCH_", "GMEM_")) or k == "LD_PRELOAD"},
        "torch": torch.__version__, "determinism": state["determinism"],
    }
    if args.record_trace:
        rec["trace_events"] = write_trace(args.record_trace)
        torch.cuda.memory._record_memory_history(enabled=None)
    gmem_probe.emit(rec, args.json)
    print("losses:", " ".join(f"{x:.6f}" for x in losses))


if __name__ == "__main__":
    main()
