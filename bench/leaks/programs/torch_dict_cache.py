# Leak: an unbounded dict cache filled with a new key every step.
import torch

cache = {}


def features(key):
    if key not in cache:
        cache[key] = torch.randn(512, 512, device="cuda")  # LEAK
    return cache[key]


model = torch.nn.Linear(512, 512).cuda()
with torch.no_grad():
    for step in range(80):
        y = model(features(step))
torch.cuda.synchronize()
