"""Tier 2: the snapshot engine (user/stacks/stacks.h) on live processes, through its test driver
tests/e2e/stacks_dump.c (one stacks__json object per pid and line). Workloads:
tests/workloads/stack_app.c (known stacks, -O2 -fomit-frame-pointer), the simulated NCCL /
CUDA stack (nccl_rank) and a static-cudart nvcc program."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from lib import E2E_BIN, ROOT, WL, Workload, need_root, tmp_path, wait_blocked, wait_in_syscall, wait_until

DUMP = os.path.join(E2E_BIN, "stacks_dump")
APP = os.path.join(WL, "stack_app")


def need_ptrace():
    if os.geteuid() != 0:
        need_root()


def snapshot(pids, *args, env=None, timeout=60):
    if isinstance(pids, int):
        pids = [pids]
    p = subprocess.run([DUMP] + list(args) + [str(x) for x in pids], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, p.stderr
    snaps = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(snaps) == len(pids), p.stdout
    return snaps if len(snaps) > 1 else snaps[0]


def thread(snap, tid):
    for t in snap["threads"]:
        if t["tid"] == tid:
            return t
    raise AssertionError(f"no thread {tid} in {[t['tid'] for t in snap['threads']]}")


def by_name(snap, func):
    """Threads whose native frames contain func."""
    return [t for t in snap["threads"] if any(f["func"] == func for f in t["frames"])]


def funcs(t):
    return [f["func"] for f in t["frames"]]


def states(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                out[int(tid)] = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            pass
    return out


def start_app(*args, env=None):
    w = Workload([APP] + list(args), env=env)
    return w


def stop_app(w):
    # a vfork child of --dstate outlives its parent unless killed
    subprocess.run(["pkill", "-KILL", "-P", str(w.pid)], stderr=subprocess.DEVNULL)
    w.kill()


def test_chain_progress_dstate():
    """CFI unwinding through -O2 -fomit-frame-pointer code: the known chain in order; the
    spinning thread progresses, the parked ones do not; the D-state thread (vfork parent) is
    reported with its kernel stack within the stop timeout and never stopped; afterwards every
    thread runs on and the main thread still answers."""
    need_ptrace()
    w = start_app("--threads", "4", "--spin", "--dstate", "30")
    try:
        # the D thread stays in D until its vfork child ends (30 s): the snapshot returns
        # without waiting for it (shown below: the thread is still in D afterwards)
        wait_until(lambda: "D" in states(w.pid).values(), 30, "the vfork parent in D state")
        s = snapshot(w.pid, "--samples", "3", "--interval", "100", "--timeout", "100")
        assert s["samples"] == 3 and s["ptrace_error"] is None and not s["exited"], s
        main = thread(s, w.pid)
        assert main["main"] and main["issuing"], main
        f = funcs(main)
        i = f.index("level_c")
        assert f[i:i + 4] == ["level_c", "level_b", "level_a", "main"], f
        assert re.match(r"(__libc_|__GI___libc_|__)?read$", f[i - 1]), f
        assert main["where"] == "idle" and main["progress"] == "none", main
        assert main["state"] == "S" and main["kernel_stack"], main
        app_frames = [x for x in main["frames"] if x["module"] == APP]
        assert app_frames and all(x["build_id"] and x["func_off"].startswith("0x") for x in app_frames)
        parked = by_name(s, "idle_park")
        assert len(parked) == 4, [funcs(t) for t in s["threads"]]
        for t in parked:
            assert t["where"] == "idle" and t["progress"] == "none", t
        spin = by_name(s, "spin_loop")
        assert len(spin) == 1 and spin[0]["progress"] == "yes", spin
        assert spin[0]["where"] == "running", spin[0]
        dst = [t for t in s["threads"] if t["state"] == "D"]
        assert len(dst) == 1, [(t["tid"], t["state"]) for t in s["threads"]]
        d = dst[0]
        assert d["kernel_stack"] and any("vfork" in k or "clone" in k for k in d["kernel_stack"]), d
        assert d["frames"] == [] and "did not stop within 100 ms" in d["unwind_error"], d
        assert d["progress"] == "unknown", d
        # a stop waits the timeout for the D thread (a lower bound), and not for it to leave D:
        # the snapshot came back while it is still in D (below). How long a stop lasts is a
        # figure of make bench (stacks_stop_ms_64threads), not a bound here
        assert s["stopped_ms_max"] >= 90, s["stopped_ms_max"]
        st = states(w.pid)
        assert not any(v in "tT" for v in st.values()), st
        assert st[d["tid"]] == "D", st
        w.go()
        w.wait_done(10)
    finally:
        stop_app(w)


def eu_stack_main(pid):
    """Frames of the main thread as eu-stack (elfutils) prints them: (pc, name)."""
    p = subprocess.run(["eu-stack", "-p", str(pid)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    frames, cur = [], None
    for line in p.stdout.splitlines():
        m = re.match(r"TID (\d+):", line)
        if m:
            cur = int(m.group(1))
            continue
        m = re.match(r"#\d+\s+0x([0-9a-f]+)\s*(\S*)", line)
        if m and cur == pid:
            frames.append((int(m.group(1), 16), m.group(2).split("@")[0] or None))
    return frames


def test_matches_eu_stack():
    """Our main-thread frames are eu-stack's: same pcs (ours are return address - 1 for
    callers, as eu-stack looks them up) and names (libc's local functions too, from its
    separate debug file)."""
    need_ptrace()
    if not shutil.which("eu-stack"):
        raise AssertionError("eu-stack missing: make deps installs elfutils")
    w = start_app("--threads", "2")
    try:
        s = snapshot(w.pid)
        ours = [(int(f["pc"], 16) + (1 if i else 0), f["func"])
                for i, f in enumerate(thread(s, w.pid)["frames"])]
        theirs = eu_stack_main(w.pid)
        # glibc aliases one function under several names (read, __read, __libc_read): the
        # same symbol may be named by another alias, never another function
        def plain(n):
            return re.sub(r"^(_+|GI_+|libc_)*", "", n) if n else n
        assert theirs and [(pc, plain(n)) for pc, n in ours] == \
            [(pc, plain(n)) for pc, n in theirs], f"ours {ours}\neu-stack {theirs}"
        assert all(n for _, n in ours), ours
    finally:
        stop_app(w)


def test_output_identical():
    """The target's stdout is byte-identical with and without 5 snapshots in its middle."""
    need_ptrace()

    def run(snaps):
        w = start_app("--work", "150", "--threads", "2")
        try:
            w.go()  # main returns from level_c; the work thread prints
            for _ in range(snaps):
                snapshot(w.pid, "--samples", "1")
                time.sleep(0.03)
            w.wait_done(30)
            assert w.finish() == 0
            return [l for l in w.out.lines if not l.startswith("READY")]
        finally:
            stop_app(w)

    plain = run(0)
    snapped = run(5)
    assert len(plain) == 151 and plain == snapped


