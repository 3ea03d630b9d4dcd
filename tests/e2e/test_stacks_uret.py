"""Stacks through uretprobe trampolines (issue 22 point 3): while any tool has return probes on
a process, a thread blocked inside a probed call has its return address replaced by the
[uprobes] trampoline. The same hung job (simulated NCCL, 4 ranks, rank 1 late, the others
blocked in cudaStreamSynchronize) is snapshotted with no probes, under `tptrace fr` (return
probes on the CUDA/NCCL APIs, attached before the ranks enter them), and under the recorder
plus bpftrace's own uretprobes on the same functions and on the caller: `tptrace stacks` gives
the same classes, frames and outlier, and the recorder's own dump snapshots the full frames.
Without BPF rights the lost frame is marked unrecoverable, never symbolized."""
import json
import os
import re
import shutil
import subprocess
import time
from lib import (E2E_BIN, SIM_LIB, TPTRACE, WL, OUT, Lines, Skip, Workload, need_root,
                 text_lines, wait_in_syscall)
from ncclib import Job
from test_stacks import by_name, snapshot, stop_app
from test_stacks_cli import pid_args, stacks

CUDART = os.path.join(SIM_LIB, "libcudart.so.13")
LIBCUDA = os.path.join(OUT, "sim", "driver", "libcuda.so.1")
RANK_BIN = os.path.join(WL, "nccl_rank")

OUTLIER = ("outlier: rank 1: idle in clock_nanosleep (libc.so.6), the others in "
           "cudaStreamSynchronize (no progress)")
CLASSES = ["equivalence classes (issuing thread: same frames, where, api, progress): 2",
           "  1. ranks 0,2-3: in cudaStreamSynchronize (no progress)",
           "  2. rank 1: idle in clock_nanosleep (libc.so.6) (no progress)"]
# the issuing thread of a waiting rank, outermost part: what the trampolines hid
WAITING_TAIL = ["cuStreamSynchronize", "cudaStreamSynchronize", "step_sync", "main",
                "__libc_start_call_main", "__libc_start_main", "_start"]


