"""Tier 2: programs compiled by nvcc. CUDA 13 <<<>>> launches go through __cudaGetKernel and
__cudaLaunchKernel (handle ABI); names must come out demangled for handles created before
and after attach, with the static cudart (local symbols) and the shared one (sim)."""
import os
import shutil
import subprocess
from lib import WL, calls, check_valid_trace, counts, need_root, tmp_path, trace_workload

SCALE = ("scale_vec(float*, float, int)", [3, 5, 7], [32, 2, 1], 128)
TK = ("void ns::tk<int>(int*, int)", [4, 1, 1], [64, 1, 1], 0)
LATE = ("late_kernel(int*)", [2, 2, 2], [8, 8, 1], 0)


def check_launches(launches, iters, sources):
    assert len(launches) == 3 * iters, [l["args"]["kernel"] for l in launches]
    for i, e in enumerate(launches):
        name, grid, block, shmem = (SCALE, TK, LATE)[i % 3]
        a = e["args"]
        assert a["kernel"] == name, (i, a)
        assert a["grid"] == grid and a["block"] == block and a["shared memory"] == shmem, (i, a)
        assert a["kernel source"] in sources[i % 3], (i, a["kernel source"])
        assert "handle" in a and a["handle"] != "0x0", a


PT_KEY = "per-thread stream"


def check_per_thread(evs, per_thread):
    """Built with --default-stream per-thread, the launches and stream syncs go to the _ptsz
    entry points and are marked; __cudaGetKernel and cudaDeviceSynchronize have no variant."""
    for e in evs:
        if per_thread and e["name"] not in ("__cudaGetKernel", "cudaDeviceSynchronize"):
            assert e["args"].get(PT_KEY) is True, e
        else:
            assert PT_KEY not in e["args"], e


def nvcc_shared_case(binary, per_thread):
    need_root()
    iters = 3
    trace, wl, tr = trace_workload([os.path.join(WL, binary), "--iters", str(iters)],
                                   out_name=f"{binary}.json")
    check_valid_trace(trace)
    evs = calls(trace, pid=wl.pid)
    launches = [e for e in evs if e["name"] in ("__cudaLaunchKernel", "cudaLaunchKernel")]
    # handles of scale_vec and tk were created before attach (read from the stubs' statics);
    # late_kernel's __cudaGetKernel ran after attach
    check_launches(launches, iters, [("stub_static",), ("stub_static",), ("getkernel",)])
    gk = [e for e in evs if e["name"] == "__cudaGetKernel"]
    assert len(gk) == 1 and gk[0]["args"]["kernel"] == "late_kernel(int*)" and gk[0]["args"]["rc"] == 0
    assert gk[0]["args"]["handle"] == launches[2]["args"]["handle"]
    c = counts(evs)
    assert c["cudaStreamSynchronize"] == iters and c["cudaDeviceSynchronize"] == 1, c
    # per thread ordering: launch, launch, (getkernel), launch, sync
    names = [e["name"] for e in evs]
    expect = []
    for i in range(iters):
        l = launches[0]["name"]
        expect += [l, l] + (["__cudaGetKernel"] if i == 0 else []) + [l, "cudaStreamSynchronize"]
    assert names == expect + ["cudaDeviceSynchronize"], names
    check_per_thread(evs, per_thread)
    if per_thread:
        # late_kernel<<<>>> without a stream: 0, the per-thread default stream in this build
        assert [l["args"]["stream"] for l in launches[2::3]] == ["0x0"] * iters


def test_nvcc_shared_on_sim():
    nvcc_shared_case("nvcc_shared", False)


def test_nvcc_shared_per_thread_on_sim():
    """nvcc --default-stream per-thread: __cudaLaunchKernel_ptsz on the sim."""
    nvcc_shared_case("nvcc_shared_pt", True)


def nvcc_static_case(binary, per_thread):
    need_root()
    iters = 2
    trace, wl, tr = trace_workload([os.path.join(WL, binary), "--iters", str(iters)],
                                   out_name=f"{binary}.json")
    check_valid_trace(trace)
    meta = trace["tptrace"]["targets"][0]
    # the runtime is the executable itself (static cudart, local symbols)
    assert meta["cuda_runtimes"] == [os.path.realpath(os.path.join(WL, binary))], meta
    evs = calls(trace, pid=wl.pid)
    launches = [e for e in evs if e["name"] in ("__cudaLaunchKernel", "cudaLaunchKernel")]
    # one event per launch even though __cudaLaunchKernel tail-jumps into cudaLaunchKernel
    check_launches(launches, iters, [("stub_static", "caller"), ("stub_static", "caller"),
                                     ("getkernel", "stub_static", "caller")])
    syncs = [e for e in evs if e["name"] == "cudaStreamSynchronize"]
    assert [s["args"]["rc"] for s in syncs] == [35] * iters, syncs
    check_per_thread(evs, per_thread)


def test_nvcc_static_cudart():
    nvcc_static_case("nvcc_static", False)


def test_nvcc_static_cudart_per_thread():
    """The static cudart's _ptsz entry points (local symbols), no driver: entry observable."""
    nvcc_static_case("nvcc_static_pt", True)


def test_nvcc_names_from_caller_without_statics():
    """Strip the __handle statics: names must then come from the device stub that called."""
    need_root()
    src = os.path.join(WL, "nvcc_shared")
    dst = tmp_path("nvcc_nostatics")
    syms = subprocess.run(["nm", src], stdout=subprocess.PIPE, text=True, check=True).stdout
    strip = [l.split()[-1] for l in syms.splitlines() if l.endswith("E8__handle")]
    assert len(strip) == 3, strip
    shutil.copy(src, dst)
    args = ["objcopy"] + [f"--strip-symbol={s}" for s in strip] + [dst]
    subprocess.run(args, check=True)
    iters = 2
    trace, wl, tr = trace_workload([dst, "--iters", str(iters)], out_name="nvcc_nostatics.json")
    launches = [e for e in calls(trace, pid=wl.pid) if "LaunchKernel" in e["name"]]
    check_launches(launches, iters, [("caller",), ("caller",), ("getkernel",)])