def test_kill9_mid_snapshot_restores():
    """kill -9 of the snapshotting process while every thread is stopped: the kernel detaches
    them (PTRACE_SEIZE), none stays in t/T, and the spinning thread runs on."""
    need_ptrace()
    w = start_app("--threads", "3", "--spin")
    try:
        # held until killed (600 s): the kill lands while every thread is stopped
        env = dict(os.environ, TPTRACE_TEST_SNAPSHOT_HOLD_MS="600000")
        d = subprocess.Popen([DUMP, str(w.pid)], stdout=subprocess.DEVNULL, env=env)
        wait_until(lambda: (lambda st: st and all(v == "t" for v in st.values()))(states(w.pid)),
                   60, "every thread stopped by the snapshot")
        d.send_signal(signal.SIGKILL)
        d.wait()    # reaped: the kernel detached its tracees when it exited
        st = states(w.pid)
        assert not any(v in "tT" for v in st.values()), st
        spin = [tid for tid, v in st.items() if v == "R"]
        assert spin, st
        w.go()
        w.wait_done(10)
    finally:
        stop_app(w)


def test_other_tracer():
    """strace already attached to the main thread: one line in ptrace_error naming it; the
    /proc part (state, wchan, kernel stack) is still there."""
    need_ptrace()
    if not shutil.which("strace"):
        raise AssertionError("strace missing: make deps installs it")
    w = start_app("--threads", "1")
    tr = subprocess.Popen(["strace", "-p", str(w.pid), "-o", "/dev/null"],
                          stderr=subprocess.PIPE, text=True)
    try:
        def traced():
            with open(f"/proc/{w.pid}/status") as f:
                return re.search(r"TracerPid:\s+[1-9]", f.read())
        wait_until(traced, 60, "strace to attach")
        s = snapshot(w.pid)
        err = s["ptrace_error"]
        assert err == f"already traced by pid {tr.pid} (strace)", err
        main = thread(s, w.pid)
        assert main["state"] and main["kernel_stack"] and main["frames"] == [], main
        assert main["unwind_error"] == err, main
        # the thread strace does not trace is unwound as usual
        other = [t for t in s["threads"] if t["tid"] != w.pid][0]
        assert "idle_park" in funcs(other), other
    finally:
        tr.kill()
        tr.wait()
        stop_app(w)


