"""Tier 2 on the real PyTorch 2.x of the test venv (tests/venv/): tptrace -p on a torch 2.x
process finds the CUDA runtime of torch's wheel under site-packages/nvidia/ and decodes its
calls' arguments exactly (ctypes calls into that very library, tests/workloads/torch2_cudart.py)."""
import json
import os
import pickle
import shutil
import socket
import subprocess

from lib import (OUT, ROOT, Skip, Tracer, Workload, calls, check_valid_trace, fresh_tmp_path,
                 need_root, run_tptrace, tmp_path, trace_workload, venv_python)

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


GLOO_HANG = os.path.join(ROOT, "tests", "workloads", "torch2_gloo_hang.py")
FR = os.path.join(ROOT, "tptrace-fr")
FR_DATA = os.path.join(ROOT, "tests", "tools", "data")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_hang(name, world, culprit, steps, extra=()):
    """A gloo job with PyTorch's flight recorder on, hung because rank culprit skipped the
    last all_reduce; every rank's own dump (pickle) in a fresh directory, returned."""
    py = venv_python()
    out = tmp_path(name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world), TORCH_FR_BUFFER_SIZE="200")
    ranks = []
    try:
        for r in range(world):
            ranks.append(Workload([py, GLOO_HANG, out, str(culprit), str(steps)] + list(extra),
                                  env=dict(env, RANK=str(r)), wait_ready=False))
        for w in ranks:
            w.wait_ready(180)
        for w in ranks:
            w.go()
        # each rank is where the hang leaves it: in the last all_reduce, or past it (culprit)
        for r, w in enumerate(ranks):
            want = "SKIPPED" if r == culprit else "SENT"
            assert w.out.wait_for(lambda l: l == want, 180), (r, w.out.text(), w.err.text())
        for w in ranks:
            w.go()
        for r, w in enumerate(ranks):
            assert w.out.wait_for(lambda l: l == "DUMPED", 120), (r, w.err.text())
    finally:
        for w in ranks:
            w.kill()
    return out


def torch_analyzer(dump_dir, prefix):
    """PyTorch's own analyzer (torch.distributed.flight_recorder.fr_trace): (rc, output)."""
    p = subprocess.run([venv_python(), "-m", "torch.distributed.flight_recorder.fr_trace",
                        dump_dir, "-p", prefix], capture_output=True, text=True, timeout=300,
                       cwd=OUT)
    return p.returncode, p.stdout + p.stderr


def torch_missing(output):
    """{seq: missing ranks} from fr_trace's "Not all ranks joining collective" blocks."""
    found, seq = {}, None
    for line in output.splitlines():
        if line.startswith("Not all ranks joining collective, sequence number:"):
            seq = int(line.rsplit(":", 1)[1])
        elif line.startswith("missing ranks:") and seq is not None:
            found[seq] = sorted(int(x) for x in line.split(":", 1)[1].strip(" {}").split(","))
            seq = None
    return found


def fr_first(dump_dir):
    p = subprocess.run([FR, "--json", dump_dir], capture_output=True, text=True, timeout=120)
    return json.loads(p.stdout)["verdicts"]


def test_torch2_gloo_fr_dumps_tptrace_fr():
    """PyTorch's own flight-recorder dumps of a real gloo job (torch 2.13 records gloo
    collectives, state always "scheduled") that hangs because rank 2 of 4 skipped the last
    all_reduce: tptrace-fr names rank 2 missing from that all_reduce (seq 5 of the default
    group), with the ranks that wait in it. Its pg_config is unusable (the name "" for every
    group, "[]" for ranks in a second group), so the default group's ranks come from the
    entries' "default_pg". PyTorch's own analyzer cannot read these dumps at all (KeyError on
    the pg name): the README says so."""
    d = gloo_hang("torch2-gloo-fr", 4, 2, 5)
    with open(os.path.join(d, "rank_0"), "rb") as f:
        raw = pickle.load(f)
    assert list(raw["pg_config"]) == [""], raw["pg_config"]
    assert {e["state"] for e in raw["entries"]} == {"scheduled"}
    v = fr_first(d)
    assert [(x["rule"], x["ranks"], x["comm"], x["seq"], x["op"]) for x in v[:1]] == \
        [("missing_rank", [2], "0", 5, "all_reduce")], v
    assert "ranks 0,1,3 are waiting in it" in v[0]["detail"], v[0]["detail"]
    rc, out = torch_analyzer(d, "rank_")
    assert rc != 0 and "KeyError" in out, (rc, out[-2000:])


