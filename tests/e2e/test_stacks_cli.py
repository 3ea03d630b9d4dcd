"""`tptrace stacks` end to end: a simulated NCCL job hung before tptrace came (one rank late,
the others blocked in cudaStreamSynchronize), a Python job with one rank spinning, --json
against the schema (docs/fr-schema.md, stacks), -a (CUDA/NCCL processes only), and every bad
input with its one line and exit status."""
import json
import os
import signal
import subprocess
import time
from lib import (TPTRACE, WL, Workload, need_root, run_tptrace, task_state, text_lines, tmp_path,
                 wait_until)
from ncclib import Job

PY = "/usr/bin/python3"  # Debian's 3.11, libpython linked into the executable

# A rank of a Python "job": after GO, rank CULPRIT spins in Python, the others sleep in a wait
# loop, as ranks blocked on their peers do. The line numbers are asserted below.
PY_JOB = """import os, sys, time


def wait_for_peers():
    while True:
        time.sleep(100000)  # blocked, as a rank waiting in a collective


def spin():
    x = 0
    while True: x += 1  # noqa: E701 one line: every sample is on it


def main():
    print("READY", os.getpid(), flush=True)
    sys.stdin.readline()
    print("GONE", flush=True)
    if os.environ["RANK"] == sys.argv[1]:
        spin()
    else:
        wait_for_peers()


main()
"""


def stacks(args, timeout=60):
    return run_tptrace(["stacks"] + args, timeout=timeout)


def pid_args(pids):
    return [a for p in pids for a in ("-p", str(p))]


def one_line(err):
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, f"want one error line, got {lines!r}"
    return lines[0]


def late_job(nranks=4):
    """Rank 1 sleeps (60 s) before step 0's allreduce; the others' allreduce waits for it and
    they block in cudaStreamSynchronize: hung before tptrace attaches."""
    job = Job(nranks, "late", steps=2, culprit=1, extra=["--fault-step", "0", "--late-ms", "60000"],
              name="stacks-late")
    job.go()
    return job


def settled(args, *wants, timeout=60):
    """Runs `tptrace stacks` until every line of wants is in its output, then returns the last
    run. The ranks reach their waits a few ms after GO, later on a loaded machine; and there a
    thread that cannot be stopped within the stop timeout in some sample has progress
    "unknown" for that run. The wait is for that state; the timeout only a failsafe (the
    culprit sleeps 60 s: the state holds that long)."""
    end = time.monotonic() + timeout
    while True:
        rc, out, err = stacks(args)
        if all(w in text_lines(out) for w in wants) or time.monotonic() >= end:
            return rc, out, err


