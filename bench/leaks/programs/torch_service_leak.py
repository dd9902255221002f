# Leak: a long-running service that keeps 1 MiB per request (one request a second); the runner
# attaches once it is ready and must see the leak within 60 s.
import os
import sys
import threading
import time

import torch

history = []
model = torch.nn.Linear(512, 512).cuda()


def handle(request):
    with torch.no_grad():
        x = torch.randn(64, 512, device="cuda")
        y = model(x)
        history.append(torch.empty(256 * 1024, device="cuda"))  # LEAK: 1 MiB per request


print(f"ready {os.getpid()}", flush=True)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
request = 0
while not done.is_set():
    handle(request)
    request += 1
    time.sleep(1.0)