def test_torch2_gloo_fr_both_analyzers_agree():
    """The same hang on the default group only, with pg_config given the name its entries use
    ("" -> "0", the one repair PyTorch's analyzer needs): PyTorch's analyzer and tptrace-fr
    both name rank 2 as missing from all_reduce seq 5, and nothing else."""
    d = gloo_hang("torch2-gloo-fr1", 4, 2, 5, ["--no-subgroup"])
    fixed = d + "-named"
    shutil.rmtree(fixed, ignore_errors=True)
    os.makedirs(fixed)
    for name in os.listdir(d):
        with open(os.path.join(d, name), "rb") as f:
            dump = pickle.load(f)
        assert list(dump["pg_config"]) == [""], dump["pg_config"]
        dump["pg_config"] = {"0": dict(dump["pg_config"][""], name="0")}
        with open(os.path.join(fixed, name), "wb") as f:
            pickle.dump(dump, f)
    rc, out = torch_analyzer(fixed, "rank_")
    assert rc == 0, out[-2000:]
    assert torch_missing(out) == {5: [2]}, out[-3000:]
    v = fr_first(fixed)
    assert [(x["rule"], x["ranks"], x["seq"]) for x in v] == [("missing_rank", [2], 5)], v
    assert [(x["rule"], x["ranks"], x["seq"]) for x in fr_first(d)] == \
        [("missing_rank", [2], 5)]


def test_torch2_export_read_by_pytorch_analyzer():
    """tptrace dumps exported with --export-torch: PyTorch's analyzer finds the culprit
    tptrace-fr names (a skipped all_reduce; a size mismatch)."""
    for name, rule, rank, seq in (("skip", "missing_rank", 5, 16),
                                  ("size", "size_mismatch", 2, 16)):
        out = tmp_path("torch2-export-" + name)
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([FR, "--export-torch", out, os.path.join(FR_DATA, name)], check=True,
                       capture_output=True)
        v = fr_first(os.path.join(FR_DATA, name))
        assert (v[0]["rule"], v[0]["ranks"], v[0]["seq"]) == (rule, [rank], seq), v[0]
        rc, text = torch_analyzer(out, "nccl_trace_rank_")
        assert rc == 0, text[-2000:]
        if rule == "missing_rank":
            assert torch_missing(text) == {seq: [rank]}, text[-3000:]
        else:
            assert f"Collective sequence number: {seq} has errors" in text, text[-3000:]
            assert f"Culprit rank {rank}; Error type: SIZE_OR_SYNTAX_MISMATCH" in text, text


def test_torch2_wheel_ships_no_memoryviz():
    """README Limits: no torch wheel ships torch/utils/viz/MemoryViz.js (every 2.x release on
    PyPI checked), so memory_viz snapshots are not drawn in a browser here; torch's plot pages
    import it from a CDN. Holds for the pinned torch: the day it ships the file (or its pages
    stop importing it from the CDN), this fails, and the snapshots are to be driven through it
    in headless Chromium."""
    py = venv_python()
    p = subprocess.run([py, "-c", """
import glob, json, os, torch, torch.cuda._memory_viz as mv
d = os.path.dirname(torch.__file__)
rec = glob.glob(os.path.join(os.path.dirname(d), "torch-*.dist-info", "RECORD"))
src = open(mv.__file__).read()
print(json.dumps({"version": torch.__version__, "records": len(rec),
                  "viz": sorted(l.split(",")[0] for l in open(rec[0]) if "/utils/viz/" in l),
                  "on_disk": os.path.exists(os.path.join(d, "utils", "viz", "MemoryViz.js")),
                  "cdn": "cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js"
                         in src}))
"""], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert r["records"] == 1 and r["viz"], r
    ships = r["on_disk"] or any(v.endswith("/MemoryViz.js") for v in r["viz"])
    assert not ships and r["cdn"], \
        f"torch {r['version']} ships MemoryViz.js or its pages no longer load it from the CDN: " \
        f"drive the snapshots through it in headless Chromium and update README Limits ({r})"
