"""GPU program for tests/gpu/ddp_test.sh: DistributedDataParallel over NCCL, one process per GPU
(started by torch.distributed.run). Each rank trains a small MLP for a few steps, hands a tensor
to a side stream with record_stream every step, and prints one line:
    rank R pid P digest D
D hashes the rank's losses and side-stream sums (each rank trains on its own inputs): equal
digests for a rank mean identical results.
With DDP_CHECK_KEEP=1 in its environment, each rank keeps three 4 MiB tensors from one line (marked KEEP) until it exits.
"""

import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

kept = []


def main():
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator(device=device).manual_seed(1 + rank)
    side = torch.cuda.Stream()
    results = []
    for step in range(30):
        x = torch.randn(64, 512, device=device, generator=gen)
        loss = ddp(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # A tensor used on another stream and freed while that work may still run.
        t = x.detach().clone()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            total = (t * 2).sum()
        t.record_stream(side)
        del t
        results += [loss.detach(), total]
        if os.environ.get("DDP_CHECK_KEEP") == "1" and step < 3:
            kept.append(torch.full((1 << 20,), float(step), device=device))  # KEEP
    torch.cuda.synchronize()
    digest = hashlib.sha256(repr([round(float(r), 5) for r in results]).encode()).hexdigest()[:16]
    dist.barrier()
    # One write: the ranks share the launcher's stdout.
    sys.stdout.write(f"rank {rank} pid {os.getpid()} digest {digest}\n")
    sys.stdout.flush()
    del ddp, model, opt, x, loss, total, results
    dist.destroy_process_group()


main()
