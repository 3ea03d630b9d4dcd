"""One rank of a simulated NCCL job written in Python: ctypes into the simulated libnccl.so.2
and libcudart.so.13 (tests/sim), rendezvous with nccl_rank processes through the same id file
(tests/workloads/nccl_rank.c), then, after GO, spins in Python without calling NCCL: the rank
that hangs a job from Python code (tests/e2e/test_fr_hang.py). The line the test expects is
marked `# AT:spin` (the spin loop's two lines).

Usage: python3 py_nccl_rank.py --rank R --nranks N --id-file PATH --lib-dir DIR"""
import argparse
import ctypes
import os
import sys
import time

from py_truth import read_unique_id


def read_id(path):
    return read_unique_id(path, "py_nccl_rank")


def spin():
    n = 0
    while True:  # AT:spin
        n += 1  # AT:spin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nranks", type=int, required=True)
    ap.add_argument("--id-file", required=True)
    ap.add_argument("--lib-dir", required=True)
    a = ap.parse_args()
    ctypes.CDLL(os.path.join(a.lib_dir, "libcudart.so.13"), mode=ctypes.RTLD_GLOBAL)
    nccl = ctypes.CDLL(os.path.join(a.lib_dir, "libnccl.so.2"))
    uid = read_id(a.id_file)
    comm = ctypes.c_void_p()
    rc = nccl.ncclCommInitRank(ctypes.byref(comm), a.nranks, uid, a.rank)
    if rc != 0:
        sys.exit(f"py_nccl_rank: ncclCommInitRank returned {rc}")
    print("READY", os.getpid(), flush=True)
    if not sys.stdin.readline().startswith("GO"):
        sys.exit("py_nccl_rank: stdin closed before GO")
    print("# step 0", flush=True)
    print("# culprit spin", flush=True)
    spin()


main()
