# Clean: torch.compile(mode="reduce-overhead") (CUDA graphs) training steps.
import torch

model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512)).cuda()
step_fn = torch.compile(model, mode="reduce-overhead")
with torch.no_grad():
    for step in range(40):
        x = torch.randn(64, 512, device="cuda")
        y = step_fn(x).sum().item()
torch.cuda.synchronize()
