"""tptrace fr -a, exact from exec: processes started after the recorder are recorded from their
first NCCL call (comm identity from ncclCommInitRank, every collective), library files first
mapped after start are learnt from the kernel, processes without NCCL are never recorded."""
import glob
import json
import os
import re
import shutil
import subprocess
from lib import SIM_LIB, WL, Tracer, Workload, need_root, tmp_path
from ncclib import Job


def start_recorder(name, extra=(), env=None):
    dump_dir = tmp_path(f"fr-exec-{name}")
    shutil.rmtree(dump_dir, ignore_errors=True)
    tr = Tracer(["fr", "-a", "-v", "--dump-dir", dump_dir, "--no-stacks"] + list(extra),
                ready=False, env=env)
    assert tr.err.wait_for(lambda l: "flight recorder on" in l, 30), tr.err.text()
    return tr, dump_dir


def run_job(tr, job):
    pids = job.pids()
    try:
        # a 1-step job can map libnccl, run and exit within the 12-20 ms the recorder takes
        # to probe a new library file: a process gone by then cannot be recorded (add_target
        # gets ESRCH). Let it go only once the recorder has it.
        for p in pids:
            assert tr.err.wait_for(lambda l, p=p: f"recording pid {p} " in l, 15), tr.err.text()
        job.go()
        job.wait_done()
        for w in job.ranks:
            w.finish()
        for p in pids:
            assert tr.err.wait_for(lambda l, p=p: f"dumped pid {p} (exit)" in l, 15), tr.err.text()
    finally:
        job.kill()
    return pids


def dumps_of(dump_dir, pids):
    out = {}
    for f in glob.glob(os.path.join(dump_dir, "*.json")):
        d = json.load(open(f))
        if d["pid"] in pids:
            out[pids.index(d["pid"])] = d
    assert sorted(out) == list(range(len(pids))), (sorted(out), pids)
    return out


def check_exact(dumps, nranks, steps):
    """Every rank: the world comm learnt from its init call, the same cross-rank id
    everywhere, and every collective of every step with seqs 1..N, none missed."""
    ids = set()
    for rank, d in dumps.items():
        world = [c for c in d["comms"] if c["created_by"] == "ncclCommInitRank"]
        assert len(world) == 1, d["comms"]
        c = world[0]
        assert c["learned"] == {"comm_id": "init_call", "rank": "init_call",
                                "nranks": "init_call", "seq_origin": "comm_init"}, c
        assert (c["rank"], c["nranks"]) == (rank, nranks), c
        assert not [x for x in d["comms"] if x["created_by"] == "before attach"], d["comms"]
        ids.add(c["comm_id"])
        colls = [e for e in d["entries"] if e["comm_id"] == c["comm_id"] and
                 e["collective_seq_id"] > 0]
        seqs = [e["collective_seq_id"] for e in colls]
        assert seqs == list(range(1, len(seqs) + 1)), seqs
        assert len([e for e in colls if e["op"] == "all_reduce"]) == steps, colls
        assert seqs[-1] == c["last_enqueued_seq"], (seqs[-1], c)
    assert len(ids) == 1, ids


def test_fr_exec_exact_identity_from_exec():
    """A job started after `tptrace fr -a` whose ranks create their communicator ~50 ms after
    exec: exact identity (seq_origin comm_init, init_call ids) and every collective."""
    need_root()
    tr, dump_dir = start_recorder("exact")
    try:
        job = Job(2, "healthy", steps=3, extra=["--start-delay-ms", "50"], name="exec-exact")
        pids = run_job(tr, job)
    finally:
        assert tr.stop() == 0, tr.err.text()
    check_exact(dumps_of(dump_dir, pids), 2, 3)
    # the process was recorded because the kernel reported its mapping, not by a /proc scan
    assert re.search(r"probing \S+libnccl\.so\.2 for every process", tr.err.text()), \
        tr.err.text()


def copy_lib(name):
    """The sim libnccl.so.2 copied into a directory of its own: another inode."""
    libdir = tmp_path(name)
    shutil.rmtree(libdir, ignore_errors=True)
    os.makedirs(libdir)
    copy = os.path.join(libdir, "libnccl.so.2")
    shutil.copy(os.path.join(SIM_LIB, "libnccl.so.2"), copy)
    assert os.stat(copy).st_ino != os.stat(os.path.join(SIM_LIB, "libnccl.so.2")).st_ino
    return libdir, copy


