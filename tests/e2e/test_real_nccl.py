"""Tier 2: attach to a process calling the REAL /usr/local/cuda/lib/libnccl.so.2 (NCCL
2.28.9) and check every decoded argument (values from tests/workloads/nccl_real_args.c).
Without a GPU the calls fail or crash inside NCCL (the workload jumps back out); the entry
is what is observed."""
import os
import time
from lib import WL, Tracer, Workload, calls, check_valid_trace, need_root, tmp_path, trace_workload
from ncclib import FR_TOOL  # noqa: F401  (same helpers as the fr tests)

C = "0xc0ffee"
S = "0x5100"  # host calls write streams as hex strings (HTA takes a number for GPU work)
COLL = [
    ("ncclAllReduce", dict(collective="all_reduce", count=12345, dtype="float16", bytes=24690,
                           reduce_op="max", sendbuff="0x1000", recvbuff="0x2000", comm="0x0",
                           stream=S, rc=4)),
    ("ncclAllReduce", dict(collective="all_reduce", count=12345, dtype="float16", reduce_op="max",
                           sendbuff="0x1000", recvbuff="0x2000", comm=C, stream=S)),
    ("ncclAllGather", dict(collective="all_gather", count=2222, dtype="bfloat16", bytes=4444,
                           sendbuff="0x1100", recvbuff="0x2100", comm=C, stream=S)),
    ("ncclReduceScatter", dict(count=3333, dtype="int32", reduce_op="min", sendbuff="0x1200",
                               recvbuff="0x2200", comm=C, stream=S)),
    ("ncclBroadcast", dict(count=4444, dtype="uint8", root=5, sendbuff="0x1300",
                           recvbuff="0x2300", comm=C, stream=S)),
    ("ncclBcast", dict(count=5555, dtype="int64", root=6, sendbuff="0x1400", comm=C, stream=S)),
    ("ncclReduce", dict(count=6666, dtype="float64", reduce_op="prod", root=2, sendbuff="0x1500",
                        recvbuff="0x2500", comm=C, stream=S)),
    ("ncclAlltoAll", dict(count=7777, dtype="uint32", sendbuff="0x1600", recvbuff="0x2600",
                          comm=C, stream=S)),
    ("ncclGather", dict(count=8888, dtype="float32", root=1, sendbuff="0x1700",
                        recvbuff="0x2700", comm=C, stream=S)),
    ("ncclScatter", dict(count=9999, dtype="uint64", root=3, sendbuff="0x1800",
                         recvbuff="0x2800", comm=C, stream=S)),
    ("ncclSend", dict(count=256, dtype="float32", peer=3, sendbuff="0x1900", comm=C, stream=S)),
    ("ncclRecv", dict(count=512, dtype="int8", peer=4, recvbuff="0x2900", comm=C, stream=S)),
]
ID_HASH = "356c6cc8137514a5"  # FNV-1a of the unique id bytes 0..127
LIFECYCLE = [
    ("ncclGetUniqueId", dict(rc=0)),
    ("ncclCommInitRank", dict(nranks=4, rank=2, comm_id=ID_HASH, rc=1)),
    ("ncclCommInitRankConfig", dict(nranks=6, rank=5, comm_id=ID_HASH, rc=1)),
    ("ncclCommInitRankScalable", dict(nranks=8, rank=7, nId=2, comm_id=ID_HASH, rc=1)),
    ("ncclCommInitAll", dict(ndev=3, devlist="0,1,2", rc=1)),
    ("ncclGroupStart", dict(rc=None)),  # entry only: it cannot block
    ("ncclGroupEnd", dict(rc=0)),
    ("ncclCommSplit", dict(comm=C, color=7, key=9, config="0x0", rc=1)),
    ("ncclCommShrink", {"comm": C, "exclude count": 2, "exclude": "1,2", "flags": 0}),
    ("ncclCommGetAsyncError", dict(comm=C)),
    ("ncclCommCount", dict(comm=C)),
    ("ncclCommUserRank", dict(comm=C)),
    ("ncclCommCuDevice", dict(comm=C)),
    ("ncclCommRevoke", dict(comm=C, flags=0)),
    ("ncclCommFinalize", dict(comm=C)),
    ("ncclCommAbort", dict(comm=C)),
    ("ncclCommDestroy", dict(comm=C)),
]


def test_real_nccl_arguments_in_trace():
    need_root()
    trace, wl, tr = trace_workload([os.path.join(WL, "nccl_real_args")], out_name="nccl_real.json")
    check_valid_trace(trace)
    evs = sorted(calls(trace, pid=wl.pid, cat="nccl"), key=lambda e: e["args"]["correlation"])
    # ncclBcast is built on ncclBroadcast in the real library: its inner call shows nested
    inner = [e for e in evs if e["name"] == "ncclBroadcast" and e["args"]["count"] == 5555]
    assert len(inner) == 1
    evs = [e for e in evs if e is not inner[0]]
    colls = [e for e in evs if "collective" in e["args"]]
    assert [e["name"] for e in colls] == [n for n, _ in COLL], [e["name"] for e in colls]
    for e, (name, want) in zip(colls, COLL):
        for k, v in want.items():
            assert e["args"].get(k) == v, (name, k, e["args"].get(k), v)
    life = [e for e in evs if "collective" not in e["args"]]
    assert [e["name"] for e in life] == [n for n, _ in LIFECYCLE], [e["name"] for e in life]
    for e, (name, want) in zip(life, LIFECYCLE):
        for k, v in want.items():
            assert e["args"].get(k) == v, (name, k, e["args"].get(k), v)
    meta = trace["tptrace"]["targets"][0]
    assert os.path.realpath("/usr/local/cuda/lib/libnccl.so.2") in meta["cuda_runtimes"], meta