def test_stripped_binary():
    """A stripped executable: its frames have no name (never invented), but module, build-id
    and the same module_off as the unstripped build's level_c/b/a."""
    need_ptrace()
    stripped = os.path.join(WL, "stack_app_stripped")
    w1 = start_app()
    w2 = Workload([stripped])
    try:
        ref = [f for f in thread(snapshot(w1.pid), w1.pid)["frames"] if f["module"] == APP]
        got = [f for f in thread(snapshot(w2.pid), w2.pid)["frames"] if f["module"] == stripped]
        assert [f["module_off"] for f in got] == [f["module_off"] for f in ref], (ref, got)
        assert all(f["func"] is None and f["func_off"] is None for f in got), got
        assert all(re.fullmatch(r"[0-9a-f]{40}", f["build_id"]) for f in got), got
        assert got[0]["build_id"] == ref[0]["build_id"]
    finally:
        stop_app(w1)
        stop_app(w2)


def test_exit_mid_snapshot():
    """The process exits between samples: exited, what was read kept, no error exit."""
    need_ptrace()
    w = start_app("--threads", "2", "--exit-after", "300")
    try:
        s = snapshot(w.pid, "--samples", "5", "--interval", "200")
        assert s["exited"] and 1 <= s["samples"] < 5, s
        assert len(s["threads"]) == 3 and "level_c" not in funcs(thread(s, w.pid)), s
        assert len(by_name(s, "idle_park")) == 2
    finally:
        stop_app(w)


def test_zombie():
    """A zombie: its one thread, state Z, said so; no ptrace error, no error exit."""
    need_ptrace()
    w = start_app("--zombie")
    try:
        line = w.out.wait_for(lambda l: l.startswith("# zombie"), 10)
        zpid = int(line.split()[2])
        s = snapshot(zpid, "--samples", "2", "--interval", "50")
        assert len(s["threads"]) == 1, s
        t = s["threads"][0]
        assert t["state"] == "Z" and "zombie" in t["unwind_error"] and t["frames"] == [], t
        assert s["ptrace_error"] is None and t["where"] == "unknown", s
    finally:
        stop_app(w)


