"""Tier 2: the driver API and the CUPTI join on the simulated stack as it really behaves: the
simulated runtime calls the simulated libcuda.so.1 underneath (so every runtime launch nests a
driver launch), the simulated CUPTI writes a DRIVER record for every driver call and a RUNTIME
record for every runtime call, probed or not (cudaGetLastError after each launch). Each test
asserts launch -> correlation -> kernel pairs one by one, not counts."""
import os
import re
from gpulib import need_ptrace
from lib import WL, calls, check_valid_trace, need_root, trace_workload

LAUNCHES = ("cuLaunchKernel", "cuLaunchKernelEx")


def info_lines(text, key):
    """'# key=value ...' lines of a workload as dicts."""
    out = []
    for line in text.splitlines():
        if line.startswith(f"# {key}="):
            out.append(dict(kv.split("=", 1) for kv in line[2:].split()))
    return out


def ints(s):
    return [int(x) for x in s.split(",")]


def gpu_kernels(trace):
    """correlation -> kernel events, in GPU start order."""
    out = {}
    for e in sorted((e for e in trace["traceEvents"]
                     if e.get("ph") == "X" and e.get("cat") == "kernel"), key=lambda e: e["ts"]):
        out.setdefault(e["args"]["correlation"], []).append(e)
    return out


def flows(trace):
    s = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    f = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    return s, f


def check_arrow(trace, launch, kernel_name):
    """The launch's correlation is its kernel's; the ac2g arrow goes from it to that kernel."""
    kernels = gpu_kernels(trace)
    corr = launch["args"]["correlation"]
    assert corr in kernels, f"{launch['name']} {kernel_name}: correlation {corr} has no kernel"
    k = kernels[corr][0]
    assert k["name"] == kernel_name, (launch, k)
    fs, ff = flows(trace)
    assert fs[corr]["pid"] == launch["pid"] and fs[corr]["tid"] == launch["tid"], fs[corr]
    assert ff[corr]["tid"] == k["tid"] and ff[corr]["bp"] == "e", ff[corr]
    # the joined entry-only call has CUPTI's duration, and starts before its kernel
    assert launch["dur"] > 0, launch
    assert launch["ts"] <= k["ts"], (launch, k)
    return k


def join_counts(trace):
    j = trace["tptrace"]["gpu_join"]
    assert j["unjoined"]["ambiguous"] == 0 and j["unjoined"]["no_record"] == 0, j
    return j


def test_triton_kernels_named_with_grids_and_joined():
    need_root()
    need_ptrace()
    steps = 4
    trace, wl, _ = trace_workload([os.path.join(WL, "triton_app"), "--steps", str(steps)],
                                  tracer_args=["--gpu"], out_name="triton.json")
    check_valid_trace(trace)
    want = {k["kernel"]: k for k in info_lines(wl.out.text(), "kernel")}
    assert len(want) == 3, want
    launches = [e for e in calls(trace, pid=wl.pid, cat="cuda_driver") if e["name"] in LAUNCHES]
    assert len(launches) == 3 * steps, [e["name"] for e in launches]
    # no runtime launch at all: the kernels went through the driver only
    assert not [e for e in calls(trace, pid=wl.pid) if "Launch" in e["name"]]
    seen = {}
    for l in sorted(launches, key=lambda e: e["ts"]):
        name = l["args"]["kernel"]
        w = want[name]
        assert l["name"] == w["api"], (l["name"], w)
        assert l["args"]["kernel source"] == ("library" if "softmax" in name else "module"), l
        assert l["args"]["grid"] == ints(w["grid"]) and l["args"]["block"] == ints(w["block"])
        assert l["args"]["shared memory"] == int(w["shmem"])
        k = check_arrow(trace, l, name)
        assert k["args"]["grid"] == ints(w["grid"]) and k["args"]["block"] == ints(w["block"])
        seen[name] = seen.get(name, 0) + 1
    assert seen == {n: steps for n in want}, seen
    # the launch with attributes decodes them
    attr = [l for l in launches if l["args"]["kernel"] == "triton_poi_fused_add_0"]
    assert all(l["args"]["attributes"] == 2 for l in attr), attr[0]["args"]
    # the runtime's copy and sync show once each: their nested driver calls are not written
    assert len(calls(trace, pid=wl.pid, name="cudaMemcpyAsync")) == steps
    assert not [e for e in calls(trace, pid=wl.pid, cat="cuda_driver")
                if e["name"] in ("cuMemcpyAsync", "cuMemcpyDtoHAsync", "cuStreamSynchronize")]
    assert trace["tptrace"]["nested_driver_calls"] >= 2 * steps
    j = join_counts(trace)
    # cudaGetLastError after every launch is a RUNTIME record no call may take
    assert j["api_records_unclaimed"]["unprobed"] >= 3 * steps, j