class Bpftrace:
    """bpftrace 0.17 with uretprobes of its own: a second tool's pending returns on the same
    functions (and on step_sync, which only it probes)."""

    def __init__(self, prog=None):
        if not shutil.which("bpftrace"):
            raise Skip("bpftrace is not installed (Makefile DEB_PKGS has it)")
        # BEGIN runs once every probe is attached: the handshake
        prog = prog or ('BEGIN { printf("ATTACHED\\n"); } '
                        f"uretprobe:{CUDART}:cudaStreamSynchronize, "
                        f"uretprobe:{LIBCUDA}:cuStreamSynchronize, "
                        f"uretprobe:{RANK_BIN}:step_sync {{ @[probe] = count(); }}")
        self.p = subprocess.Popen(["bpftrace", "-e", prog], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.out = Lines(self.p.stdout)
        self.err = Lines(self.p.stderr)
        ok = self.out.wait_for(lambda l: l.strip() == "ATTACHED", 60)
        assert ok, (self.out.text(), self.err.text())

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def hung_job(name, record=False, bpftrace=False, fr_stacks=False):
    """The late job, its ranks blocked at step 0; the tools attached before GO, so their
    return probes are pending in the blocked calls. The recorder takes no snapshots of its own
    unless fr_stacks (one would hold ptrace while `tptrace stacks` runs)."""
    job = Job(4, "late", steps=2, culprit=1,
              extra=["--fault-step", "0", "--late-ms", "60000", "--announce"], name=name)
    bt = None
    try:
        if record:
            job.record([] if fr_stacks else ["--no-stacks"])
        if bpftrace:
            bt = Bpftrace()
        job.go()
        for w in job.ranks:
            assert w.out.wait_for(lambda l: l.startswith("# step 0"), 30), w.out.text()
    except BaseException:
        job.kill()
        if bt:
            bt.stop()
        raise
    return job, bt


def settled_text(job, timeout=60):
    """`tptrace stacks` until the classes and the outlier are there (the ranks reach their
    waits a few ms after announcing step 0, later under load); the last output. The
    timeout is a failsafe, not the point."""
    end = time.monotonic() + timeout
    while True:
        rc, out, err = stacks(pid_args(job.pids()))
        lines = text_lines(out)
        if rc == 0 and OUTLIER in lines and all(c in lines for c in CLASSES) or \
                time.monotonic() >= end:
            return rc, out, err


def frames_key(t):
    """A thread's frames as the classification compares them: function, module, offset."""
    return [(f["func"], os.path.basename(f["module"] or "?"), f["module_off"],
             f.get("unrecoverable")) for f in t["frames"]]


def issuing(snap):
    return [t for t in snap["threads"] if t["issuing"]][0]


def json_snaps(job):
    rc, out, err = stacks(pid_args(job.pids()) + ["--json"])
    assert rc == 0 and err == "", (rc, err)
    return json.loads(out)["processes"]


def check_waiting(t, where="cuda", api="cudaStreamSynchronize"):
    names = [f["func"] for f in t["frames"]]
    assert names[-len(WAITING_TAIL):] == WAITING_TAIL, names
    assert (t["where"], t["api"]) == (where, api), t
    assert not t["truncated"] and t["unwind_error"] is None, t
    assert not any(f.get("unrecoverable") for f in t["frames"]), t["frames"]
    assert not any(f["module"] is None for f in t["frames"]), t["frames"]


def snapshot_case(name, record, bpftrace):
    job, bt = hung_job(name, record, bpftrace)
    try:
        rc, out, err = settled_text(job)
        assert rc == 0 and err == "", (rc, err)
        lines = text_lines(out)
        assert OUTLIER in lines, out
        for c in CLASSES:
            assert c in lines, (c, out)
        assert not any("unrecoverable: " in l or "(truncated" in l for l in lines), out
        snaps = json_snaps(job)
        keys = [frames_key(issuing(s)) for s in snaps]
        for r, s in enumerate(snaps):
            if r != 1:
                check_waiting(issuing(s))
        return job, bt, snaps, keys, out
    except BaseException:
        job.kill()
        if bt:
            bt.stop()
        raise


def test_stacks_same_with_return_probes():
    """(a) no probes, (b) `tptrace fr` recording since before GO, (c) the recorder and
    bpftrace's uretprobes on the same functions and on step_sync: the same classes and
    outlier, and every rank's issuing thread has the same frames (function, module, offset)
    in all three; in (b) and (c) return addresses were recovered from pending instances (the
    trampolines were really there), none left unrecoverable."""
    need_root()
    job, bt, snaps, base, _ = snapshot_case("uret-none", False, False)
    job.kill()
    for s in snaps:
        assert s["uretprobe_frames"]["recovered"] == 0, s["uretprobe_frames"]
    for name, record, bpftrace, per_rank in (("uret-fr", True, False, 2),
                                             ("uret-fr-bt", True, True, 3)):
        job, bt, snaps, keys, out = snapshot_case(name, record, bpftrace)
        try:
            assert keys == base, (name, keys, base)
            for r, s in enumerate(snaps):
                u = s["uretprobe_frames"]
                if r == 1:
                    # the late rank is in no probed call: nothing pending, nothing read
                    assert u["recovered"] == 0 and u["unrecoverable"] == 0, (name, u)
                    continue
                # cudaStreamSynchronize and cuStreamSynchronize (and step_sync under
                # bpftrace) pending in the main thread, each sample (more when the
                # watchdog thread is caught inside its cudaEventQuery)
                assert u["unrecoverable"] == 0, (name, u)
                assert u["recovered"] >= per_rank * s["samples"], (name, r, u)
                assert 1 <= u["instance_reads"] <= s["samples"], (name, u)
            assert re.search(r"^  return probes: \d+ return addresses recovered, 0 unrecoverable",
                             out, re.M), out
        finally:
            job.kill()
            if bt:
                bt.stop()
            if job.tracer:
                job.tracer.stop()


def test_fr_dump_snapshots_through_return_probes():
    """The recorder's own dump snapshots (SIGUSR2) of ranks blocked in its probed calls show
    the full frames of the waiting ranks and the verdict's stacks agree: the late rank is the
    only one outside cudaStreamSynchronize."""
    need_root()
    job, bt = hung_job("uret-fr-dump", record=True, fr_stacks=True)
    try:
        settled_text(job)
        job.dump_now()
        dumps = job.dumps()
        assert sorted(dumps) == [0, 1, 2, 3], sorted(dumps)
        for r, d in dumps.items():
            snap = [s for s in d["stacks"] if s["taken"] == "dump"]
            assert len(snap) == 1, [s["taken"] for s in d["stacks"]]
            t = issuing(snap[0])
            if r == 1:
                assert t["where"] == "idle", t
                continue
            check_waiting(t)
            assert snap[0]["uretprobe_frames"]["recovered"] >= 2, snap[0]["uretprobe_frames"]
    finally:
        job.kill()
        if job.tracer:
            job.tracer.stop()


def test_stacks_unrecoverable_without_bpf_rights():
    """Without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN (ptrace still allowed) the pending instances
    cannot be read: the trampoline frame is marked `unrecoverable: uretprobe trampoline`, in
    text and JSON, the stack ends there and says why; no frame is an offset into a module it
    is not in."""
    need_root()
    job, bt = hung_job("uret-nocap", record=True)
    try:
        settled_text(job)
        if not shutil.which("setpriv"):
            raise Skip("setpriv (util-linux) is not installed")
        drop = ["setpriv", "--inh-caps=-bpf,-perfmon,-sys_admin",
                "--bounding-set=-bpf,-perfmon,-sys_admin", "--"]
        pid = job.pids()[0]
        p = subprocess.run(drop + [TPTRACE, "stacks", "-p", str(pid), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        # said in the frames, not on stderr (libbpf's own messages only with -v)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        s = json.loads(p.stdout)["processes"][0]
        t = issuing(s)
        assert s["ptrace_error"] is None, s["ptrace_error"]
        last = t["frames"][-1]
        assert last.get("unrecoverable") == "uretprobe trampoline", t["frames"]
        assert last["module"] is None and last["func"] is None and last["module_off"] is None
        assert not any(f.get("unrecoverable") for f in t["frames"][:-1]), t["frames"]
        # the innermost probed call is the last frame read: its caller is what was lost
        assert t["frames"][-2]["func"] == "cuStreamSynchronize", t["frames"]
        assert t["truncated"], t
        assert t["unwind_error"].startswith("unwind stopped at a uretprobe trampoline: return "
                                            "instances unreadable: loading the task iterator: "), t
        # one a sample for the issuing thread; another thread can add its own (one stopped
        # inside a probed call of the job's watchdog, or stepped out of the trampoline into
        # a caller below a pending return): at least one a sample, never one recovered
        u = s["uretprobe_frames"]
        assert u["unrecoverable"] >= s["samples"] and u["recovered"] == 0, u
        p = subprocess.run(drop + [TPTRACE, "stacks", "-p", str(pid)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        lines = text_lines(p.stdout)
        i = [k for k, l in enumerate(lines) if l.startswith(f"  thread {pid} ")][0]
        j = i + 1 + len(t["frames"])
        assert re.match(r"^      0x[0-9a-f]+ unrecoverable: uretprobe trampoline$", lines[j - 1]), lines[i:j + 1]
        assert lines[j].startswith("      ... (truncated: unwind stopped at a uretprobe trampoline"), lines[j]
    finally:
        job.kill()
        if job.tracer:
            job.tracer.stop()


APP = os.path.join(WL, "stack_app")


def tail_app(probes):
    """stack_app --tail in tail_leaf's read, bpftrace's uretprobes on `probes` (stack_app's
    functions) attached before it got there; (workload, bpftrace or None)."""
    w = Workload([APP, "--tail"])
    bt = None
    try:
        if probes:
            prog = 'BEGIN { printf("ATTACHED\\n"); } ' + ", ".join(
                f"uretprobe:{APP}:{p}" for p in probes) + " { @[probe] = count(); }"
            bt = Bpftrace(prog)
        w.p.stdin.write("ATTACHED\n")
        w.p.stdin.flush()
        assert w.out.wait_for(lambda l: l == "# tail", 30), w.out.text()
    except BaseException:
        w.kill()
        if bt:
            bt.stop()
        raise
    return w, bt


def tail_snapshot(w):
    """stack_dump once the main thread is in read under tail_leaf (it prints "# tail" just
    before the read: that line, then the read in /proc)."""
    assert w.out.wait_for(lambda l: l.startswith("# tail"), 60), w.out.text()
    wait_in_syscall(w.pid, "read", tid=w.pid)
    s = snapshot(w.pid, "--samples", "2", "--interval", "50")
    main = [t for t in s["threads"] if t["main"]][0]
    names = [f["func"] for f in main["frames"]]
    assert "tail_leaf" in names and names.index("tail_leaf") > 0, f"not in tail_leaf's read: {names}"
    return s, main


def test_stacks_chained_tail_call():
    """A tail call between two probed functions (tail_jump jmps to tail_leaf): the kernel
    chains tail_leaf's instance to tail_jump's on one slot. With uretprobes on tail_leaf,
    tail_jump and tail_mid, three instances are pending for two slots; both slots are put back
    (the chained run consumed as one return: an order-only fixer would give tail_mid's slot
    tail_jump's address), and the frames are those of the same program unprobed."""
    need_root()
    w, _ = tail_app([])
    try:
        s, main = tail_snapshot(w)
        base = frames_key(main)
        assert s["uretprobe_frames"]["instances"] == 0, s["uretprobe_frames"]
    finally:
        stop_app(w)
    names = [f[0] for f in base]
    i = names.index("tail_leaf")
    assert names[i:i + 3] == ["tail_leaf", "tail_mid", "main"], names
    w, bt = tail_app(["tail_leaf", "tail_jump", "tail_mid"])
    try:
        s, main = tail_snapshot(w)
        u = s["uretprobe_frames"]
        assert frames_key(main) == base, (frames_key(main), base)
        assert not main["truncated"] and main["unwind_error"] is None, main
        assert u["unrecoverable"] == 0 and u["instance_reads"] == s["samples"], u
        assert u["instances"] == 3 * s["samples"] and u["recovered"] == 2 * s["samples"], u
    finally:
        stop_app(w)
        bt.stop()


def test_stacks_uprobes_area_newer_than_the_maps():
    """The [uprobes] area appears with the process's first uprobe hit, which may come after
    the snapshot read the maps (a recorder attaching meanwhile): a pc outside every executable
    mapping known makes the unwinder read the maps again and unwind the thread once more,
    through the trampolines. TPTRACE_TEST_UPROBES_UNSEEN hides the area from the first read."""
    need_root()
    job, bt = hung_job("uret-unseen", record=True)
    try:
        settled_text(job)
        env = dict(os.environ, TPTRACE_TEST_UPROBES_UNSEEN="1")
        p = subprocess.run([TPTRACE, "stacks", "--json"] + pid_args(job.pids()),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60, env=env)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        snaps = json.loads(p.stdout)["processes"]
        for r, s in enumerate(snaps):
            if r == 1:
                continue
            check_waiting(issuing(s))
            assert s["uretprobe_frames"]["recovered"] >= 2 * s["samples"], s["uretprobe_frames"]
    finally:
        job.kill()
        if job.tracer:
            job.tracer.stop()


FP_APP = os.path.join(WL, "uret_fp_app")
USTACK_DUMP = os.path.join(E2E_BIN, "ustack_dump")


def fp_native(probe_mid):
    """uret_fp_app under ustack_dump --native (the BPF frame-pointer walker at
    cudaStreamSynchronize's entry), with bpftrace's uretprobe on fp_mid when probe_mid; the
    native frames of the one call and where the walk stopped."""
    w = Workload([FP_APP])
    bt = dump = None
    try:
        if probe_mid:
            bt = Bpftrace('BEGIN { printf("ATTACHED\\n"); } '
                          f"uretprobe:{FP_APP}:fp_mid {{ @[probe] = count(); }}")
        dump = subprocess.Popen([USTACK_DUMP, str(w.pid), CUDART, "cudaStreamSynchronize", "60",
                                 "--native"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        dump.stdout.readline()
        ready = dump.stdout.readline().strip()
        assert ready == "READY", (ready, dump.stderr.read())
        w.go()
        assert w.out.wait_for(lambda l: l == "DONE", 30), w.out.text()
        # the workload stays mapped (it holds until stdin closes) while the dumper drains
        dump.send_signal(2)
        out, err = dump.communicate(timeout=60)
        assert dump.returncode == 0, err
    finally:
        if dump and dump.poll() is None:
            dump.kill()
        w.kill()
        if bt:
            bt.stop()
    recs = [json.loads(l) for l in out.splitlines()[:-1]]
    calls = [r for r in recs if "native" in r]
    assert len(calls) == 1, out
    return [f[0] for f in calls[0]["native"]], calls[0].get("native_stop")


def test_bpf_native_frames_through_return_probes():
    """--native-stacks' frame-pointer walk (bpf/ustack.bpf.h) at a probed call whose caller
    has a pending uretprobe: the caller's return address is put back from the thread's own
    pending instances in BPF, so the frames past it are the same as without the probe."""
    need_root()
    base, base_stop = fp_native(False)
    assert base[:4] == ["cudaStreamSynchronize", "fp_mid", "fp_outer", "main"], (base, base_stop)
    got, stop = fp_native(True)
    assert (got, stop) == (base, base_stop), (got, stop, base, base_stop)


def test_stacks_thread_stopped_in_the_trampoline():
    """A thread stopped while it returns through the trampoline (its pc in [uprobes] slot 0,
    the pending instance half handed back) is single-stepped out to the caller it returns
    to and unwound there: stack_app --spin recurses through spin_depth, which bpftrace
    return-probes, so a good share of stops land in the trampoline. Sampled until some did
    (a few in a hundred samples here): no frame unrecoverable, every spinning thread's stack
    complete down to clone, and the thread spins on."""
    need_root()
    w = Workload([APP, "--spin"])
    bt = None
    try:
        bt = Bpftrace('BEGIN { printf("ATTACHED\\n"); } '
                      f"uretprobe:{APP}:spin_depth {{ @[probe] = count(); }}")
        stepped = unrec = samples = 0
        for _ in range(40):     # a failsafe: ~1 stop in 80 lands in the trampoline
            s = snapshot(w.pid, "--samples", "25", "--interval", "2")
            u = s["uretprobe_frames"]
            stepped += u["stepped_out"]
            unrec += u["unrecoverable"]
            samples += s["samples"]
            spin = by_name(s, "spin_loop")
            assert len(spin) == 1, [[f["func"] for f in t["frames"]] for t in s["threads"]]
            names = [f["func"] for f in spin[0]["frames"]]
            assert names[-3:] == ["spin_loop", "start_thread", "__GI___clone3"], names
            assert not spin[0]["truncated"] and spin[0]["unwind_error"] is None, spin[0]
            if stepped >= 2:
                break
        assert unrec == 0, (unrec, samples)
        assert stepped >= 2, f"no stop in the trampoline in {samples} samples"
        # still spinning: the next sample sees it elsewhere in its loop
        assert by_name(snapshot(w.pid), "spin_loop")
    finally:
        stop_app(w)
        if bt:
            bt.stop()


def test_stacks_step_trap_left_pending_is_taken():
    """A single step out of the trampoline whose trap fired but was reported after another
    stop (the interrupt sent when the step outlasted the stop timeout, on a loaded host) left
    its SIGTRAP pending: detached so, the thread was killed by it (a rank of a healthy 32 x 8
    soak job died of signal 5). The hook makes that outcome at every step (a real SIGTRAP
    pending behind the stop reported); the snapshot must take it, and the process spin on."""
    need_root()
    w = Workload([APP, "--spin"])
    bt = None
    env = dict(os.environ, TPTRACE_TEST_STEP_TRAP_PENDING="1")
    try:
        bt = Bpftrace('BEGIN { printf("ATTACHED\\n"); } '
                      f"uretprobe:{APP}:spin_depth {{ @[probe] = count(); }}")
        stepped = samples = 0
        for _ in range(40):     # a failsafe: ~1 stop in 80 lands in the trampoline
            s = snapshot(w.pid, "--samples", "25", "--interval", "2", env=env)
            stepped += s["uretprobe_frames"]["stepped_out"]
            samples += s["samples"]
            assert w.p.poll() is None, f"killed by signal {-w.p.returncode} after {stepped} steps"
            if stepped >= 2:
                break
        assert stepped >= 2, f"no stop in the trampoline in {samples} samples"
        # alive and still spinning: a trap left pending kills it when it runs again
        assert by_name(snapshot(w.pid), "spin_loop")
        assert w.p.poll() is None, f"killed by signal {-w.p.returncode}"
    finally:
        stop_app(w)
        if bt:
            bt.stop()
