#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The jobs of tests/gpu/check.sh's "real stack" part: what the real CUDA/CUPTI/NCCL stack does
that the simulated one models and this machine alone can show. Each job measures its own side
(windows of CLOCK_MONOTONIC, pids, tids, counts) and prints it as "CTX NAME {json}" lines;
tests/gpu/validate.py --real checks our trace against them.

  realstack.py clock N GAP_MS       no tracer: CUPTI's default thread id type, pthread_self vs
                                    gettid, and N (CLOCK_MONOTONIC, cuptiGetTimestamp,
                                    CLOCK_MONOTONIC) reads GAP_MS apart: one JSON object
  realstack.py job MARKER           a job that launches MARKER kernels ("sin" or "cos");
                                    "READY <pid>", then one command a line on stdin:
      TIDS                          CTX tids: the job's OS threads
      PROBES N GAP_MS               CTX probes: N windows [before the launch, after the sync]
                                    around one kernel each, GAP_MS apart
      LAUNCHES N                    CTX launches: N launches, a sync after each (the device
                                    idle when the next one is launched)
      FLOOD N                       CTX flood: N launches, one sync at the end
      NCCL                          CTX nccl: a 1-rank NCCL communicator; an all_reduce of
                                    256 MiB overlapped with matmuls on the user's stream
                                    (or {"skip": why})
      CTX2                          CTX contexts: a second context on device 0 (driver API):
                                    a 1 MiB memset and a 4096 B copy to the host there, then a
                                    kernel in the primary context; device 1 too when present
      QUIT                          "DONE", exit
  realstack.py ctx LOG NAME [KEY=JSON | +FILE...]   the CTX NAME object of a job's LOG, with
                                    KEY=JSON added and the keys of FILE's object merged
