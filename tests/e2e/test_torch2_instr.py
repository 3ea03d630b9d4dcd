"""Tier 2: PyTorch's other instruments on the test venv's torch 2.x (CPU only):
  - `tptrace mem --torch-history` refused in one line without CUDA;
  - `tptrace fr --torch-dump` on a torch.distributed gloo job (tests/workloads/torch_gloo.py,
    two ranks, PyTorch's flight recorder on by TORCH_FR_BUFFER_SIZE): 2.13 has
    `_dump_fr_trace`, every backend's recorder; the pickle it wrote is read back with that
    torch and holds the rank's all_reduce calls;
  - `--torch-trace` refused in one line where TORCH_TRACE already has tracing on, and on
    Debian's torch 1.13 (no trace_structured)."""
import os
import subprocess

from lib import (ROOT, Workload, fresh_tmp_path, need_root, run_tptrace, tmp_path, venv_python)
from test_torch import need_torch, one_line, train
from test_torch2_compile import COMPILE, fresh_dir

TRAIN = os.path.join(ROOT, "tests", "workloads", "torch_train.py")
GLOO = os.path.join(ROOT, "tests", "workloads", "torch_gloo.py")
COUNT = 7


def start(argv, env=None):
    wl = Workload(argv, env=env, wait_ready=False)
    wl.wait_ready(180)
    return wl


def test_torch2_history_refused_without_cuda():
    need_root()
    py = venv_python()
    wl = start([py, TRAIN, "100000", tmp_path("torch2_hist.times")])
    try:
        wl.go()
        assert wl.out.wait_for(lambda l: l.startswith("step 10 "), 120)
        rc, _, err = run_tptrace(["mem", "-p", str(wl.pid), "--torch-history", "-d", "1",
                                  "-o", fresh_tmp_path("torch2_mem.json")], 120)
        assert wl.p.poll() is None, "the target died"
    finally:
        wl.kill()
    assert rc == 1, err
    line = one_line(err, f"tptrace: --torch-history: pid {wl.pid}: CUDA is not available to "
                         "this process's PyTorch 2.")
    assert "torch.cuda.is_available() is False" in line, line


def test_torch2_fr_dump_gloo():
    need_root()
    py = venv_python()
    port = 29400 + os.getpid() % 500
    env = {"TORCH_FR_BUFFER_SIZE": "2000"}
    ranks = [Workload([py, GLOO, str(r), "2", str(port), str(COUNT)], env=env, wait_ready=False)
             for r in range(2)]
    dump_dir = fresh_dir("torch2_fr_dumps")
    try:
        for wl in ranks:
            wl.wait_ready(180)
            assert wl.out.wait_for(lambda l: l.startswith("SUM "), 60) == "SUM 3.0"
        pid = ranks[0].pid
        rc, _, err = run_tptrace(["fr", "-p", str(pid), "--torch-dump", "-d", "1",
                                  "--dump-dir", dump_dir], 120)
        for wl in ranks:
            wl.p.stdin.write("quit\n")
            wl.p.stdin.flush()
        for wl in ranks:
            wl.wait_done(60)
            assert wl.finish(60) == 0, wl.err.text()
    finally:
        for wl in ranks:
            wl.kill()
    path = os.path.join(dump_dir, f"torch_fr.{pid}.pickle")
    assert rc == 0, err
    assert f"tptrace: --torch-dump: pid {pid}: wrote {path}" in err, err
    # read back by that torch (its pickle holds torch-free types only; checked the same way
    # PyTorch's fr_trace loads it)
    p = subprocess.run([py, "-c", "import pickle, sys, json; d = pickle.load(open(sys.argv[1], "
                        "'rb')); print(json.dumps({'version': d.get('version'), 'names': "
                        "[e.get('profiling_name') for e in d.get('entries', [])], 'keys': "
                        "sorted(d)}))", path], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import json
    d = json.loads(p.stdout)
    assert d["version"], d
    names = [n for n in d["names"] if n and "all_reduce" in n]
    assert len(names) >= COUNT, d


def test_torch2_trace_refused_when_on():
    need_root()
    py = venv_python()
    on = fresh_dir("torch2_trace_on")
    wl = start([py, COMPILE], env={"TORCH_TRACE": on,
                                   "TORCHINDUCTOR_CACHE_DIR": fresh_dir("torch2_on.cache")})
    try:
        # the handler opens its file on the first entry: one compile before tptrace comes
        wl.p.stdin.write("run 2 1\n")
        wl.p.stdin.flush()
        assert wl.out.wait_for(lambda l: l.startswith("RAN 2 1 "), 600), wl.err.text()
        rc, _, err = run_tptrace(["-p", str(wl.pid), "--torch-trace", fresh_dir("torch2_t2"),
                                  "-d", "1", "-o", fresh_tmp_path("torch2_on.json")], 120)
        assert wl.p.poll() is None, "the target died"
    finally:
        wl.kill()
    assert rc == 1, err
    one_line(err, f"tptrace: --torch-trace: pid {wl.pid}: torch's structured trace is already "
                  f"on in this process (TORCH_TRACE): its files are in {on}")


def test_torch_trace_refused_113():
    need_torch()
    wl = train(100000, tmp_path("torch_trace113.times"))
    try:
        wl.go()
        assert wl.out.wait_for(lambda l: l.startswith("step 10 "), 60)
        rc, _, err = run_tptrace(["-p", str(wl.pid), "--torch-trace", fresh_dir("t113"),
                                  "-d", "1", "-o", fresh_tmp_path("torch_trace113.json")], 60)
        assert wl.p.poll() is None and wl.err.text() == "", wl.err.text()
    finally:
        wl.kill()
    assert rc == 1, err
    one_line(err, f"tptrace: --torch-trace: pid {wl.pid}: torch._logging's structured trace "
                  "(trace_structured, TORCH_TRACE) is absent in PyTorch 1.13")


def test_torch_trace_bad_input():
    rc, _, err = run_tptrace(["-p", "1", "--torch-trace", ""])
    assert rc == 2 and "invalid --torch-trace '' (a directory)" in err, err
