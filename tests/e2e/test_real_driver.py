"""Tier 2: attach to a process calling the REAL driver entry points (the toolkit's stub
libcuda.so, soname libcuda.so.1, whose functions return CUDA_ERROR_STUB_LIBRARY = 34) and check
every decoded argument of every probed driver call exactly (values from
tests/workloads/real_driver_args.c, in its order)."""
import os
from lib import WL, calls, check_valid_trace, need_root, trace_workload

STUB = "/usr/local/cuda/lib/stubs/libcuda.so"
S, S2, PT, EV = "0x5100", "0x5200", "0x2", "0xe7e7"  # handles, in hex
RC = 34  # CUDA_ERROR_STUB_LIBRARY


def launch(grid, block, smem, stream, **kw):
    # nothing names 0xf00d (the stub returns no handles): unresolved, with the handle
    return dict(kernel="handle 0xf00d", **{"kernel source": "unresolved", "handle": "0xf00d",
                "grid": grid, "block": block, "shared memory": smem, "stream": stream}, **kw)


def copy(nbytes, kind, dst, src, stream, **kw):
    return dict(bytes=nbytes, kind=kind, dst=dst, src=src, stream=stream, **kw)


def memset(nbytes, esize, value, dst, stream, **kw):
    return {"bytes": nbytes, "element size": esize, "elements": nbytes // esize, "value": value,
            "dst": dst, "stream": stream, **kw}


PEER = {"dst context": "0xc1", "src context": "0xc2"}

# (event name, per-thread flavour, has a return probe, args)
EXPECTED = [
    ("cuLaunchKernel", False, False, launch([11, 12, 13], [32, 4, 2], 4096, S)),
    ("cuLaunchKernel", True, False, launch([21, 22, 23], [64, 2, 3], 777, PT)),
    ("cuLaunchCooperativeKernel", False, False, launch([70000, 3, 1], [1024, 1, 1], 65536, S)),
    ("cuLaunchCooperativeKernel", True, False, launch([5, 6, 7], [8, 9, 10], 11, S2)),
    ("cuLaunchKernelEx", False, False,
     launch([31, 32, 33], [128, 1, 2], 12345, S, attributes=3,
            **{"cluster dimension": [2, 1, 4], "cooperative": 1, "priority": -3})),
    ("cuLaunchKernelEx", True, False,
     launch([41, 42, 43], [256, 1, 1], 0, PT, attributes=4,
            **{"attributes not read": 1, "programmatic stream serialization": 1,
               "cluster scheduling policy preference": 2, "attribute 99": "0x4242"})),
    ("cuGraphLaunch", False, False, {"graph": "0x9a9a", "stream": S}),
    ("cuGraphLaunch", True, False, {"graph": "0x9b9b", "stream": PT}),
    ("cuMemcpy", False, True, copy(48, "Default", "0xd000", "0xd100", "0x0")),
    ("cuMemcpy", True, True, copy(49, "Default", "0xd000", "0xd100", "0x0")),
    ("cuMemcpyAsync", False, False, copy(50, "Default", "0xd000", "0xd100", S)),
    ("cuMemcpyAsync", True, False, copy(51, "Default", "0xd000", "0xd100", S2)),
    ("cuMemcpyHtoD", False, True, copy(52, "HtoD", "0xd200", "0x7200", "0x0")),
    ("cuMemcpyHtoD", True, True, copy(53, "HtoD", "0xd200", "0x7200", "0x0")),
    ("cuMemcpyDtoH", False, True, copy(54, "DtoH", "0x7300", "0xd300", "0x0")),
    ("cuMemcpyDtoH", True, True, copy(55, "DtoH", "0x7300", "0xd300", "0x0")),
    ("cuMemcpyDtoD", False, True, copy(56, "DtoD", "0xd400", "0xd500", "0x0")),
    ("cuMemcpyDtoD", True, True, copy(57, "DtoD", "0xd400", "0xd500", "0x0")),
    ("cuMemcpyHtoDAsync", False, False, copy(58, "HtoD", "0xd200", "0x7200", S)),
    ("cuMemcpyHtoDAsync", True, False, copy(59, "HtoD", "0xd200", "0x7200", S2)),
    ("cuMemcpyDtoHAsync", False, False, copy(60, "DtoH", "0x7300", "0xd300", S)),
    ("cuMemcpyDtoHAsync", True, False, copy(61, "DtoH", "0x7300", "0xd300", S2)),
    ("cuMemcpyDtoDAsync", False, False, copy(62, "DtoD", "0xd400", "0xd500", S)),
    ("cuMemcpyDtoDAsync", True, False, copy(63, "DtoD", "0xd400", "0xd500", S2)),
    ("cuMemcpyPeer", False, True, copy(64, "PtoP", "0xd600", "0xd700", "0x0", **PEER)),
    ("cuMemcpyPeer", True, True, copy(65, "PtoP", "0xd600", "0xd700", "0x0", **PEER)),
    ("cuMemcpyPeerAsync", False, False, copy(66, "PtoP", "0xd600", "0xd700", S, **PEER)),
    ("cuMemcpyPeerAsync", True, False, copy(67, "PtoP", "0xd600", "0xd700", S2, **PEER)),
    ("cuMemcpy2D", False, True, copy(700, "DtoH", None, "0xd800", "0x0", width=100, height=7,
                                     spitch=256, dpitch=128)),
    ("cuMemcpy2D", True, True, copy(30, "HtoD", "0xd900", "0x7400", "0x0", width=10, height=3,
                                    spitch=16, dpitch=32)),
    ("cuMemcpy2DAsync", False, False, copy(40, "DtoD", "0xdb00", "0xda00", S, width=20,
                                           height=2, spitch=64, dpitch=48)),
    ("cuMemcpy2DAsync", True, False, copy(64, "AtoD", "0xdc00", "0xa11a", S2, width=8,
                                          height=8, spitch=0, dpitch=8)),
    ("cuMemsetD8", False, True, memset(100, 1, 0xab, "0xe000", "0x0")),
    ("cuMemsetD8", True, True, memset(101, 1, 0xcd, "0xe000", "0x0")),
    ("cuMemsetD16", False, True, memset(204, 2, 0xbeef, "0xe100", "0x0")),
    ("cuMemsetD16", True, True, memset(206, 2, 0x1234, "0xe100", "0x0")),
    ("cuMemsetD32", False, True, memset(416, 4, 0xdeadbeef, "0xe200", "0x0")),
    ("cuMemsetD32", True, True, memset(420, 4, 0x01020304, "0xe200", "0x0")),
    ("cuMemsetD8Async", False, False, memset(106, 1, 0x11, "0xe300", S)),
    ("cuMemsetD8Async", True, False, memset(107, 1, 0x22, "0xe300", S2)),
    ("cuMemsetD16Async", False, False, memset(216, 2, 0x3333, "0xe400", S)),
    ("cuMemsetD16Async", True, False, memset(218, 2, 0x4444, "0xe400", S2)),
    ("cuMemsetD32Async", False, False, memset(440, 4, 0x55555555, "0xe500", S)),
    ("cuMemsetD32Async", True, False, memset(444, 4, 0x66666666, "0xe500", S2)),
    ("cuStreamSynchronize", False, True, {"stream": S}),
    ("cuStreamSynchronize", True, True, {"stream": S2}),
    ("cuCtxSynchronize", False, True, {}),
    ("cuEventRecord", False, False, {"event": EV, "stream": S}),
    ("cuEventRecord", True, False, {"event": EV, "stream": S2}),
    ("cuEventRecordWithFlags", False, False, {"event": EV, "stream": S, "flags": 1}),
    ("cuEventRecordWithFlags", True, False, {"event": EV, "stream": PT, "flags": 1}),
    ("cuEventQuery", False, True, {"event": EV}),
    ("cuEventSynchronize", False, True, {"event": EV}),
    ("cuStreamWaitEvent", False, False, {"stream": S, "event": EV, "flags": 0}),
    ("cuStreamWaitEvent", True, False, {"stream": S2, "event": EV, "flags": 1}),
    ("cuModuleGetFunction", False, True, {"module": "0x30d0", "name": "triton_poi_fused_add_0"}),
    ("cuLibraryGetKernel", False, True, {"library": "0x11b0", "name": "scale(float*, int)"}),
    ("cuKernelGetFunction", False, True, {"kernel handle": "0xc0c0"}),
]


