"""Python calling a CUDA runtime function through ctypes from many kinds of frames, for the
BPF stack walker's tests (tests/e2e/test_pystacks.py, test_pystacks_trace.py, bench).

    py_stacks.py LIBCUDART EXPECT.json [scenario ...]

Prints "READY <pid>" and waits for a line on stdin (the tracer is attached by then). Every
call is cudaStreamSynchronize(K) with a distinct stream value K, so the tracer's records can
be matched to the calls: right before each call, on the SAME line (so the line is exact),
mark(K) writes down the Python stack as CPython itself sees it (innermost first:
[func, file, line, firstlineno]; func is co_qualname from 3.11, co_name before, as tptrace
reports it). Without a GPU every call fails fast; its entry is what the tracer sees.
At the end EXPECT.json gets {"calls": {K: frames}, "cthread": [K...]} and it prints "DONE".

Scenarios (default: all but deep and spin): nested, method, lambda, generator, threads,
cthread (a thread started in C, with no Python thread state), deep (a 100-frame recursion),
churn / slowchurn (code objects made, called and freed, 300 at once / 20 slowly),
spin N (N cudaLaunchKernel calls from a deep stack as fast as it can; no marks), bench (serves the
benchmark: each stdin line "RUN N" runs spin N and prints "NS <ns per call>"; "QUIT" ends).
"""
import ctypes
import json
import os
import sys
import threading
import time

from py_truth import frames_of

CALLS = {}
CTHREAD = []
LOCK = threading.Lock()
NEXT = [1000]


def mark(k):
    with LOCK:
        CALLS[k] = frames_of(sys._getframe(1), firstlineno=True)
    return k


def key():
    with LOCK:
        NEXT[0] += 1
        return NEXT[0]


class Runner:
    def __init__(self, lib):
        self.lib = lib
        self.sync = lib.cudaStreamSynchronize
        self.sync.argtypes = [ctypes.c_void_p]
        self.sync.restype = ctypes.c_int

    # nested functions: outer -> middle -> inner
    def nested(self):
        def outer():
            def middle():
                def inner():
                    k = key()
                    mark(k); self.sync(k)  # AT:inner
                inner()
            middle()
        outer()

    # a method of a class, called through another method
    def method(self):
        class Model:
            def __init__(self, sync):
                self.sync = sync

            def forward(self, x):
                k = key()
                mark(k); self.sync(k)  # AT:forward
                return x

            def __call__(self, x):
                return self.forward(x)
        Model(self.sync)(1)

    def lambda_(self):
        f = lambda k: (mark(k), self.sync(k))  # AT:lambda
        f(key())

    def generator(self):
        def gen(n):
            for _ in range(n):
                k = key()
                yield (mark(k), self.sync(k))  # AT:gen
        for _ in gen(2):
            pass

    def threads(self):
        def worker(i):
            for _ in range(2):
                k = key()
                mark(k); self.sync(k)  # AT:worker
        ts = [threading.Thread(target=worker, args=(i,), name=f"w{i}") for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def cthread(self):
        # a thread created by C code, calling the runtime directly: no Python thread state
        libc = ctypes.CDLL(None)
        tid = ctypes.c_ulong(0)
        k = key()
        CTHREAD.append(k)
        fn = ctypes.cast(self.sync, ctypes.c_void_p)
        if libc.pthread_create(ctypes.byref(tid), None, fn, ctypes.c_void_p(k)):
            raise SystemExit("pthread_create failed")
        libc.pthread_join(tid, None)

    def slowchurn(self):
        # the same, slowly: each generation's stack is read while its code object lives,
        # then the next one takes the freed address
        self.churn(20, 0.1)

    def churn(self, n=300, pause=0.0):
        # code objects made, called once and freed: their addresses are reused by the next
        # ones, each from its own file name, so a frame resolved late (ustack_dump --late)
        # must come out either right or unresolved, never as another generation's function
        import gc
        for i in range(n):
            k = key()
            src = "\n" * (i % 7) + "def f(mark, sync, k):\n    mark(k); sync(k)\n"
            ns = {}
            exec(compile(src, f"<gen{i}>", "exec"), ns)
            ns["f"](self.mark_at(k, f"<gen{i}>", 2 + i % 7), self.sync, k)
            if pause:
                time.sleep(pause)  # alive while the tracer reads it
            del ns
            gc.collect()

    def mark_at(self, k, file, line):
        # the innermost frame the call above makes, by construction
        def m(kk):
            with LOCK:
                CALLS[kk] = [["f", file, line, line - 1]]
        return m

    def deep(self, n=100):
        if n:
            return self.deep(n - 1)
        k = key()
        mark(k); self.sync(k)  # AT:deep

    def spin(self, n):
        # cudaLaunchKernel(func, grid, block, args, shmem, stream): the launch path of tptrace's
        # entry program (its cookie copies stack slots); fails fast without a driver
        class Dim3(ctypes.Structure):
            _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
        launch = self.lib.cudaLaunchKernel
        launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_void_p]
        one = Dim3(1, 1, 1)

        def level(d):
            if d:
                return level(d - 1)
            t0 = time.perf_counter_ns()
            for _ in range(n):
                launch(7, one, one, None, 0, None)
            return (time.perf_counter_ns() - t0) / n
        # under bench, 20 Python frames at the call: <module>, main, bench, spin, 16 x level
        return level(15)

    def bench(self):
        print("BENCH", flush=True)
        for line in sys.stdin:
            w = line.split()
            if not w or w[0] == "QUIT":
                return
            print("NS", self.spin(int(w[1])), flush=True)


def main():
    lib = ctypes.CDLL(sys.argv[1])
    out = sys.argv[2]
    scen = sys.argv[3:] or ["nested", "method", "lambda", "generator", "threads", "cthread"]
    r = Runner(lib)
    r.sync(1)  # the runtime's first call (its one-time init) before the tracer attaches
    print("READY", os.getpid(), flush=True)
    sys.stdin.readline()
    i = 0
    while i < len(scen):
        s = scen[i]
        if s == "spin":
            r.spin(int(scen[i + 1]))
            i += 2
            continue
        getattr(r, "lambda_" if s == "lambda" else s)()
        i += 1
    with open(out, "w") as f:
        json.dump({"calls": CALLS, "cthread": CTHREAD}, f)
    print("DONE", flush=True)
    sys.stdin.readline()


main()  # AT:module
