"""Tier 2: attach to a process calling the REAL /usr/local/cuda/lib/libcudart.so.13 and check
every decoded argument exactly (values from tests/e2e/progs/real_args.c)."""
import os
from lib import E2E_BIN, calls, check_valid_trace, need_root, trace_workload

EXPECTED = [
    ("cudaLaunchKernel", {"kernel": "real_kernel_stub(float*, int)", "grid": [11, 12, 13],
                          "block": [32, 4, 2], "shared memory": 4096, "stream": "0x5100"}),
    ("cudaLaunchCooperativeKernel", {"kernel": "real_kernel_stub(float*, int)",
                                     "grid": [70000, 3, 1], "block": [1024, 1, 1],
                                     "shared memory": 1 << 20, "stream": "0x2"}),
    ("cudaLaunchKernelExC", {"kernel": "real_kernel_stub(float*, int)", "grid": [21, 22, 23],
                             "block": [64, 2, 3], "shared memory": 777, "stream": "0x5200",
                             "attributes": 0}),
    ("cudaMemcpy", {"bytes": 48, "kind": "HtoD", "stream": "0x0", "rc": 35}),
    ("cudaMemcpyAsync", {"bytes": 40, "kind": "DtoH", "stream": "0x5100"}),
    ("cudaMemcpy2D", {"bytes": 24, "kind": "DtoD", "width": 8, "height": 3, "dpitch": 16,
                      "spitch": 32, "stream": "0x0", "rc": 35}),
    ("cudaMemcpy2DAsync", {"bytes": 24, "kind": "HtoH", "width": 12, "height": 2,
                           "dpitch": 24, "spitch": 40, "stream": "0x5100"}),
    ("cudaMemset", {"bytes": 33, "value": 0x5a, "rc": 35}),
    ("cudaMemsetAsync", {"bytes": 34, "value": -1, "stream": "0x5100"}),
    ("cudaEventRecord", {"event": "0xe7e7", "stream": "0x5100"}),
    ("cudaStreamWaitEvent", {"stream": "0x5100", "event": "0xe7e7", "flags": 0}),
    ("cudaEventQuery", {"event": "0xe7e7", "rc": 35}),
    ("cudaEventSynchronize", {"event": "0xe7e7", "rc": 35}),
    ("cudaStreamSynchronize", {"stream": "0x5100", "rc": 35}),
    ("cudaDeviceSynchronize", {"rc": 35}),
    ("cudaGetKernel", {"kernel": "real_kernel_stub(float*, int)", "rc": 35}),
]


def test_real_cudart_arguments():
    need_root()
    trace, wl, tr = trace_workload([os.path.join(E2E_BIN, "real_args")], out_name="real.json")
    check_valid_trace(trace)
    evs = calls(trace, pid=wl.pid)
    got = [e["name"] for e in evs]
    assert got == [n for n, _ in EXPECTED], f"calls {got}"
    correlations = set()
    for e, (name, want) in zip(evs, EXPECTED):
        for k, v in want.items():
            assert e["args"].get(k) == v, f"{name}.{k}: got {e['args'].get(k)!r} want {v!r}"
        assert e["tid"] == wl.pid
        correlations.add(e["args"]["correlation"])
        if "rc" in want:
            assert e["dur"] > 0, f"{name} has a return probe: dur must be > 0"
        else:
            assert "rc" not in e["args"], f"{name} is entry-only"
    assert len(correlations) == len(EXPECTED)
    meta = trace["tptrace"]
    assert meta["events_dropped"] == 0
    assert meta["targets"][0]["cuda_runtimes"] == [os.path.realpath("/usr/local/cuda/lib/libcudart.so.13")]
    # 3 entry-only launch APIs x2 (+_ptsz) ... every symbol of the table that the real library has
    assert meta["probes_attached"] >= 40, meta["probes_attached"]
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"real_args"}


def test_real_cudart_gzip_output():
    need_root()
    trace, wl, tr = trace_workload([os.path.join(E2E_BIN, "real_args")], out_name="real.json.gz")
    check_valid_trace(trace)
    assert len(calls(trace, pid=wl.pid)) == len(EXPECTED)
