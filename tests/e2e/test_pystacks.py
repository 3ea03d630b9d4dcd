"""The BPF stack walker (bpf/ustack.bpf.h) and its resolution (user/core/ustack.c) on real CPython
3.9-3.13 processes, without the decoder: .output/e2e/ustack_dump loads tptrace's own BPF object
with --py-stacks capture, probes cudaStreamSynchronize of the real (or simulated) libcudart,
and prints every call's resolved stack. tests/workloads/py_stacks.py makes each call with a
distinct stream value and writes down, on the same line, the stack CPython itself sees; every
frame of every chain must match exactly."""
import json
import os
import subprocess
import time

from lib import E2E_BIN, OUT, ROOT, SIM_LIB, Skip, Workload, python_for

DUMP = os.path.join(E2E_BIN, "ustack_dump")
PY_STACKS = os.path.join(ROOT, "tests", "workloads", "py_stacks.py")
CUDART = "/usr/local/cuda/lib64/libcudart.so.13"
SIM_CUDART = os.path.join(SIM_LIB, "libcudart.so.13")
PYENV = "/root/.pyenv/versions"
DEBIAN_PY = "/usr/bin/python3"


def interpreter(path):
    return python_for(path, DUMP)


def pyenv(version):
    return interpreter(os.path.join(PYENV, version, "bin", "python3"))


