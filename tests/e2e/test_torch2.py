"""Tier 2 on the real PyTorch 2.x of the test venv (tests/venv/): tptrace -p on a torch 2.x
process finds the CUDA runtime of torch's wheel under site-packages/nvidia/ and decodes its
calls' arguments exactly (ctypes calls into that very library, tests/workloads/torch2_cudart.py)."""
import json
import os
import shutil

from lib import (ROOT, Skip, Tracer, Workload, calls, check_valid_trace, fresh_tmp_path,
                 need_root, run_tptrace, tmp_path, trace_workload, venv_python)

WORKLOAD = os.path.join(ROOT, "tests", "workloads", "torch2_cudart.py")

EXPECTED = [
    ("cudaLaunchKernel", {"grid": [11, 12, 13], "block": [32, 4, 2], "shared memory": 4096,
                          "stream": 0x5100}),
    ("cudaMemcpyAsync", {"bytes": 40, "kind": "DtoH", "stream": 0x5100}),
    ("cudaStreamSynchronize", {"stream": 0x5100}),
]


def test_torch2_wheel_cudart_arguments():
    need_root()
    py = venv_python()
    trace, wl, tr = trace_workload([py, WORKLOAD], out_name="torch2_cudart.json",
                                   done_timeout=120)
    check_valid_trace(trace)
    cudart = [l.split()[1] for l in wl.out.lines if l.startswith("CUDART ")][0]
    assert "/site-packages/nvidia/" in cudart, cudart
    meta = trace["tptrace"]
    assert meta["events_dropped"] == 0
    # the wheel's runtime is found and probed; so are the wheel's libraries that carry a
    # static runtime of their own (libnccl, libnvshmem_host: seen so with torch 2.13), and
    # nothing outside the wheels
    runtimes = meta["targets"][0]["cuda_runtimes"]
    assert os.path.realpath(cudart) in runtimes, runtimes
    assert all("/site-packages/nvidia/" in r for r in runtimes), runtimes
    evs = [e for e in calls(trace, pid=wl.pid) if e["name"] in {n for n, _ in EXPECTED}]
    assert [e["name"] for e in evs] == [n for n, _ in EXPECTED], [e["name"] for e in evs]
    for e, (name, want) in zip(evs, EXPECTED):
        for k, v in want.items():
            assert e["args"].get(k) == v, f"{name}.{k}: got {e['args'].get(k)!r} want {v!r}"
    # no driver here: the synchronising call returns an error, seen by its return probe
    assert evs[2]["args"].get("rc") not in (None, 0), evs[2]["args"]


NCCL_WORKLOAD = os.path.join(ROOT, "tests", "workloads", "torch2_nccl.py")
ID_HASH = "356c6cc8137514a5"  # FNV-1a of the unique id bytes 0..127 (as test_real_nccl)


def test_torch2_wheel_nccl_flight_recorder():
    """tptrace fr on a torch 2.x process records the calls into the wheel's libnccl: its
    version string, the failed communicator init and the collective, each exact."""
    need_root()
    py = venv_python()
    out_dir = tmp_path("fr-torch2")
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.unlink(os.path.join(out_dir, f))
    wl = Workload([py, NCCL_WORKLOAD])
    try:
        tr = Tracer(["fr", "-p", str(wl.pid), "--dump-dir", out_dir], ready=False)
        assert tr.err.wait_for(lambda l: "flight recorder on" in l, 60), tr.err.text()
        wl.go()
        wl.wait_done(120)
        wl.finish()
        assert tr.wait(60) == 0, tr.err.text()
    finally:
        wl.kill()
    lib = [l.split()[1] for l in wl.out.lines if l.startswith("NCCL ")][0]
    assert [l for l in wl.out.lines if l.startswith("RC ")] == ["RC 1 4"], wl.out.lines
    files = os.listdir(out_dir)
    assert len(files) == 1, files
    with open(os.path.join(out_dir, files[0])) as f:
        d = json.load(f)
    assert "/site-packages/nvidia/nccl/lib/" in lib, lib
    assert os.path.realpath(d["nccl_library"]) == os.path.realpath(lib), d["nccl_library"]
    # the wheel's version string, read from the library itself (2.29.7 with torch 2.13.0)
    v = d["nccl_version"]
    assert v and v.count(".") == 2 and v != "2.28.9", v
    ops = [(x["op"], x["rc"]) for x in d["entries"]]
    assert ops == [("comm_init", 1), ("all_reduce", 4)], ops
    init = d["entries"][0]
    failed = [c for c in d["comms"] if c["state"] == "init_failed"]
    assert len(failed) == 1 and failed[0]["comm_id"] == ID_HASH == init["comm_id"], failed
    assert (failed[0]["rank"], failed[0]["nranks"], failed[0]["init_rc"]) == (2, 4, 1), failed
    ar = d["entries"][1]
    assert (ar["count"], ar["dtype"], ar["reduce_op"], ar["sendbuff"], ar["recvbuff"],
            ar["stream"]) == (12345, "float16", "max", "0x1000", "0x2000", "0x5100"), ar


def test_torch2_gpu_wheel_cupti_without_driver():
    """--gpu on a torch 2.x process whose runtime loaded a driver (the toolkit's stub, whose
    calls fail): the agent loads the wheel's libcupti (next to its libcudart), CUPTI refuses
    without a real driver, and tptrace says so in one line; the process is unharmed."""
    need_root()
    py = venv_python()
    stub = "/usr/local/cuda/lib/stubs/libcuda.so"
    if not os.path.exists(stub):
        raise Skip(f"{stub} not installed")
    drv = tmp_path("torch2-stub")
    os.makedirs(drv, exist_ok=True)
    shutil.copyfile(stub, os.path.join(drv, "libcuda.so.1"))
    wl = Workload([py, NCCL_WORKLOAD, os.path.join(drv, "libcuda.so.1")])
    try:
        wl.go()
        wl.wait_done(120)
        rc, _, err = run_tptrace(["-p", str(wl.pid), "--gpu", "-d", "1", "-o",
                                  fresh_tmp_path("torch2-gpu.json")])
        lines = [l for l in err.splitlines() if l.startswith("tptrace:")]
        assert rc == 1, (rc, err)
        gpu = [l for l in lines if "--gpu" in l]
        assert len(gpu) == 1, lines
        assert "cuptiSubscribe failed" in gpu[0], gpu
        assert "/site-packages/nvidia/cu13/lib/libcupti.so" in gpu[0], gpu
        wl.p.stdin.write("\n")
        wl.p.stdin.flush()
        assert wl.finish(60) == 0, wl.err.text()
    finally:
        wl.kill()
