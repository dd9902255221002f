# Leak: a service that keeps 1 MiB per request (a request every REQUEST_S seconds, default 1),
# judged while it runs: the runner attaches when it is ready.
import os
import sys
import threading
import time

from driver_api import alloc, free, setup

setup()
weights = [alloc(4 << 20) for _ in range(8)]  # held: loaded once
history = []


def handle():
    scratch = alloc(256 << 10)
    history.append(alloc(1 << 20))  # LEAK: 1 MiB per request
    free(scratch)


print(f"ready {os.getpid()}", flush=True)
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
period = float(os.environ.get("REQUEST_S", "1"))
while not done.is_set():
    handle()
    time.sleep(period)