def test_stacks_names_the_late_rank():
    """The merged tree, the classes and the outlier line for a job hung before attach, and the
    per-process listing: every thread of every rank, its state and frames."""
    need_root()
    job = late_job()
    try:
        want = ("outlier: rank 1: idle in clock_nanosleep (libc.so.6), the others in "
                "cudaStreamSynchronize (no progress)")
        classes = ["equivalence classes (issuing thread: same frames, where, api, progress): 2",
                   "  1. ranks 0,2-3: in cudaStreamSynchronize (no progress)",
                   "  2. rank 1: idle in clock_nanosleep (libc.so.6) (no progress)"]
        rc, out, err = settled(pid_args(job.pids()), want, *classes)
        assert rc == 0 and err == "", (rc, err)
        # 100 columns: the longer lines (the waiting ranks' thread lines, the outlier) wrapped
        # at spaces, never cut; only a single word may be longer
        wide = [l for l in out.splitlines() if len(l) > 100 and " " in l.strip()]
        assert not wide and any(l.startswith("          ") and not l.startswith("           ")
                                for l in out.splitlines()), wide or out
        lines = text_lines(out)
        assert want in lines, out
        for line in classes:
            assert line in lines, (line, out)
        # the tree: one root path, split after main() into the two classes
        i = lines.index("merged stacks: issuing thread of 4 processes, outermost frame first")
        assert lines[i + 1:i + 7] == [
            "[ranks 0-3] 4 processes", "  _start (nccl_rank)", "  __libc_start_main (libc.so.6)",
            "  __libc_start_call_main (libc.so.6)", "  main (nccl_rank)",
            "  [ranks 0,2-3] 3 processes"], lines[i:i + 8]
        assert lines[i + 7:i + 9] == ["    step_sync (nccl_rank)",
                                      "    cudaStreamSynchronize (libcudart.so.13)"], lines[i:i + 12]
        j = lines.index("  [rank 1] 1 process")
        assert lines[j + 1] == "    usleep (libc.so.6)", lines[j:j + 4]
        # per process: the header, then one line per thread (the ranks' threads are all there)
        for r, pid in enumerate(job.pids()):
            head = [l for l in lines if l.startswith(f"pid {pid} (nccl_rank) rank {r} of 4: 3 samples 200 ms apart, stopped ")]
            assert len(head) == 1, (pid, out)
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
            got = [int(l.split()[1]) for l in lines if l.startswith("  thread ")
                   and int(l.split()[1]) in tids]
            assert got == tids, (pid, got, tids)
            main = [l for l in lines if l.startswith(f"  thread {pid} (nccl_rank) ")][0]
            if r == 1:
                assert main.endswith(": where idle progress none [main issuing]"), main
            else:
                assert main.endswith(": where cuda api cudaStreamSynchronize progress none [main issuing]"), main
        # native frames as func+0xoff (module)
        assert any(l.startswith("      cudaStreamSynchronize+0x") and
                   l.endswith("/sim/lib/libcudart.so.13)") for l in lines), out
    finally:
        job.kill()


def test_stacks_8_ranks_in_budget():
    """8 processes x 3 samples: one snapshot each, and all sampled together. Together by
    construction: with every sample held (TPTRACE_TEST_SNAPSHOT_HOLD_MS keeps the threads
    stopped), all 8 ranks are seen stopped at once, which one after the other never are. The
    2 s budget itself is a figure of `make bench` (stacks_8proc_3samples_s and its ratio)."""
    need_root()
    job = late_job(8)
    held = None
    try:
        want = "  1. ranks 0,2-7: in cudaStreamSynchronize (no progress)"
        outlier = ("outlier: rank 1: idle in clock_nanosleep (libc.so.6), the others in "
                   "cudaStreamSynchronize (no progress)")
        rc, out, err = settled(pid_args(job.pids()), want, outlier)
        assert rc == 0 and want in text_lines(out) and outlier in text_lines(out), (rc, err, out)
        rc, out, err = stacks(pid_args(job.pids()))
        assert rc == 0 and out.count("3 samples 200 ms apart") == 8, (rc, err, out)
        held = subprocess.Popen([TPTRACE, "stacks", "--samples", "1"] + pid_args(job.pids()),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=dict(os.environ, TPTRACE_TEST_SNAPSHOT_HOLD_MS="600000"))
        wait_until(lambda: all(task_state(p) == "t" for p in job.pids()), 60,
                   "all 8 ranks stopped by one tptrace stacks at once")
    finally:
        if held:
            held.kill()     # the kernel detaches the held threads
            held.wait()
        job.kill()


def start_py_job(n, culprit):
    path = tmp_path("stacks_job.py")
    with open(path, "w") as f:
        f.write(PY_JOB)
    ranks = [Workload([PY, path, str(culprit)], env={"RANK": str(r)}) for r in range(n)]
    for w in ranks:
        w.go()
    for w in ranks:
        assert w.out.wait_for(lambda l: l == "GONE", 30), w.err.text()
    return path, ranks