def test_fr_exec_second_library_file_learnt():
    """A copy of libnccl.so.2 in another directory (another inode), first mapped after start:
    learnt from the mapping, probed for every process; the ranks have every collective, and
    the dump says how long the library was mapped before its probes were in place."""
    need_root()
    libdir, copy = copy_lib("fr-exec-libcopy")
    tr, dump_dir = start_recorder("lib2")
    try:
        job = Job(2, "healthy", steps=3, extra=["--init-after-go"], name="exec-lib2",
                  env={"LD_LIBRARY_PATH": libdir})
        pids = run_job(tr, job)
        # the file replaced while attached (a package upgrade: new inode, same path): the
        # next job maps the new inode, which is learnt like any new file
        ino = os.stat(copy).st_ino
        shutil.copy(copy, copy + ".new")
        os.replace(copy + ".new", copy)
        assert os.stat(copy).st_ino != ino
        job2 = Job(2, "healthy", steps=3, extra=["--init-after-go"], name="exec-lib2b",
                   env={"LD_LIBRARY_PATH": libdir})
        pids2 = run_job(tr, job2)
    finally:
        assert tr.stop() == 0, tr.err.text()
    assert len(re.findall(r"probing " + re.escape(copy) + " for every process", tr.err.text())) == 2, \
        tr.err.text()
    check_exact(dumps_of(dump_dir, pids2), 2, 3)
    m = re.search(r"probing " + re.escape(copy) +
                  r" for every process: (\d+) probes, ([0-9.]+) ms after pid (\d+) mapped it",
                  tr.err.text())
    assert m, tr.err.text()
    print(f"exec-map -> attached: {m.group(2)} ms ({m.group(1)} probes)")
    dumps = dumps_of(dump_dir, pids)
    check_exact(dumps, 2, 3)
    for d in dumps.values():
        assert d["nccl_library"] == copy, d["nccl_library"]
        late = [x for x in d["probes_late"] if x["library"] == copy]
        # the first rank to map it waited for the attach; the other may have mapped it after
        if d["pid"] == int(m.group(3)):
            assert len(late) == 1 and late[0]["unrecorded_ms"] > 0, d["probes_late"]
            assert late[0]["attached_ns"] > late[0]["mapped_ns"], late


def test_fr_exec_processes_without_nccl_not_recorded():
    """A CUDA process without NCCL, started after the recorder, maps the probed libcudart:
    its calls stop at the BPF filter (never reach user space) and it is never recorded."""
    need_root()
    tr, dump_dir = start_recorder("nonccl")
    try:
        # a job first, so the sim libcudart is probed for every process
        job = Job(1, "healthy", steps=1, name="exec-nonccl")
        pids = run_job(tr, job)
        w = Workload([os.path.join(WL, "sim_train"), "--steps", "20"])
        w.go()
        w.wait_done()
        w.finish()
        other = w.pid
    finally:
        assert tr.stop() == 0, tr.err.text()
    text = tr.err.text()
    assert re.search(r"probing \S+libcudart\.so\.13 for every process", text), text
    assert f"recording pid {other} " not in text, text
    assert f"pid {other}: calls of a process without NCCL" not in text, text
    assert not os.path.exists(os.path.join(dump_dir, f"tptrace-fr.{os.uname().nodename}.{other}.json"))
    assert dumps_of(dump_dir, pids)


EXEC_SCRIPT = r"""
import ctypes, os, sys
lib = ctypes.CDLL(os.path.join(sys.argv[1], "libnccl.so.2"))
uid = ctypes.create_string_buffer(128)
assert lib.ncclGetUniqueId(uid) == 0
print("READY", os.getpid(), flush=True)
sys.stdin.readline()
os.execv("/bin/sleep", ["sleep", "1"])
"""


def test_fr_exec_process_that_execs():
    """A recorded process that execs into a program without NCCL: its recording ends with a
    dump (reason exec, replaced_by_exec, exit code unknown) and the new image is not recorded."""
    need_root()
    tr, dump_dir = start_recorder("execs")
    try:
        w = Workload(["python3", "-c", EXEC_SCRIPT, SIM_LIB])
        pid = w.pid
        assert tr.err.wait_for(lambda l: f"recording pid {pid} " in l, 15), tr.err.text()
        w.go()
        assert tr.err.wait_for(lambda l: f"pid {pid} called exec" in l, 15), tr.err.text()
        assert tr.err.wait_for(lambda l: f"dumped pid {pid} (exec)" in l, 15), tr.err.text()
        assert w.p.wait(15) == 0
    finally:
        assert tr.stop() == 0, tr.err.text()
    text = tr.err.text()
    assert text.count(f"recording pid {pid} ") == 1, text
    d = json.load(open(os.path.join(dump_dir, f"tptrace-fr.{os.uname().nodename}.{pid}.json")))
    assert d["dump_reason"] == "exec", d["dump_reason"]
    assert d["process"]["replaced_by_exec"] is True and d["process"]["exit_code"] is None, d["process"]
    assert d["comm"] == "python3", d["comm"]


def test_fr_exec_file_attach_failure_falls_back_per_process():
    """One library file whose system-wide probes fail: one line, its processes get probes of
    their own (still exact), and the other files keep being probed for every process."""
    need_root()
    libdir, copy = copy_lib("fr-exec-libfail")
    tr, dump_dir = start_recorder("fail", env={"TPTRACE_TEST_FR_FILE_FAIL": libdir})
    try:
        job = Job(2, "healthy", steps=3, extra=["--init-after-go"], name="exec-fail",
                  env={"LD_LIBRARY_PATH": libdir})
        pids = run_job(tr, job)
    finally:
        assert tr.stop() == 0, tr.err.text()
    text = tr.err.text()
    assert text.count(f"cannot probe {copy} for every process") == 1, text
    assert re.search(r"probing \S+libcudart\.so\.13 for every process", text), text
    dumps = dumps_of(dump_dir, pids)
    check_exact(dumps, 2, 3)
    assert all(d["nccl_library"] == copy for d in dumps.values())
