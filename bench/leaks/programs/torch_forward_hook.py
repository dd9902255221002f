# Leak: a forward hook that keeps every activation.
import torch

model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 1024)).cuda()
kept = []
model[1].register_forward_hook(lambda m, i, o: kept.append(o))
with torch.no_grad():
    for step in range(50):
        x = torch.randn(128, 1024, device="cuda")
        y = model(x)  # LEAK
torch.cuda.synchronize()
