"""A Python process hung at known places, for holding tptrace stacks beside py-spy and pystack
(tests/e2e/test_stacks_peers.py): the main thread inside a C extension (ctypes -> libc
pause()) under <module> -> main -> outer -> Holder.hold; thread "locked" in a lock wait
(threading.Lock.acquire on a lock the main thread holds) under locked_worker -> take; thread
"sleeper" in time.sleep inside a generator; with argv[1] == "torch", thread "torchop" inside a
torch op that waits forever (torch.futures.Future.wait, C++). Prints "READY <pid>" once every
thread is in place (the blocking calls follow their Event by one line).
PEERS_TICK=1 (make bench): also a thread "ticker" that notes the longest gap between its
0.2 ms sleeps, and a thread reading stdin: "reset" clears it, "get" prints "GAP <ns>", so a
benchmark sees how long a tool kept the process stopped."""
import ctypes
import os
import sys
import threading
import time

lock = threading.Lock()
ready = {name: threading.Event() for name in ("locked", "sleeper", "torchop")}


def take():
    ready["locked"].set()
    lock.acquire()


def locked_worker():
    take()


def ticks():
    ready["sleeper"].set()
    time.sleep(100000)
    yield 1


def sleeper():
    for _ in ticks():
        pass


def torch_wait(torch):
    fut = torch.futures.Future()
    ready["torchop"].set()
    fut.wait()


class Holder:
    def hold(self, libc):
        libc.pause()


def outer(libc):
    Holder().hold(libc)


def ticker(state):
    last = time.monotonic_ns()
    while True:
        time.sleep(0.0002)
        now = time.monotonic_ns()
        state["gap"] = max(state["gap"], now - last)
        last = now


def control(state):
    for line in sys.stdin:
        if line.strip() == "reset":
            state["gap"] = 0
        elif line.strip() == "get":
            print("GAP", state["gap"], flush=True)


def main(with_torch):
    libc = ctypes.CDLL(None)
    lock.acquire()
    threads = [threading.Thread(target=locked_worker, name="locked", daemon=True),
               threading.Thread(target=sleeper, name="sleeper", daemon=True)]
    if with_torch:
        import torch
        threads.append(threading.Thread(target=torch_wait, args=(torch,), name="torchop",
                                        daemon=True))
    else:
        ready["torchop"].set()
    if os.environ.get("PEERS_TICK"):
        state = {"gap": 0}
        threads += [threading.Thread(target=ticker, args=(state,), daemon=True),
                    threading.Thread(target=control, args=(state,), daemon=True)]
    for t in threads:
        t.start()
    for e in ready.values():
        e.wait()
    print("READY", os.getpid(), flush=True)
    outer(libc)


main(sys.argv[1:] == ["torch"])
