"""Tier 2 on the real PyTorch 2.x of the test venv (tests/venv/): tptrace -p on a torch 2.x
process finds the CUDA runtime of torch's wheel under site-packages/nvidia/ and decodes its
calls' arguments exactly (ctypes calls into that very library, tests/workloads/torch2_cudart.py)."""
import os

from lib import ROOT, calls, check_valid_trace, need_root, trace_workload, venv_python

WORKLOAD = os.path.join(ROOT, "tests", "workloads", "torch2_cudart.py")

EXPECTED = [
    ("cudaLaunchKernel", {"grid": [11, 12, 13], "block": [32, 4, 2], "shared memory": 4096,
                          "stream": "0x5100"}),
    ("cudaMemcpyAsync", {"bytes": 40, "kind": "DtoH", "stream": "0x5100"}),
    ("cudaStreamSynchronize", {"stream": "0x5100"}),
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