def test_stacks_python_outlier():
    """A Python rank spinning while the others wait: the culprit's Python function, file and
    line are in the outlier line, the Python frames in the tree."""
    need_root()
    if not os.path.exists(PY):
        from lib import Skip
        raise Skip(f"{PY} is not installed")
    path, ranks = start_py_job(4, 2)
    try:
        want = ("outlier: rank 2: in Python stacks_job.py:11 spin(), the others in Python "
                "stacks_job.py:6 wait_for_peers() (no progress)")
        rc, out, err = settled(pid_args([w.pid for w in ranks]), want,
                               "  2. rank 2: in Python stacks_job.py:11 spin() (progressing)")
        lines = text_lines(out)
        assert rc == 0 and want in lines, (rc, err, out)
        assert "  2. rank 2: in Python stacks_job.py:11 spin() (progressing)" in lines, out
        j = lines.index("  [rank 2] 1 process")
        assert lines[j + 1:j + 3] == ["    stacks_job.py:19 main()", "    stacks_job.py:11 spin()"], lines[j:j + 4]
        # the listing: Python frames as file:line function, inside the interpreter's frames
        assert f"      {path}:11 spin" in lines and f"      {path}:19 main" in lines, out
        heads = [l for l in lines if l.startswith("  python: 3.11")]
        assert len(heads) == 4, out
    finally:
        for w in ranks:
            w.kill()


SNAPSHOT_KEYS = {"taken", "pid", "comm", "cmdline", "rank", "world_size", "local_rank", "time_ns",
                 "mono_ns", "samples", "interval_ms", "stopped_ms_max", "ptrace_error", "python",
                 "python_error", "exited", "threads"}
THREAD_KEYS = {"tid", "name", "state", "wchan", "kernel_stack", "kernel_stack_error", "where",
               "api", "progress", "main", "issuing", "python", "truncated", "unwind_error",
               "frames"}
WHERE = {"nccl", "cuda", "driver", "allocator", "python", "idle", "running", "unknown"}


def check_snapshot(s):
    assert SNAPSHOT_KEYS <= set(s), SNAPSHOT_KEYS - set(s)
    assert s["taken"] == "request"
    assert isinstance(s["time_ns"], int) and s["time_ns"] > 1_600_000_000 * 10**9
    assert s["samples"] >= 1 and s["interval_ms"] > 0 and s["stopped_ms_max"] >= 0
    tids = [t["tid"] for t in s["threads"]]
    assert tids == sorted(tids) and tids, tids
    assert sum(t["issuing"] for t in s["threads"]) == 1
    for t in s["threads"]:
        assert THREAD_KEYS <= set(t), THREAD_KEYS - set(t)
        assert t["where"] in WHERE and t["progress"] in ("none", "yes", "unknown")
        assert t["state"] in (None, "R", "S", "D", "T", "t", "Z", "I"), t["state"]
        assert t["main"] == (t["tid"] == s["pid"])
        for f in t["frames"]:
            assert f["kind"] in ("native", "python"), f
            if f["kind"] == "native":
                assert {"func", "func_off", "module", "build_id", "module_off", "pc"} <= set(f), f
                assert f["pc"].startswith("0x")
                if f["func"] is None:
                    assert f["func_off"] is None
            else:
                assert {"func", "file", "line"} <= set(f), f


