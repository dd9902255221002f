"""Real PyTorch on the GPU: gradients are allocated by the autograd engine's device thread while
the calling line waits in backward(). Each step keeps its weight gradient and sets the next to
None, so the gradients grow from the backward() line (a leak the verdict must name there). Prints
the names of the process's threads, then "done"."""
import os
import torch

model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512)).cuda()
kept = []


def step():
    x = torch.randn(64, 512, device="cuda")
    loss = model(x).square().mean()
    loss.backward()  # BACKWARD
    kept.append(model[0].weight.grad)
    model.zero_grad(set_to_none=True)


for _ in range(40):
    step()
torch.cuda.synchronize()
names = sorted({open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")})
print("threads:", " ".join(names))
print("done", flush=True)