def stub_env():
    return {"LD_LIBRARY_PATH": os.path.join(WL, "stubdrv")}


def test_real_driver_arguments():
    need_root()
    trace, wl, tr = trace_workload([os.path.join(WL, "real_driver_args")], env=stub_env(),
                                   out_name="real_driver.json")
    check_valid_trace(trace)
    evs = calls(trace, pid=wl.pid, cat="cuda_driver")
    got = [(e["name"], bool(e["args"].get("per-thread stream"))) for e in evs]
    assert got == [(n, pt) for n, pt, _, _ in EXPECTED], f"calls {got}"
    assert not calls(trace, pid=wl.pid), "no runtime call made: no cuda_runtime events"
    correlations = set()
    for e, (name, pt, has_ret, want) in zip(evs, EXPECTED):
        args = dict(e["args"])
        for k, v in want.items():
            if v is None:  # a host buffer's address: present, not known in advance
                assert k in args, f"{name}.{k} missing"
                continue
            assert args.get(k) == v, f"{name}{' (pt)' if pt else ''}.{k}: got {args.get(k)!r} want {v!r}"
        assert e["tid"] == wl.pid
        correlations.add(args["correlation"])
        if has_ret:
            assert args.get("rc") == RC, f"{name}: rc {args.get('rc')}"
            assert e["dur"] > 0, f"{name} has a return probe: dur must be > 0"
        else:
            assert "rc" not in args, f"{name} is entry-only"
        # nothing beyond what the call has: every argument written was asserted
        extra = set(args) - set(want) - {"correlation", "rc", "per-thread stream"}
        assert not extra, f"{name}: unasserted arguments {extra}"
    assert len(correlations) == len(EXPECTED)
    meta = trace["tptrace"]
    assert meta["events_dropped"] == 0
    # the cuMemcpyHtoD and cuLaunchKernel of libcudart_static_feedface(): nested, not
    # written (the expected list above has none of their values), not counted as launches
    assert meta["nested_driver_calls"] == 2, meta["nested_driver_calls"]
    assert not [e for e in evs if e["args"].get("bytes") == 77 or
                e["args"].get("handle") == "0xfeed"]
    # launches: the 6 launch calls (graph launches are not kernel launches)
    assert meta["launches"] == 6 and meta["launches_named"] == 0, meta
    target = meta["targets"][0]
    assert target["cuda_drivers"] == [os.path.realpath(STUB)], target
    # the executable's marker makes it a static cudart (its cudaStreamSynchronize is probed)
    assert target["cuda_runtimes"] == [os.path.join(WL, "real_driver_args")], target
    # every probed symbol of the table that the stub exports: entry + return probes
    assert meta["probes_attached"] >= len(EXPECTED) + 20, meta["probes_attached"]
