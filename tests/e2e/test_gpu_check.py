"""Smoke: tests/gpu/check.sh, the GPU machine's script, on a machine without a GPU. It must end
within seconds with a FAIL "no GPU" line, the summary and a non-zero exit; its watchdog (a tiny
CHECK_LIMIT_S against CHECK_SELFTEST=hang, a step that never ends with a stand-in job and
tracer) must print its FAIL line and the summary, exit 124 and leave no process behind."""
import os
import shutil
import subprocess
import time

from lib import ROOT, Skip, need_root

CHECK = os.path.join(ROOT, "tests", "gpu", "check.sh")


def run_check(env=None, timeout=20):
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.monotonic()
    # a session of its own: when the watchdog is broken, everything it left is found by sid
    p = subprocess.Popen(["bash", CHECK], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=e, cwd=ROOT, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in session_pids(p.pid):
            os.kill(pid, 9)
        p.communicate()
        raise AssertionError(f"check.sh still running after {timeout} s")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), time.monotonic() - t0


def session_pids(sid):
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[4]) == sid:
                    out.append(int(d))
        except (ValueError, OSError):
            pass
    return out


def alive(pid):
    """pid exists and is not a zombie waiting for its reaper"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_gpu_check_static():
    p = subprocess.run(["bash", "-n", CHECK], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    if not shutil.which("shellcheck"):
        raise Skip("shellcheck not installed (make deps)")
    p = subprocess.run(["shellcheck", CHECK], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout


def test_gpu_check_no_gpu():
    need_root()
    if subprocess.run("nvidia-smi -L", shell=True, capture_output=True).returncode == 0:
        raise Skip("this machine has a GPU: run tests/gpu/check.sh itself")
    p, secs = run_check()
    lines = p.stdout.splitlines()
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert lines == ["FAIL no GPU: nvidia-smi -L failed (no NVIDIA driver or device on this "
                     "machine)", "summary: 0 passed, 1 failed, 0 warnings"], p.stdout
    assert secs < 10, secs


def test_gpu_check_watchdog():
    need_root()
    p, secs = run_check({"CHECK_SELFTEST": "hang", "CHECK_LIMIT_S": "2"})
    lines = p.stdout.splitlines()
    assert p.returncode == 124, (p.returncode, p.stdout, p.stderr)
    assert len(lines) == 3 and lines[0].startswith("INFO selftest pids: "), p.stdout
    assert lines[1:] == ["FAIL check.sh: time limit of 2 s reached: stopping tptrace and the job",
                         "summary: 0 passed, 1 failed, 0 warnings"], p.stdout
    # the stand-in tracer ignores SIGINT, so the watchdog waited 5 s for it, then SIGTERM
    assert 2 <= secs < 15, secs
    pids = [int(x) for x in lines[0].split(": ", 1)[1].split()]
    assert len(pids) == 4, pids          # script, body, stand-in job, stand-in tracer (timeout)
    deadline = time.monotonic() + 3
    while any(alive(x) for x in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [x for x in pids if alive(x)], [x for x in pids if alive(x)]