def test_gone_pid():
    """A pid that does not exist: one line, exit 1."""
    p = subprocess.run([DUMP, "999999999"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 1 and p.stderr.strip() == "stacks_dump: pid 999999999: No such process", p.stderr


def nccl_ranks(nranks, started, scenario="healthy", extra=()):
    d = tmp_path("stacks-nccl")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ws = []
    for r in started:
        argv = [os.path.join(WL, "nccl_rank"), "--rank", str(r), "--nranks", str(nranks),
                "--id-file", os.path.join(d, "nccl.id"), "--steps", "2", "--scenario", scenario,
                "--init-after-go"] + list(extra)
        ws.append(Workload(argv, env={"RANK": str(r), "WORLD_SIZE": str(nranks)}))
    return ws


def test_sim_nccl_blocked_in_nccl():
    """A rank blocked inside an NCCL call (nccl_rank's ncclCommInitRankConfig waiting for a
    missing rank) is where nccl, api ncclCommInitRankConfig (the sim's pncclCommInitRankConfig
    alias named as the API), and is the issuing thread; RANK comes from its env."""
    need_ptrace()
    ws = nccl_ranks(2, [0])
    try:
        ws[0].go()
        # after GO its only wait is the init's, for the missing rank (a futex it re-arms
        # every 100 ms)
        wait_in_syscall(ws[0].pid, "futex", tid=ws[0].pid)
        s = snapshot(ws[0].pid, "--samples", "2", "--interval", "100")
        main = thread(s, ws[0].pid)
        assert main["where"] == "nccl" and main["api"] == "ncclCommInitRankConfig", main
        assert main["issuing"] and s["rank"] == 0 and s["world_size"] == 2, s
        assert any(f["func"] in ("ncclCommInitRankConfig", "pncclCommInitRankConfig") and
                   f["module"].endswith("libnccl.so.2") for f in main["frames"]), funcs(main)
    finally:
        for w in ws:
            w.kill()


def test_sim_cuda_stuck_sync():
    """The stuck scenario: the culprit blocks inside cudaStreamSynchronize of the simulated
    libcudart; the other rank waits for it in its own cudaStreamSynchronize (the collective's
    kernel never completes). Both: where cuda, api cudaStreamSynchronize, no progress."""
    need_ptrace()
    ws = nccl_ranks(2, [0, 1], "stuck", ["--fault-step", "0"])
    try:
        for w in ws:
            w.go()
        for w in ws:    # in the sync that never returns: the same futex, no wake-up
            wait_blocked(w.pid, w.pid, "futex")
        snaps = snapshot([w.pid for w in ws], "--samples", "3", "--interval", "100")
        for w, s in zip(ws, snaps):
            main = thread(s, w.pid)
            assert main["where"] == "cuda" and main["api"] == "cudaStreamSynchronize", main
            assert main["issuing"] and main["progress"] == "none", main
            issuing = [t for t in s["threads"] if t["issuing"]]
            assert len(issuing) == 1
    finally:
        for w in ws:
            w.kill()


def test_static_cudart_nvcc():
    """nvcc's static cudart: its entry points are symbols of the executable. The program's
    first runtime call (cudaStreamCreate) blocks in cudart's lazy init loading a libcuda.so.1
    that never finishes loading: where cuda, api cudaStreamCreate."""
    need_ptrace()
    exe = os.path.join(WL, "nvcc_static")
    if not os.path.exists(exe):
        from lib import Skip
        raise Skip("nvcc_static not built (no nvcc)")
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(WL, "blockcuda"))
    p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    try:
        end = time.time() + 60     # a failsafe: the wait is for the blocked load
        s = None
        while time.time() < end:
            s = snapshot(p.pid)
            if thread(s, p.pid)["where"] == "cuda":
                break
            time.sleep(0.05)
        main = thread(s, p.pid)
        assert main["where"] == "cuda" and main["api"] == "cudaStreamCreate", funcs(main)
        assert any(f["module"] == exe and f["func"] == "cudaStreamCreate" for f in main["frames"])
    finally:
        p.kill()
        p.wait()


PY_HANG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "workloads", "py_hang.py")
PY_CUDART = os.path.join(os.path.dirname(PY_HANG), "py_cudart.py")


def python_merged(py):
    need_ptrace()
    if not os.path.exists(py):
        from lib import Skip
        raise Skip(f"{py} not installed")
    w = Workload([py, PY_HANG])
    try:
        s = snapshot(w.pid, "--samples", "2", "--interval", "100")
        assert s["python"] and s["python"].startswith("3.") and s["python_error"] is None, s
        main = thread(s, w.pid)
        assert main["python"] and main["issuing"] and main["where"] == "python", main
        fr = main["frames"]
        kinds = [f["kind"] for f in fr]
        i = kinds.index("python")
        names = [f["func"] for f in fr if f["kind"] == "python"]
        assert names == ["inner", "Waiter.meth", "middle", "descend", "outer", "<module>"] or \
            names == ["inner", "meth", "middle", "descend", "outer", "<module>"], names
        # each group sits just inside the eval-loop frame that runs it (3.11+: one activation
        # for all six; before: one per Python call), after native frames
        assert i > 0, kinds
        for k in range(i, len(fr) - 1):
            if fr[k]["kind"] == "python" and fr[k + 1]["kind"] == "native":
                assert fr[k + 1]["func"].startswith("_PyEval_EvalFrame"), fr[k + 1]
        if tuple(int(x) for x in s["python"].split(".")[:2]) >= (3, 11):
            assert kinds[i:i + 6] == ["python"] * 6, kinds
        assert fr[i]["file"] == PY_HANG and fr[i]["line"] > 0, fr[i]
        assert main["unwind_error"] is None, main
        side = [t for t in s["threads"] if t["tid"] != w.pid][0]
        sn = [f["func"] for f in side["frames"] if f["kind"] == "python"]
        assert sn[:2] == ["ticker", "side_worker"], sn
        # every Python group is followed by an eval frame
        for k, f in enumerate(side["frames"][:-1]):
            if f["kind"] == "python" and side["frames"][k + 1]["kind"] == "native":
                assert side["frames"][k + 1]["func"].startswith("_PyEval_EvalFrame"), side
    finally:
        w.kill()