def record_real_nccl(name):
    """`tptrace fr` over one run of nccl_real_args: its exit dump."""
    import json
    out_dir = tmp_path(name)
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        os.unlink(os.path.join(out_dir, f))
    wl = Workload([os.path.join(WL, "nccl_real_args")])
    try:
        tr = Tracer(["fr", "-p", str(wl.pid), "--dump-dir", out_dir], ready=False)
        assert tr.err.wait_for(lambda l: "flight recorder on" in l, 30), tr.err.text()
        wl.go()
        wl.wait_done()
        wl.finish()
        assert tr.wait(30) == 0, tr.err.text()
    finally:
        wl.kill()
    files = os.listdir(out_dir)
    assert len(files) == 1, files
    with open(os.path.join(out_dir, files[0])) as f:
        return json.load(f)


def test_real_nccl_flight_recorder_entries():
    need_root()
    d = record_real_nccl("fr-real")
    assert d["nccl_version"] == "2.28.9", d["nccl_version"]
    assert d["dump_reason"] == "exit"
    # the failed communicator inits are checked in test_real_nccl_init_failed
    e = [x for x in d["entries"] if x["op"] != "comm_init"]
    # the nested ncclBroadcast inside ncclBcast is not a second entry
    assert [x["op"] for x in e] == ["all_reduce", "all_reduce", "all_gather", "reduce_scatter",
                                    "broadcast", "broadcast", "reduce", "all_to_all", "gather",
                                    "scatter", "send", "recv"], [x["op"] for x in e]
    assert e[0]["rc"] == 4 and e[0]["state"] == "enqueued"
    on_c = [x for x in e[1:]]
    assert len({x["comm_id"] for x in on_c}) == 1
    assert [x["collective_seq_id"] for x in on_c] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0]
    assert [x["p2p_seq_id"] for x in on_c[-2:]] == [1, 2]
    want = [(12345, "float16", "max", None, None), (2222, "bfloat16", None, None, None),
            (3333, "int32", "min", None, None), (4444, "uint8", None, 5, None),
            (5555, "int64", None, 6, None), (6666, "float64", "prod", 2, None),
            (7777, "uint32", None, None, None), (8888, "float32", None, 1, None),
            (9999, "uint64", None, 3, None), (256, "float32", None, None, 3),
            (512, "int8", None, None, 4)]
    got = [(x["count"], x["dtype"], x["reduce_op"], x["root"], x["peer"]) for x in on_c]
    assert got == want, got
    assert all(x["stream"] == "0x5100" for x in e)
    comm = [c for c in d["comms"] if c["comm_handle"] == "0xc0ffee"][0]
    assert comm["created_by"] == "before attach" and comm["learned"]["seq_origin"] == "attach"


def test_real_nccl_init_failed():
    """Without a GPU driver every communicator init of the real library fails (rc 1,
    ncclUnhandledCudaError): each is in the dump as an init_failed comm and a failed
    comm_init entry (docs/fr-schema.md)."""
    need_root()
    d = record_real_nccl("fr-real-init")
    inits = [x for x in d["entries"] if x["op"] == "comm_init"]
    failed = [c for c in d["comms"] if c["state"] == "init_failed"]
    # calls 3-6 and 9 of nccl_real_args; ncclCommShrink crashes (no rc): not an init failure
    assert [c["created_by"] for c in failed] == [
        "ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitRankScalable",
        "ncclCommInitAll", "ncclCommSplit"], failed
    assert [(c["rank"], c["nranks"]) for c in failed] == [
        (2, 4), (5, 6), (7, 8), (0, 3), (None, None)], failed
    for c in failed:
        assert c["init_rc"] == 1 and c["comm_handle"] is None, c
    assert [c["comm_id"] for c in failed[:3]] == [ID_HASH] * 3
    assert all(c["learned"]["comm_id"] == "init_call" for c in failed[:3]), failed
    assert failed[3]["learned"]["comm_id"] == "init_all_local"
    # the split's parent was created before attach: no cross-rank identity, a local name
    assert failed[4]["cross_rank_id"] is False and failed[4]["comm_id"].startswith("local:")
    assert failed[4]["split_color"] == 7 and failed[4]["split_key"] == 9
    assert len({c["comm_id"] for c in failed[3:]}) == 2
    assert len(inits) == 5, inits
    assert [x["comm_id"] for x in inits] == [c["comm_id"] for c in failed]
    for x in inits:
        assert (x["state"], x["rc"], x["profiling_name"], x["is_p2p"]) == \
            ("failed", 1, "nccl:comm_init", False), x
        assert (x["collective_seq_id"], x["p2p_seq_id"], x["count"]) == (0, 0, 0), x
        assert x["dtype"] is None and x["reduce_op"] is None and x["root"] is None, x
        assert x["input_sizes"] == [] and x["output_sizes"] == [], x
        assert x["api_enter_ns"] < x["api_exit_ns"], x
        assert x["thread_id"] == d["pid"], x
    assert [x["record_id"] for x in inits] == sorted(x["record_id"] for x in inits)
    # successful inits add nothing: every other entry is a collective
    assert len(d["entries"]) == 5 + 12
