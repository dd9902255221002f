# Clean: a Hugging Face GPT-2 (built from its config, no download) trained for 10 steps.
import sys

import torch

try:
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError:
    print("transformers not installed", file=sys.stderr)
    sys.exit(77)

model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256, n_head=4)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(10):
    ids = torch.randint(0, 50257, (4, 128), device="cuda")
    loss = model(ids, labels=ids).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
