"""Tier 2: a job on the simulated NCCL as real NCCL runs it (its own static runtime, kernels
launched with cuLaunchKernelEx on an internal stream per communicator, cross-stream events),
traced with `tptrace --gpu`, then `tptrace report` on the trace.

The workload (tests/workloads/nccl_overlap.c) holds two ranks of one communicator in one
process; each step rank 0's allreduce is launched, then K compute kernels of C us on a stream
of their own, and rank 1 joins the allreduce only once they completed. Each compute kernel
therefore runs inside rank 0's NCCL kernel by construction, and the overlap of NCCL and compute
kernels is exactly K * C per step. TPSIM_NCCL_US (each NCCL kernel's wire time once all ranks
arrived) puts 3 ms between the last compute kernel of a step and the syncs that end it, which
are the report's step boundaries."""
import os
import subprocess
import json
from gpulib import need_ptrace
from lib import TPTRACE, WL, need_root, tmp_path, trace_workload

OVERLAP = os.path.join(WL, "nccl_overlap")
STEPS, KERNELS, COMPUTE_US = 6, 3, 500
_trace = {}


def overlap_trace():
    """(trace, path) of nccl_overlap under `tptrace --gpu`, made once per module run"""
    if not _trace:
        need_root()
        need_ptrace()
        t, _, _ = trace_workload([OVERLAP, "--steps", str(STEPS), "--kernels", str(KERNELS),
                                  "--compute-us", str(COMPUTE_US)], tracer_args=["--gpu"],
                                 env=dict(os.environ, TPSIM_NCCL_US="3000"),
                                 out_name="nccl-overlap.json")
        _trace["t"] = (t, tmp_path("nccl-overlap.json"))
    return _trace["t"]


def xs(t, cat=None, name=None):
    return [e for e in t["traceEvents"] if e.get("ph") == "X" and
            (cat is None or e["cat"] == cat) and (name is None or e["name"] == name)]


def inside(inner, outer):
    return outer["tid"] == inner["tid"] and outer["pid"] == inner["pid"] and \
        outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]


def test_nccl_sim_launches_nested_in_nccl_calls():
    """NCCL's own calls are shown inside the NCCL call that made them, never as the user's:
    per ncclAllReduce exactly one cuLaunchKernelEx (the driver, reached directly), and two
    cudaEventRecord + two cudaStreamWaitEvent of NCCL's static runtime (its libnccl carries
    one, like the real library: tptrace probes it there, by its local symbols); each NCCL
    kernel's arrow starts at its cuLaunchKernelEx (CUPTI gives the kernel that call's
    correlation: it is the outermost CUDA API call, ncclAllReduce is none)."""
    t, _ = overlap_trace()
    colls = xs(t, "nccl", "ncclAllReduce")
    assert len(colls) == 2 * STEPS, len(colls)
    launches = xs(t, "cuda_driver", "cuLaunchKernelEx")
    assert len(launches) == 2 * STEPS, len(launches)
    for name, per_call in (("cudaEventRecord", 2), ("cudaStreamWaitEvent", 2)):
        evs = xs(t, "cuda_runtime", name)
        in_nccl = [e for e in evs if any(inside(e, c) for c in colls)]
        assert len(in_nccl) == per_call * len(colls), (name, len(in_nccl))
    # the user's step event is the only cudaEventRecord outside NCCL
    assert len(xs(t, "cuda_runtime", "cudaEventRecord")) == 2 * 2 * STEPS + STEPS
    # the driver calls NCCL's runtime made (cuEventRecord, cuStreamWaitEvent) are those
    # runtime calls', not written; what NCCL calls in the driver itself is
    drv = {e["name"] for e in xs(t, "cuda_driver")}
    assert drv == {"cuLaunchKernelEx", "cuModuleGetFunction"}, drv
    for c in colls:
        mine = [l for l in launches if inside(l, c)]
        assert len(mine) == 1, (c, mine)
    # the user's launches: cudaLaunchKernel of fake_compute only, none inside NCCL
    user = xs(t, "cuda_runtime", "cudaLaunchKernel")
    assert len(user) == STEPS * KERNELS and not any(inside(u, c) for u in user for c in colls)
    # arrows: one per kernel, from the call with the kernel's correlation
    flows = {e["id"]: e for e in t["traceEvents"] if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    nccl_k = [e for e in xs(t, "kernel") if e["name"].startswith("ncclDevKernel_")]
    assert len(nccl_k) == 2 * STEPS, len(nccl_k)
    by_corr = {l["args"]["correlation"]: l for l in launches}
    for k in nccl_k:
        corr = k["args"]["correlation"]
        assert corr in by_corr, (k, sorted(by_corr))
        assert corr in flows, k
        f, l = flows[corr], by_corr[corr]
        assert f["tid"] == l["tid"] and l["ts"] <= f["ts"] <= l["ts"] + l["dur"], (f, l)
        assert k["args"]["stream"] != user[0]["args"]["stream"], k
    # the cross-stream events: NCCL's stream waits for the caller's (first cudaStreamWaitEvent
    # in the call, its GPU record on the kernel's stream, ending before the kernel starts), the
    # caller's stream for the kernel (the second, on another stream, ending with the kernel)
    syncs = {e["args"]["correlation"]: e for e in xs(t, "cuda_sync", "Stream Wait Event")}
    kern = {k["args"]["correlation"]: k for k in nccl_k}
    for c in colls:
        w1, w2 = sorted((w for w in xs(t, "cuda_runtime", "cudaStreamWaitEvent") if inside(w, c)),
                        key=lambda e: e["ts"])
        [l] = [l for l in launches if inside(l, c)]
        k = kern[l["args"]["correlation"]]
        s1, s2 = syncs[w1["args"]["correlation"]], syncs[w2["args"]["correlation"]]
        assert s1["args"]["stream"] == k["args"]["stream"], (s1, k)
        assert s1["ts"] + s1["dur"] <= k["ts"], (s1, k)
        assert s2["args"]["stream"] != k["args"]["stream"], (s2, k)
        assert abs(s2["ts"] + s2["dur"] - (k["ts"] + k["dur"])) < 0.0015, (s2, k)
    comp = [e for e in xs(t, "kernel") if e["name"] == "fake_compute"]
    assert len(comp) == STEPS * KERNELS
    user_corr = {u["args"]["correlation"] for u in user}
    assert {k["args"]["correlation"] for k in comp} == user_corr


def test_nccl_sim_report_comm_compute_overlap_exact():
    """report's NCCL time overlapped with compute is K * C per step in its window, exactly:
    the window is the report's steps (between the step-ending syncs), which hold every step
    but the first; each of their compute kernels runs inside an NCCL kernel"""
    need_root()
    _, path = overlap_trace()
    p = subprocess.run([TPTRACE, "report", "--json", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    [steps] = [pr["steps"] for pr in r["steps"]["per_rank"]]
    assert len(steps) == STEPS - 1, (r["steps"]["method_detail"], len(steps))
    [rank] = r["ranks"]
    want = len(steps) * KERNELS * COMPUTE_US * 1000
    assert rank["comm_overlapped_ns"] == want, (rank, want)
    # every step's compute is in it, and NCCL ran longer than the compute it hid
    assert all(s["compute_ns"] == KERNELS * COMPUTE_US * 1000 for s in steps), steps
    assert rank["comm_ns"] > want, rank
    for f in r["findings"]:
        if f["id"] == "comm_not_overlapped":
            n = f["numbers"]
            assert n["comm_overlapped_ns"] == want and n["comm_ns"] == rank["comm_ns"], n
            assert n["comm_exposed_ns"] == rank["comm_ns"] - want, n