"""
import ctypes
import glob
import json
import os
import sys
import threading
import time

MEMSET_BYTES, COPY_BYTES = 1 << 20, 4096


def mono():
    return time.monotonic_ns()


def find_cupti():
    pats = []
    try:
        import nvidia.cuda_cupti as nc      # the pip wheel torch brings
        pats.append(os.path.join(list(nc.__path__)[0], "lib", "libcupti.so*"))
    except ImportError:
        pass
    pats += ["/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*", "/usr/local/cuda*/lib64/libcupti.so*",
             "/usr/lib/x86_64-linux-gnu/libcupti.so*"]
    for p in pats:
        hits = sorted(glob.glob(p))
        if hits:
            return hits[0]
    return None


def clock(n, gap_ms):
    out = {}
    libc = ctypes.CDLL(None)
    libc.pthread_self.restype = ctypes.c_ulong
    out["pthread_self"] = libc.pthread_self()
    out["gettid"] = threading.get_native_id()
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuInit(0)
    path = find_cupti()
    out["cupti"] = path
    if rc or not path:
        out["error"] = f"cuInit rc {rc}, libcupti {path}"
        print(json.dumps(out))
        return 1
    cupti = ctypes.CDLL(path)
    t = ctypes.c_int(-1)
    out["default_thread_id_type"] = (t.value if hasattr(cupti, "cuptiGetThreadIdType") and
                                     cupti.cuptiGetThreadIdType(ctypes.byref(t)) == 0 else None)
    ts = ctypes.c_uint64()
    pairs = []
    for _ in range(n):
        a = mono()
        r = cupti.cuptiGetTimestamp(ctypes.byref(ts))
        b = mono()
        if r == 0:
            pairs.append([a, ts.value, b])
        time.sleep(gap_ms / 1000)
    out["pairs"] = pairs
    print(json.dumps(out))
    return 0


def ctx_line(name, obj):
    print(f"CTX {name} {json.dumps(obj)}", flush=True)


def job(marker):
    import torch
    dev = torch.device("cuda:0")
    x = torch.randn(256, device=dev)
    y = torch.empty_like(x)
    op = {"sin": torch.sin, "cos": torch.cos}[marker]

    def launch():
        op(x, out=y)            # one MARKER kernel

    launch()
    torch.cuda.synchronize()
    print("READY", os.getpid(), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "TIDS":
            ctx_line("tids", {"pid": os.getpid(),
                              "tids": sorted(int(t) for t in os.listdir("/proc/self/task"))})
        elif cmd[0] == "PROBES":
            probes = []
            for _ in range(int(cmd[1])):
                torch.cuda.synchronize()
                a = mono()
                launch()
                torch.cuda.synchronize()
                probes.append([a, mono()])
                time.sleep(int(cmd[2]) / 1000)
            ctx_line("probes", {"pid": os.getpid(), "probes": probes})
        elif cmd[0] in ("LAUNCHES", "FLOOD"):
            n = int(cmd[1])
            torch.cuda.synchronize()
            a = mono()
            for _ in range(n):
                launch()
                if cmd[0] == "LAUNCHES":
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
            ctx_line(cmd[0].lower(), {"pid": os.getpid(), "window": [a, mono()], "launches": n,
                                      "buf_bytes": os.environ.get("TPTRACE_AGENT_BUF_BYTES")})
        elif cmd[0] == "NCCL":
            ctx_line("nccl", nccl(torch, dev))
        elif cmd[0] == "CTX2":
            ctx_line("contexts", second_context(torch, launch))
        elif cmd[0] == "QUIT":
            break
    print("DONE", flush=True)
    return 0


def nccl(torch, dev):
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        return {"skip": "torch has no NCCL"}
    store = dist.FileStore(f"/tmp/tptrace-realstack-{os.getpid()}.store", 1)
    try:
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    except Exception as e:      # noqa: BLE001 any reason is reported, not raised
        return {"skip": f"init_process_group: {e}"}
    t = torch.ones(64 << 20, device=dev)                # 256 MiB
    m = torch.randn(4096, 4096, device=dev)
    dist.all_reduce(t)                                  # NCCL's setup, outside the window
    torch.cuda.synchronize()
    a = mono()
    work = dist.all_reduce(t, async_op=True)            # NCCL's stream, after an event
    for _ in range(8):
        m = m @ m * 1e-3                                # the user's stream meanwhile
    work.wait()
    torch.cuda.synchronize()
    b = mono()
    dist.destroy_process_group()
    return {"pid": os.getpid(), "window": [a, b], "overlap_expected": True, "nranks": 1}


def second_context(torch, launch):
    cuda = ctypes.CDLL("libcuda.so.1")
    out = {"pid": os.getpid(), "memset_bytes": MEMSET_BYTES, "copy_bytes": COPY_BYTES}
    dev, c, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    host = (ctypes.c_char * COPY_BYTES)()
    torch.cuda.synchronize()
    a = mono()
    steps = [("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), 0)),
             ("cuCtxCreate_v2", lambda: cuda.cuCtxCreate_v2(ctypes.byref(c), 0, dev)),
             ("cuMemAlloc_v2", lambda: cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(MEMSET_BYTES))),
             ("cuMemsetD32_v2", lambda: cuda.cuMemsetD32_v2(ptr, ctypes.c_uint(7),
                                                            ctypes.c_size_t(MEMSET_BYTES // 4))),
             ("cuMemcpyDtoH_v2", lambda: cuda.cuMemcpyDtoH_v2(host, ptr, ctypes.c_size_t(COPY_BYTES))),
             ("cuCtxSynchronize", lambda: cuda.cuCtxSynchronize()),
             ("cuMemFree_v2", lambda: cuda.cuMemFree_v2(ptr))]
    for name, fn in steps:
        rc = fn()
        if rc:
            out["error"] = f"{name} rc {rc}"
            break
    if c.value:
        cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        cuda.cuCtxDestroy_v2(c)
    launch()                                            # the primary context
    torch.cuda.synchronize()
    out["devices"] = torch.cuda.device_count()
    if out["devices"] > 1:
        z = torch.randn(256, device="cuda:1")
        torch.sin(z, out=z)
        torch.cuda.synchronize(1)
    out["window"] = [a, mono()]
    return out


def ctx(log, name, extras):
    obj = None
    with open(log) as f:
        for line in f:
            if line.startswith(f"CTX {name} "):
                obj = json.loads(line.split(" ", 2)[2])
    if obj is None:
        sys.exit(f"realstack.py: no CTX {name} line in {log}")
    for kv in extras:
        if kv.startswith("+"):
            with open(kv[1:]) as f:
                obj.update(json.load(f))
            continue
        k, v = kv.split("=", 1)
        obj[k] = json.loads(v)
    print(json.dumps(obj))
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "clock" and len(argv) == 4:
        return clock(int(argv[2]), int(argv[3]))
    if len(argv) == 3 and argv[1] == "job" and argv[2] in ("sin", "cos"):
        return job(argv[2])
    if len(argv) >= 4 and argv[1] == "ctx":
        return ctx(argv[2], argv[3], argv[4:])
    sys.exit("usage: realstack.py clock N GAP_MS | job sin|cos | ctx LOG NAME [KEY=JSON | +FILE...]")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
