# Leak: a validation loop without torch.no_grad() summing outputs keeps every step's graph: its
# inputs and activations.
import torch

model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 1)).cuda()
total = 0
for step in range(40):
    x = torch.randn(512, 1024, device="cuda")  # LEAK
    total = total + model(x).mean()  # LEAK
print(float(total))
