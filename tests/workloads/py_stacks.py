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
spin N (N calls from a 20-frame stack as fast as it can, for the benchmark; no marks).
"""
import ctypes
import json
import os
import sys
import threading

CALLS = {}
CTHREAD = []
LOCK = threading.Lock()
NEXT = [1000]


def frames_of(frame):
    out = []
    while frame is not None:
        code = frame.f_code
        func = code.co_qualname if sys.version_info >= (3, 11) else code.co_name
        out.append([func, code.co_filename, frame.f_lineno, code.co_firstlineno])
        frame = frame.f_back
    return out


def mark(k):
    with LOCK:
        CALLS[k] = frames_of(sys._getframe(1))
    return k


def key():
    with LOCK:
        NEXT[0] += 1
        return NEXT[0]


class Runner:
    def __init__(self, lib):
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

    def deep(self, n=100):
        if n:
            return self.deep(n - 1)
        k = key()
        mark(k); self.sync(k)  # AT:deep

    def spin(self, n):
        def level(d):
            if d:
                return level(d - 1)
            s = self.sync
            for _ in range(n):
                s(7)
        # 20 Python frames at the call: <module>, main, spin, 17 x level
        level(16)


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