def test_triton_names_without_gpu_from_module_calls():
    need_root()
    trace, wl, _ = trace_workload([os.path.join(WL, "triton_app"), "--steps", "2"],
                                  out_name="triton-nogpu.json")
    launches = [e for e in calls(trace, pid=wl.pid, cat="cuda_driver") if e["name"] in LAUNCHES]
    assert len(launches) == 6
    assert {l["args"]["kernel"] for l in launches} == {
        "triton_poi_fused_add_0", "triton_red_fused_sum_1", "triton_per_fused_softmax_2"}
    # the lookups themselves are written, with the name they asked for
    getf = calls(trace, pid=wl.pid, cat="cuda_driver", name="cuModuleGetFunction")
    assert sorted(e["args"]["name"] for e in getf) == ["triton_poi_fused_add_0",
                                                       "triton_red_fused_sum_1"]


def test_triton_loaded_before_attach_unresolved_then_cupti():
    need_root()
    need_ptrace()
    argv = [os.path.join(WL, "triton_app"), "--steps", "2", "--load-before"]
    trace, wl, _ = trace_workload(argv, out_name="triton-before.json")
    launches = [e for e in calls(trace, pid=wl.pid, cat="cuda_driver") if e["name"] in LAUNCHES]
    assert len(launches) == 6
    for l in launches:
        assert l["args"]["kernel source"] == "unresolved", l["args"]
        assert re.fullmatch(r"handle 0x[0-9a-f]+", l["args"]["kernel"]), l["args"]
    trace, wl, _ = trace_workload(argv, tracer_args=["--gpu"], out_name="triton-before-gpu.json")
    launches = [e for e in calls(trace, pid=wl.pid, cat="cuda_driver") if e["name"] in LAUNCHES]
    assert len(launches) == 6
    for l in launches:
        assert l["args"]["kernel source"] == "cupti", l["args"]
        check_arrow(trace, l, l["args"]["kernel"])


def test_graph_replay_through_runtime_and_driver():
    need_root()
    need_ptrace()
    steps = 3
    trace, wl, _ = trace_workload([os.path.join(WL, "graph_app"), "--steps", str(steps)],
                                  tracer_args=["--gpu"], out_name="graph.json")
    check_valid_trace(trace)
    rt = calls(trace, pid=wl.pid, name="cudaGraphLaunch")
    drv = calls(trace, pid=wl.pid, cat="cuda_driver", name="cuGraphLaunch")
    # the cuGraphLaunch under each cudaGraphLaunch is not written: one event per replay
    assert len(rt) == steps and len(drv) == steps, (len(rt), len(drv))
    kernels = gpu_kernels(trace)
    for g in rt + drv:
        corr = g["args"]["correlation"]
        ks = kernels.get(corr, [])
        # a replay runs the captured kernels in capture order, all with the replay's correlation
        assert [k["name"] for k in ks] == ["graph_gemm", "graph_bias", "graph_relu"], (g, ks)
        check_arrow(trace, g, "graph_gemm")
    join_counts(trace)


def test_dense_launches_on_three_threads_each_joined_to_its_kernel():
    """Launches ~1 µs apart on 3 threads, each nesting a cuLaunchKernel DRIVER record and
    followed by an unprobed cudaGetLastError RUNTIME record: the stream a join by thread and
    time alone gets wrong. Each launch (thread, name, grid, block) must be joined to the kernel
    that launch produced, in stream order, each kernel taken once."""
    need_root()
    need_ptrace()
    threads, launches = 3, 300
    trace, wl, _ = trace_workload(
        [os.path.join(WL, "launch_storm"), "--threads", str(threads), "--launches",
         str(launches), "--kernel-us", "5"],
        tracer_args=["--gpu"], env={"TPSIM_SPIN_US": "0"}, out_name="storm.json")
    check_valid_trace(trace)
    info = {int(t["tid"]): t for t in info_lines(wl.out.text(), "thread")}
    assert len(info) == threads, info
    evs = calls(trace, pid=wl.pid, name="cudaLaunchKernel")
    assert len(evs) == threads * launches, len(evs)
    kernels = gpu_kernels(trace)
    used = set()
    for tid, t in info.items():
        mine = sorted((e for e in evs if e["tid"] == tid), key=lambda e: e["ts"])
        assert len(mine) == launches, (tid, len(mine))
        last_start = -1
        for j, l in enumerate(mine):
            # what this launch asked for (launch_storm's documented sequence)
            name = "storm_a" if j % 2 == 0 else "storm_b"
            assert l["args"]["kernel"] == name, (tid, j, l["args"])
            assert l["args"]["grid"] == [int(t["thread"]) + 1, 1, 1]
            assert l["args"]["block"] == [32 * (j % 4 + 1), 1, 1]
            k = check_arrow(trace, l, name)
            # ... is what the kernel it is joined to ran with
            assert k["args"]["grid"] == l["args"]["grid"], (tid, j, k["args"], l["args"])
            assert k["args"]["block"] == l["args"]["block"], (tid, j, k["args"], l["args"])
            assert k["ts"] > last_start, (tid, j)     # in stream order
            last_start = k["ts"]
            corr = l["args"]["correlation"]
            assert corr not in used
            used.add(corr)
            assert len(kernels[corr]) == 1
    j = join_counts(trace)
    assert j["joined"] >= threads * launches and j["unjoined"]["before_enable"] == 0, j
    assert j["api_records_unclaimed"]["nested"] >= threads * launches, j
    assert j["api_records_unclaimed"]["unprobed"] >= threads * launches, j