PY_POLL = os.path.join(ROOT, "tests", "workloads", "py_poll.py")
# x86-64: nanosleep, clock_nanosleep, select, pselect6 (glibc's select), futex
WAIT_SYSCALLS = {"35", "230", "23", "270", "202"}


def in_wait(pid, tid, timed):
    """tid sits in a wait syscall (with a timeout when timed) right now"""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall") as f:
            v = f.read().split()
    except OSError:
        return False
    if not v or v[0] not in WAIT_SYSCALLS:
        return False
    return not timed or v[0] != "202" or v[4] != "0x0"


def python_polling(py):
    need_ptrace()
    if not os.path.exists(py):
        from lib import Skip
        raise Skip(f"{py} not installed")
    w = Workload([py, PY_POLL])
    try:
        tids = {l.split()[1]: int(l.split()[2]) for l in w.out.text().splitlines()
                if l.startswith("TID ")}
        assert set(tids) == {"MainThread", "poller", "ticker", "sleeper"}, tids
        # the sleeper and the main thread in their one wait for good, before the first sample
        wait_until(lambda: in_wait(w.pid, tids["sleeper"], True) and
                   in_wait(w.pid, tids["MainThread"], False), 60, "threads in their waits")
        s = snapshot(w.pid, "--samples", "3", "--interval", "100")
        prog = {name: thread(s, tid)["progress"] for name, tid in tids.items()}
        # a loop of 10 ms waits returns and calls again between samples; a wait for good
        # stays the one call
        assert prog == {"poller": "yes", "ticker": "yes", "sleeper": "none", "MainThread": "none"}, prog
    finally:
        w.kill()


def test_python_polling_loop_progresses():
    """a thread looping on time.sleep(0.01) (or Event.wait(0.01)) shows the same stack at every
    sample, yet it is not stuck: progress "yes"; a thread in time.sleep(100000) stays "none"
    (Debian's 3.11: clock_nanosleep with an absolute deadline; 3.9: select)"""
    python_polling("/usr/bin/python3")
    python_polling("/root/.pyenv/versions/3.9.18/bin/python")


def test_python_debian_static():
    """Debian's python3 (libpython linked into the executable)."""
    python_merged("/usr/bin/python3")


def test_python_pyenv_39():
    python_merged("/root/.pyenv/versions/3.9.18/bin/python")


def test_python_pyenv_313():
    python_merged("/root/.pyenv/versions/3.13.0/bin/python")


def ctypes_case(lib, api, where, frame_func):
    """CPython calling a real library through ctypes in a loop (py_cudart.py; each call fails
    fast without a driver): a snapshot that lands inside the call says `where`, `api`, with a
    native frame in lib (named frame_func when given) and the Python callers merged in."""
    need_ptrace()
    if not os.path.exists(lib):
        from lib import Skip
        raise Skip(f"{lib} not installed")
    w = Workload(["/usr/bin/python3", PY_CUDART, lib, api])
    soname = os.path.basename(lib)
    try:
        # the call is a small share of each turn (a failed call returns a cached error at
        # once), and a stop lands where the kernel next returns to the thread: under load
        # sixty tries all met Python (CI), so try until one lands (60 s: a failsafe)
        seen = []
        deadline = time.time() + 60
        while time.time() < deadline:
            s = snapshot(w.pid)
            main = thread(s, w.pid)
            seen.append(main["where"])
            if main["where"] == where:
                break
        assert main["where"] == where and main["api"] == api, \
            f"{len(seen)} snapshots, none in {where}: {sorted(set(seen))}"
        assert any((f["module"] or "").endswith(soname) for f in main["frames"]
                   if f["kind"] == "native" and (frame_func is None or f["func"] == frame_func)), main
        assert [f["func"] for f in main["frames"] if f["kind"] == "python"] == \
            ["spin", "main", "<module>"], main
        assert set(seen) <= {"python", where}, seen
    finally:
        w.kill()