def test_stacks_json_and_output_file():
    """--json -o FILE: {"processes": [...]} per the schema, written atomically (no temp file
    left next to it); the text view is not in it."""
    need_root()
    job = late_job()
    try:
        settled(pid_args(job.pids()), "  2. rank 1: idle in clock_nanosleep (libc.so.6) (no progress)")
        d = tmp_path("stacks-json")
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        out_path = os.path.join(d, "hang.json")
        rc, out, err = stacks(pid_args(job.pids()) + ["--json", "-o", out_path])
        assert rc == 0 and out == "" and err == "", (rc, out, err)
        assert os.listdir(d) == ["hang.json"], os.listdir(d)
        with open(out_path) as f:
            doc = json.load(f)
        assert list(doc) == ["processes"]
        assert [p["pid"] for p in doc["processes"]] == job.pids()
        for r, s in enumerate(doc["processes"]):
            check_snapshot(s)
            assert s["rank"] == r and s["world_size"] == 4 and s["comm"] == "nccl_rank"
            assert s["samples"] == 3 and s["ptrace_error"] is None and s["python"] is None
            main = [t for t in s["threads"] if t["main"]][0]
            assert main["issuing"]
            if r == 1:
                assert main["where"] == "idle" and main["api"] is None
            else:
                # progress is asserted in the text test (it waits out a loaded machine)
                assert (main["where"], main["api"]) == ("cuda", "cudaStreamSynchronize"), main
                assert main["progress"] in ("none", "unknown"), main
        # --samples 1 --interval: progress cannot be told from one sample
        rc, out, err = stacks(["-p", str(job.pids()[0]), "--json", "--samples", "1"])
        s = json.loads(out)["processes"][0]
        assert rc == 0 and s["samples"] == 1
        assert {t["progress"] for t in s["threads"]} == {"unknown"}
        # --max-frames cuts the innermost-first list and says so
        rc, out, err = stacks(["-p", str(job.pids()[0]), "--json", "--max-frames", "2", "--samples", "1"])
        main = [t for t in json.loads(out)["processes"][0]["threads"] if t["main"]][0]
        assert rc == 0 and len(main["frames"]) == 2 and main["truncated"], main
    finally:
        job.kill()


def test_stacks_all_finds_cuda_processes():
    """-a: processes that map libnccl, libcudart, or have cudart linked statically (before it
    loads libcuda), and not a process without CUDA."""
    need_root()
    static = os.path.join(WL, "nvcc_static")
    job = Job(2, "healthy", steps=1, name="stacks-all")
    others = [Workload([os.path.join(WL, "sim_train")]), Workload([os.path.join(WL, "nocuda")])]
    if os.path.exists(static):
        others.append(Workload([static]))
    try:
        rc, out, err = stacks(["-a", "--json", "--samples", "1"])
        assert rc in (0, 3), (rc, err)  # 3: some other process on the host vanished meanwhile
        found = {p["pid"] for p in json.loads(out)["processes"]}
        for pid in job.pids() + [others[0].pid] + ([others[2].pid] if len(others) > 2 else []):
            assert pid in found, (pid, found)
        assert others[1].pid not in found, "nocuda must not be snapshotted"
        assert os.getpid() not in found
        # the same process by -p: any pid is taken, CUDA or not
        rc, out, err = stacks(["-p", str(others[1].pid), "--samples", "1"])
        assert rc == 0 and f"pid {others[1].pid} (nocuda) rank unknown" in out, (rc, out, err)
    finally:
        job.kill()
        for w in others:
            w.kill()


def free_pid():
    used = {int(d) for d in os.listdir("/proc") if d.isdigit()}
    for pid in range(30000, 1, -1):
        if pid not in used:
            return pid
    raise AssertionError("no free pid")


