# Clean: a training loop with AdamW, an lru_cache(maxsize=4) of masks and a module constant.
import functools

import torch

SCALE = torch.full((1024,), 0.5, device="cuda")


@functools.lru_cache(maxsize=4)
def mask(n):
    return torch.ones(n, 1024, device="cuda").tril()


model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(60):
    n = 64 * (1 + step % 6)  # six shapes through a cache of four: it evicts
    x = torch.randn(n, 1024, device="cuda") * SCALE
    loss = (model(x) * mask(n)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