def test_python_ctypes_real_cudart():
    """The real libcudart.so.13: where cuda, api cudaGetDeviceCount, in its own frame."""
    ctypes_case("/usr/local/cuda/lib/libcudart.so.13", "cudaGetDeviceCount", "cuda",
                "cudaGetDeviceCount")


def test_python_ctypes_real_nccl():
    """The real libnccl.so.2 (ncclCommCount on a NULL communicator fails at once): where nccl,
    api ncclCommCount (the exported name, whichever alias the symbol table gives)."""
    ctypes_case("/usr/local/cuda/lib/libnccl.so.2", "ncclCommCount", "nccl", None)


def test_no_ptrace_rights():
    """Without ptrace rights (an unprivileged user on a root process): one line in
    ptrace_error; state and names from /proc still there; the kernel stack says why it is
    missing."""
    need_ptrace()
    w = start_app("--threads", "1")
    try:
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            DUMP, str(w.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        s = json.loads(p.stdout)
        want = "ptrace: Operation not permitted"
        if os.path.exists("/proc/sys/kernel/yama/ptrace_scope"):
            scope = int(open("/proc/sys/kernel/yama/ptrace_scope").read())
            if scope > 0:
                want += f" (kernel.yama.ptrace_scope = {scope})"
        assert s["ptrace_error"] == want, s["ptrace_error"]
        main = thread(s, w.pid)
        assert main["state"] == "S" and main["name"] == "stack_app" and main["frames"] == [], main
        assert main["kernel_stack"] is None and "Permission denied" in main["kernel_stack_error"], main
        # wchan needs ptrace rights too: nothing tells what it waits for
        assert main["wchan"] is None and main["where"] == "unknown", main
        assert len(s["threads"]) == 2
    finally:
        stop_app(w)


def test_other_mount_namespace_and_deleted():
    """ELF files the target sees at paths we do not: a binary on a tmpfs mounted only in the
    target's mount namespace (found through /proc/PID/root), and a deleted one (through
    /proc/PID/map_files). Both symbolized."""
    need_ptrace()
    if not shutil.which("unshare"):
        raise AssertionError("unshare missing (util-linux)")
    w = Workload(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  "mkdir -p /tmp/tp-stacks-ns && mount -t tmpfs none /tmp/tp-stacks-ns && "
                  f"cp {APP} /tmp/tp-stacks-ns/app && exec /tmp/tp-stacks-ns/app"])
    d = tmp_path("stacks-deleted")
    os.makedirs(d, exist_ok=True)
    copy = os.path.join(d, "app_deleted")
    shutil.copy(APP, copy)
    w2 = Workload([copy])
    os.unlink(copy)
    try:
        assert not os.path.exists("/tmp/tp-stacks-ns/app")
        for wl, path in ((w, "/tmp/tp-stacks-ns/app"), (w2, copy)):
            main = thread(snapshot(wl.pid), wl.pid)
            f = funcs(main)
            assert "level_c" in f and "level_a" in f, (path, f)
            mods = {x["module"] for x in main["frames"] if x["func"] == "level_c"}
            assert mods == {path}, mods
    finally:
        stop_app(w)
        stop_app(w2)


def test_threads_come_and_go():
    """Threads created and gone between and during samples: no error; the snapshot keeps
    every thread it saw (ordered by tid), those not seen in every sample have progress
    unknown, and the stable ones are unaffected."""
    need_ptrace()
    w = start_app("--threads", "2", "--churn")
    try:
        for _ in range(3):
            s = snapshot(w.pid, "--samples", "3", "--interval", "30")
            tids = [t["tid"] for t in s["threads"]]
            assert tids == sorted(tids) and len(set(tids)) == len(tids), tids
            assert "level_c" in funcs(thread(s, w.pid)), s
            assert thread(s, w.pid)["progress"] == "none"
            short = [t for t in s["threads"] if "short_lived" in funcs(t) or
                     (t["unwind_error"] or "").startswith("thread exited")]
            for t in short:
                assert t["progress"] == "unknown", t
            assert len(by_name(s, "idle_park")) == 2
        # the snapshots' process exited: its tracees were detached by then
        assert not any(v in "tT" for v in states(w.pid).values())
        w.go()
        w.wait_done(10)
    finally:
        stop_app(w)
