# Leak: every step's output kept in a list (a classic; under no_grad, so the output keeps no
# graph). Weights, the last input and a scalar are held, not leaks.
import torch

model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
outputs = []
with torch.no_grad():
    for step in range(60):
        x = torch.randn(256, 1024, device="cuda")
        y = model(x)  # LEAK
        outputs.append(y)
        total = y.sum().item()
torch.cuda.synchronize()
