"""GPU allocations made from known Python lines, through the simulated caching allocator
(tests/sim/alloc: libtpsim_alloc.so, USDT pytorch:malloc/free) and runtime, for
`tptrace mem --py-stacks` (tests/e2e/test_pystacks_fr_mem.py).

    py_alloc.py LIB_DIR EXPECT.json

Prints "READY <pid>" and waits for GO. Then Model.build() allocates three 4096-byte blocks
from Model.layer (one line), one 2 MiB block from Model.cache (another line) and a 8192-byte
block from Model.scratch that it frees again. Right before each allocation, on the SAME line,
mark() writes down the Python stack as CPython sees it (innermost first: [func, file, line];
func is co_qualname from 3.11, co_name before). Every block is printed as
"# malloc 0x<ptr> <size> <mark index>"; EXPECT.json gets {"calls": [frames per allocation]};
then "DONE", and it holds its memory until stdin closes."""
import ctypes
import json
import os
import sys

from py_truth import frames_of

CALLS = []


def mark(v):
    CALLS.append(frames_of(sys._getframe(1)))
    return v


class Model:
    def __init__(self, lib_dir):
        ctypes.CDLL(os.path.join(lib_dir, "libcudart.so.13"), mode=ctypes.RTLD_GLOBAL)
        self.alloc = ctypes.CDLL(os.path.join(lib_dir, "libtpsim_alloc.so"))
        self.alloc.tpsim_alloc_malloc.restype = ctypes.c_void_p
        self.alloc.tpsim_alloc_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.alloc.tpsim_alloc_free.argtypes = [ctypes.c_void_p]
        self.live = []

    def got(self, ptr, size):
        if not ptr:
            sys.exit(f"py_alloc: malloc {size} failed")
        print(f"# malloc {ptr:#x} {size} {len(CALLS) - 1}", flush=True)
        return ptr

    def layer(self):
        return self.got(self.alloc.tpsim_alloc_malloc(mark(4096), 0, None), 4096)

    def cache(self):
        return self.got(self.alloc.tpsim_alloc_malloc(mark(2097152), 0, None), 2097152)

    def scratch(self):
        p = self.got(self.alloc.tpsim_alloc_malloc(mark(8192), 0, None), 8192)
        self.alloc.tpsim_alloc_free(p)

    def build(self):
        for _ in range(3):
            self.live.append(self.layer())
        self.live.append(self.cache())
        self.scratch()


def main():
    m = Model(sys.argv[1])
    print("READY", os.getpid(), flush=True)
    if not sys.stdin.readline().startswith("GO"):
        sys.exit("py_alloc: stdin closed before GO")
    m.build()
    with open(sys.argv[2], "w") as f:
        json.dump({"calls": CALLS}, f)
    print("DONE", flush=True)
    sys.stdin.readline()


main()
