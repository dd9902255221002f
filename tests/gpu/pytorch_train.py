# A small model trained with varying batch and sequence lengths, deterministic; prints one
# "loss STEP VALUE" line per step and "time ..." at the end. Run by pytorch_test.sh.
import time

import torch

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
dev = "cuda"
layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, dropout=0.0,
                                         batch_first=True)
model = torch.nn.Sequential(torch.nn.Embedding(1000, 128), torch.nn.TransformerEncoder(layer, 2),
                            torch.nn.Linear(128, 1000)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(1)
start = time.time()
steps = 40
for step in range(steps):
    batch = 8 + (step * 7) % 24
    seq = 16 + (step * 13) % 112
    x = torch.randint(0, 1000, (batch, seq), generator=gen).to(dev)
    y = torch.randint(0, 1000, (batch, seq), generator=gen).to(dev)
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 1000), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"loss {step} {loss.item():.9f}")
torch.cuda.synchronize()
print(f"time {steps / (time.time() - start):.2f} steps/s")