def test_stacks_bad_input():
    """Each bad input: its one line and exit status (2 usage, 1 nothing read or not written,
    3 some targets not read)."""
    need_root()
    hint = "Try `tptrace stacks --help' or `tptrace stacks --usage' for more information."
    for args, error in (([], "tptrace stacks: no process given: use -p PID or -a"),
                        (["-p", "1", "-a"], "tptrace stacks: -p and -a exclude each other"),
                        (["-p", "abc"], "tptrace stacks: invalid pid 'abc'"),
                        (["-p", "1", "--samples", "0"], "tptrace stacks: invalid --samples '0' (1..100)"),
                        (["-p", "1", "--interval", "x"],
                         "tptrace stacks: invalid --interval 'x' (milliseconds, 1..60000)"),
                        (["-p", "1", "--max-frames", "0"], "tptrace stacks: invalid --max-frames '0' (1..4096)"),
                        (["-p", "1", "extra"], "tptrace stacks: unexpected argument 'extra'")):
        rc, out, err = stacks(args)
        assert rc == 2 and err.splitlines() == [error, hint] and out == "", (args, rc, err)

    gone = free_pid()
    rc, out, err = stacks(["-p", str(gone)])
    assert rc == 1 and out == "" and one_line(err) == f"tptrace: pid {gone}: no such process (gone?)", (rc, out, err)

    w = Workload([os.path.join(WL, "nocuda"), "--hold"])
    d = tmp_path("stacks-bad")
    full = os.path.join(d, "full")
    os.makedirs(full, exist_ok=True)
    subprocess.run(["umount", full], stderr=subprocess.DEVNULL)
    try:
        # one good and one vanished pid: the good one is written, exit 3
        rc, out, err = stacks(["-p", str(w.pid), "-p", str(gone), "--samples", "1"])
        assert rc == 3 and one_line(err) == f"tptrace: pid {gone}: no such process (gone?)", (rc, err)
        assert f"pid {w.pid} (nocuda)" in out and "no outlier (one process): pid" in out, out
        # an output that cannot be created: before anything is stopped
        rc, out, err = stacks(["-p", str(w.pid), "-o", "/nonexistent/dir/out.txt"])
        assert rc == 1 and one_line(err) == \
            "tptrace: cannot write /nonexistent/dir/out.txt: No such file or directory", err
        # a full disk: the old file stays as it was, no temp file is left
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tpstacksfull", full], check=True)
        target = os.path.join(full, "out.txt")
        with open(target, "w") as f:
            f.write("old\n")
        with open(os.path.join(full, "filler"), "wb") as f:
            try:
                f.write(b"x" * 65536)
            except OSError:
                pass
        rc, out, err = stacks(["-p", str(w.pid), "-o", target, "--samples", "1"])
        assert rc == 1 and one_line(err) == \
            f"tptrace: writing {target} failed: No space left on device; nothing written", err
        assert sorted(os.listdir(full)) == ["filler", "out.txt"], os.listdir(full)
        with open(target) as f:
            assert f.read() == "old\n"
        # Ctrl-C in a long snapshot: no temp file left, the target not left stopped
        d2 = os.path.join(d, "int")
        os.makedirs(d2, exist_ok=True)
        for f in os.listdir(d2):
            os.unlink(os.path.join(d2, f))
        p = subprocess.Popen([TPTRACE, "stacks", "-p", str(w.pid), "--samples", "50", "--interval",
                              "200", "-o", os.path.join(d2, "out.txt")], stderr=subprocess.PIPE)
        # the temp file is there: the 10 s snapshot is under way, whenever the signal lands
        wait_until(lambda: os.listdir(d2), 60, "the temp file")
        p.send_signal(signal.SIGINT)
        assert p.wait(10) == -signal.SIGINT
        assert os.listdir(d2) == [], os.listdir(d2)
        with open(f"/proc/{w.pid}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "S"
        # no ptrace rights (an unprivileged user on root's process): /proc only, said once
        rc, out, err = run_unprivileged(["stacks", "-p", str(w.pid), "--samples", "1"])
        assert rc == 0, (rc, err)
        assert one_line(err) == (f"tptrace: pid {w.pid} (nocuda): ptrace: Operation not permitted: "
                                 "states, wait channels and kernel stacks only (run as root, or "
                                 "with CAP_SYS_PTRACE)"), err
        assert "  degraded to /proc (states, wait channels, kernel stacks): ptrace: Operation not permitted" \
            in text_lines(out), out
        assert f"not merged: pid {w.pid}: no frames: ptrace: Operation not permitted" \
            in text_lines(out), out
        assert f"unknown: pid {w.pid}: stack not read (ptrace: Operation not permitted), not compared" \
            in text_lines(out), out
    finally:
        subprocess.run(["umount", full], stderr=subprocess.DEVNULL)
        w.kill()


def run_unprivileged(args):
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "--inh-caps=-all", TPTRACE] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def test_stacks_help():
    rc, out, err = run_tptrace(["stacks", "--help"])
    assert rc == 0
    for s in ("-p, --pid=PID", "-a, --all", "--samples=N", "--interval=MS", "--json",
              "-o, --output=FILE", "--all-threads", "--max-frames=N", "EXIT STATUS", "EXAMPLES"):
        assert s in out, s
    rc, out, err = run_tptrace(["--help"])
    assert "tptrace stacks ..." in out
