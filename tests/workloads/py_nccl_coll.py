"""Every rank of a simulated NCCL job in Python: ctypes into the simulated libnccl.so.2 and
libcudart.so.13 (tests/sim), collectives called from known lines, for `tptrace fr --py-stacks`
(tests/e2e/test_pystacks_fr_mem.py).

    py_nccl_coll.py --rank R --nranks N --id-file PATH --lib-dir DIR --steps S --expect OUT
                    [--culprit C]

Rank 0 writes the unique id (hex) to the id file, the others read it; all init the world comm,
print "READY <pid>" and wait for GO. Then, per step, Trainer.step calls all_reduce and
all_gather (one collective each, from their own line) and syncs the stream. Right before each
collective, on the SAME line, mark() writes down the Python stack as CPython sees it
(innermost first: [func, file, line]; func is co_qualname from 3.11, co_name before, as
tptrace reports it). --culprit C: rank C skips the all_reduce of the last step and waits in
Python (Trainer.wait_forever): the others hang in it (missing_rank). Before every stream sync
and the culprit's wait, OUT gets {"calls": [frames per collective so far, in call order]}; a
rank that finished prints "DONE"."""
import argparse
import ctypes
import json
import os
import sys
import time

from py_truth import UniqueId, frames_of, read_unique_id

CALLS = []


def mark(v):
    """v unchanged; the caller's stack recorded (call it on the line of the collective)"""
    CALLS.append(frames_of(sys._getframe(1)))
    return v


def unique_id(nccl, rank, path):
    uid = UniqueId()
    if rank == 0:
        if nccl.ncclGetUniqueId(ctypes.byref(uid)) != 0:
            sys.exit("py_nccl_coll: ncclGetUniqueId failed")
        with open(path + ".tmp", "w") as f:
            # all 128 bytes: uid.internal (a c_char array) would stop at the first NUL
            f.write(ctypes.string_at(ctypes.addressof(uid), 128).hex() + "\n")
        os.rename(path + ".tmp", path)
        return uid
    return read_unique_id(path, "py_nccl_coll")


class Trainer:
    def __init__(self, a):
        self.cudart = ctypes.CDLL(os.path.join(a.lib_dir, "libcudart.so.13"),
                                  mode=ctypes.RTLD_GLOBAL)
        self.nccl = ctypes.CDLL(os.path.join(a.lib_dir, "libnccl.so.2"))
        vp = ctypes.c_void_p
        for name in ("ncclAllReduce",):
            getattr(self.nccl, name).argtypes = [vp, vp, ctypes.c_size_t, ctypes.c_int,
                                                 ctypes.c_int, vp, vp]
        self.nccl.ncclAllGather.argtypes = [vp, vp, ctypes.c_size_t, ctypes.c_int, vp, vp]
        self.cudart.cudaStreamSynchronize.argtypes = [vp]
        self.a = a
        self.comm = vp()
        uid = unique_id(self.nccl, a.rank, a.id_file)
        rc = self.nccl.ncclCommInitRank(ctypes.byref(self.comm), a.nranks, uid, a.rank)
        if rc != 0:
            sys.exit(f"py_nccl_coll: ncclCommInitRank returned {rc}")
        self.stream = vp()
        if self.cudart.cudaStreamCreate(ctypes.byref(self.stream)) != 0:
            sys.exit("py_nccl_coll: cudaStreamCreate failed")
        self.buf = vp()
        self.gbuf = vp()
        if self.cudart.cudaMalloc(ctypes.byref(self.buf), 4096 * 4) or \
                self.cudart.cudaMalloc(ctypes.byref(self.gbuf), 1024 * 4 * a.nranks):
            sys.exit("py_nccl_coll: cudaMalloc failed")

    def all_reduce(self):
        # ncclFloat32 = 7, ncclSum = 0
        return self.nccl.ncclAllReduce(self.buf, self.buf, 4096, 7, 0, self.comm, mark(self.stream))

    def all_gather(self):
        return self.nccl.ncclAllGather(self.buf, self.gbuf, 1024, 7, self.comm, mark(self.stream))

    def step(self, last):
        if last and self.a.rank == self.a.culprit:
            self.wait_forever()
        if self.all_reduce() or self.all_gather():
            sys.exit("py_nccl_coll: a collective failed")
        write_expect(self.a.expect)     # a rank that hangs in the sync below has it too
        self.cudart.cudaStreamSynchronize(self.stream)

    def wait_forever(self):
        write_expect(self.a.expect)
        print("# culprit waits", flush=True)
        while True:
            time.sleep(0.05)


def write_expect(path):
    with open(path + ".tmp", "w") as f:
        json.dump({"calls": CALLS}, f)
    os.rename(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser()
    for k in ("--rank", "--nranks", "--steps"):
        ap.add_argument(k, type=int, required=True)
    ap.add_argument("--culprit", type=int, default=-1)
    # host work between steps: real steps are tens of ms, far apart next to the ranks' skew
    ap.add_argument("--step-gap-ms", type=float, default=0)
    for k in ("--id-file", "--lib-dir", "--expect"):
        ap.add_argument(k, required=True)
    a = ap.parse_args()
    t = Trainer(a)
    print("READY", os.getpid(), flush=True)
    if not sys.stdin.readline().startswith("GO"):
        sys.exit("py_nccl_coll: stdin closed before GO")
    for s in range(a.steps):
        if s and a.step_gap_ms:
            time.sleep(a.step_gap_ms / 1000)
        print(f"# step {s}", flush=True)
        t.step(s == a.steps - 1)
    write_expect(a.expect)
    print("DONE", flush=True)
    sys.stdin.readline()


main()