def run(py, lib=CUDART, scenarios=(), dump_args=(), secs=20):
    """Runs the workload under ustack_dump; returns (head, {arg0: record}, summary, expected)."""
    if not os.path.exists(lib):
        raise Skip(f"{lib} absent")
    exp_path = os.path.join(OUT, f"pystacks-{os.getpid()}-{time.monotonic_ns()}.json")
    wl = Workload([py, PY_STACKS, lib, exp_path, *scenarios])
    dump = subprocess.Popen([DUMP, str(wl.pid), lib, "cudaStreamSynchronize", str(secs),
                             *dump_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        head = json.loads(dump.stdout.readline())
        ready = dump.stdout.readline().strip()
        assert ready == "READY", (ready, dump.stderr.read())
        wl.go()
        wl.wait_done()
        # the target holds after DONE; the dumper drains the ring once more at SIGINT, so it
        # reads while the target lives
        dump.send_signal(2)
        out, err = dump.communicate(timeout=60)
        assert dump.returncode == 0, err
    finally:
        if dump.poll() is None:
            dump.kill()
        wl.kill()
    lines = [json.loads(l) for l in out.splitlines()]
    summary = lines[-1]
    recs = {}
    for r in lines[:-1]:
        recs.setdefault(r["arg0"], r)
    expected = {"calls": {}, "cthread": []}
    if os.path.exists(exp_path):
        with open(exp_path) as f:
            expected = json.load(f)
        os.unlink(exp_path)
    return head, recs, summary, expected


def check_exact(py, lib=CUDART):
    head, recs, summary, exp = run(py, lib)
    want = subprocess.run([py, "-c", "import platform; print(platform.python_version())"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    assert head == {"python": want}, head
    assert len(exp["calls"]) == 11, exp
    for k, frames in exp["calls"].items():
        r = recs.get(int(k))
        assert r, f"call {k} not recorded: {sorted(recs)}"
        assert r["status"] == "stack", r
        assert r["py"] == frames, f"call {k}:\n got {r['py']}\n want {frames}"
        assert r["flags"] == 0, r
    # the thread started in C has no Python thread state: marked, no frames
    for k in exp["cthread"]:
        assert recs[k]["status"] == "no Python thread state", recs[k]
        assert "py" not in recs[k], recs[k]
    c = summary["counters"]
    assert c["captured"] == 11 and c["nopy"] == 1 and c["lost"] == 0, summary
    # one distinct stack per call site: nested, method, lambda, generator (2 calls, one
    # site), threads (6 calls, one site); 3.12+ may store one twice when its C-stack shim
    # count differs, never fewer
    assert 5 <= c["new"] <= 6, summary
    assert summary["unresolved_frames"] == 0, summary


def test_debian_3_11_real_cudart():
    check_exact(interpreter(DEBIAN_PY))


def test_debian_3_11_sim_cudart():
    check_exact(interpreter(DEBIAN_PY), SIM_CUDART)


def test_pyenv_3_9():
    check_exact(pyenv("3.9.18"))


def test_pyenv_3_10():
    check_exact(pyenv("3.10.13"))


def test_pyenv_3_11():
    check_exact(pyenv("3.11.7"))


def test_pyenv_3_12():
    check_exact(pyenv("3.12.1"))


def test_pyenv_3_13():
    check_exact(pyenv("3.13.0"))


def test_deep_stack_cut_at_the_depth_limit():
    """A 100-frame recursion: the innermost 64 frames exact, the stack marked cut."""
    py = interpreter(DEBIAN_PY)
    head, recs, summary, exp = run(py, scenarios=["deep"])
    (k, frames), = exp["calls"].items()
    r = recs[int(k)]
    assert len(frames) > 100, len(frames)
    assert len(r["py"]) == 64, len(r["py"])
    assert r["py"] == frames[:64]
    assert r["flags"] & 1, r  # TP_USTACK_PY_TRUNCATED


def check_churn(late, scenario="churn", n=300):
    """Code objects made, called once and freed, each from its own file name: their
    addresses are reused. Every frame comes out right or unresolved, never as another
    generation's function or line."""
    py = interpreter(DEBIAN_PY)
    head, recs, summary, exp = run(py, scenarios=[scenario],
                                   dump_args=["--late"] if late else [])
    right = unresolved = line_unknown = 0
    wrong = []
    for k, frames in exp["calls"].items():
        got = recs[int(k)]["py"][0]
        if got[0] is None:
            unresolved += 1
        elif got == frames[0]:
            right += 1
        elif got[2] == 0 and got[:2] == frames[0][:2] and got[3:] == frames[0][3:]:
            # the right function whose line could not be computed (0: unknown, never
            # printed as a line; seen once in ~300 in a CI run): not wrong
            line_unknown += 1
        else:
            wrong.append((k, got, frames[0]))
    assert not wrong, wrong[:5]
    assert line_unknown <= n // 50, line_unknown
    assert right + unresolved + line_unknown == n
    codes = {recs[int(k)]["code"] for k in exp["calls"]}
    assert len(codes) < n, "no code object address was reused: the case was not exercised"
    return right, unresolved


def test_freed_code_objects_never_wrong():
    right, unresolved = check_churn(late=False)
    print(f"churn, resolved at once: {right} right, {unresolved} unresolved")


def test_freed_code_objects_never_wrong_late():
    right, unresolved = check_churn(late=True)
    assert unresolved > 0, "resolved after every code object was freed: all must be unresolved"
    print(f"churn, resolved late: {right} right, {unresolved} unresolved")


def test_freed_code_objects_slowly_all_right():
    """20 generations 0.1 s apart: each is read while it lives, and the next one at the same
    address gets a stack id of its own (the deallocator probe moved code_gen): all right."""
    right, unresolved = check_churn(late=False, scenario="slowchurn", n=20)
    assert right == 20, (right, unresolved)


def test_native_frames_stop_where_frame_pointers_end():
    """--native: the probed function, the return into its caller, then the frame-pointer
    chain; ctypes calls through libffi, which keeps no frame pointer: the chain stops there
    and says so. The Python frames stay exact."""
    py = interpreter(DEBIAN_PY)
    head, recs, summary, exp = run(py, scenarios=["nested"], dump_args=["--native"])
    (k, frames), = exp["calls"].items()
    r = recs[int(k)]
    assert r["py"] == frames
    nat = r["native"]
    assert nat[0][0] == "cudaStreamSynchronize" and "libcudart.so.13" in nat[0][1], nat
    assert len(nat) >= 2 and "libffi" in (nat[1][1] or ""), nat
    assert "frame pointer" in r["native_stop"] and "libffi" in r["native_stop"], r


def test_unsupported_version():
    py = pyenv("3.8.18")
    head, recs, summary, exp = run(py, scenarios=["nested"])
    assert head == {"python": None, "why": "Python 3.8.18: unsupported (3.9-3.13)"}, head
    assert recs and all(r["status"] == "not captured" and "py" not in r for r in recs.values())
