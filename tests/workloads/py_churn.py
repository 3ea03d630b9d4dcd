"""Python that never holds still (tests/e2e/test_pyframes.py reads it without stopping it):
threads that start and exit, recursion that grows and shrinks, generators, code objects
created and freed (exec of fresh source). Prints "READY <pid>"."""
import os
import threading


def recurse(n):
    if n == 0:
        return sum(x for x in range(50))
    return recurse(n - 1) + 1


def fresh_code(i):
    ns = {}
    exec(f"def f{i}(n):\n    return n if n < 2 else f{i}(n - 1) + {i}\n", ns)
    return ns[f"f{i}"](30)


def worker(k):
    for i in range(200):
        recurse((i * 7 + k) % 60)
        fresh_code(i)


def spawner():
    while True:
        ts = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


for _ in range(2):
    threading.Thread(target=spawner, daemon=True).start()
print("READY", os.getpid(), flush=True)
i = 0
while True:
    recurse(i % 90)
    fresh_code(i)
    i += 1
