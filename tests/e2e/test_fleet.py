"""The fleet harness (tests/fleet) small: 2 hosts x 2 ranks as network namespaces, one
`tptrace fr -a --scope netns` per host, a real Prometheus. `make soak` runs the same scenarios
at 32 hosts x 8 ranks (tests/fleet/soak.py). What each scenario asserts: tests/fleet/
scenarios.py."""
import os
import shutil
import sys
import time

from lib import ROOT, Skip, need_root

sys.path.insert(0, os.path.join(ROOT, "tests", "fleet"))
import fleet as fleetlib  # noqa: E402
import scenarios  # noqa: E402

HOSTS, RPH, STALL = 2, 2, 3


def _fleet(name, prometheus=False, hosts=HOSTS, **kw):
    need_root()
    if not shutil.which("ip"):
        raise Skip("no ip(8)")
    if prometheus and not shutil.which("prometheus"):
        raise Skip("no prometheus")
    return fleetlib.Fleet(hosts, RPH, name=name, stall_timeout=STALL, prometheus=prometheus,
                          **kw)


def test_fleet_scope_hosts_record_only_their_ranks():
    """Each host's recorder (-a --scope netns) dumps exactly its own ranks, never the other
    host's (check_scope); trigger dumps of a healthy job blame no one."""
    with _fleet("scope") as f:
        scenarios.run_healthy(f)


def test_fleet_healthy_mixed_start_no_culprit_no_alert():
    """Recorders started before, during and after the job's start; Prometheus scrapes both;
    no culprit from a trigger's dumps nor from the final dumps of all recorders stopped at
    once; no straggler alert."""
    with _fleet("healthy", prometheus=True) as f:
        scenarios.run_healthy(f, when="mixed")


def test_fleet_healthy_one_recorder_for_all_hosts():
    """One recorder scoped to the fleet's cgroup records every host's ranks: no culprit."""
    with _fleet("one") as f:
        if not f.cg:
            raise Skip("no cgroup v2 hierarchy")
        scenarios.run_healthy(f, one_recorder=True)


def test_fleet_missing_rank():
    with _fleet("missing") as f:
        scenarios.run_fault(f, "missing", culprit=3)


def test_fleet_dead_rank():
    with _fleet("dead") as f:
        scenarios.run_fault(f, "dead", culprit=2)


def test_fleet_mismatched_collective():
    with _fleet("mismatch") as f:
        scenarios.run_fault(f, "mismatch", culprit=1)


def test_fleet_partitioned_host():
    """Three hosts: a leaf host's link down, then the host of the root's process (the
    simulated NCCL's hub): each time the first verdict is partitioned_host naming that host
    and its ranks, and nothing else blames ranks; then two hosts (h1's link down: its own
    interface says which side it is)."""
    with _fleet("partition", hosts=3) as f:
        scenarios.run_fault(f, "partition", part_host=2)
        scenarios.run_fault(f, "partition", part_host=0)
    with _fleet("partition2") as f:
        scenarios.run_fault(f, "partition", part_host=1)


def test_fleet_partitioned_two_hosts_in_the_switch_names_the_link():
    """Two hosts cut inside the switch (h1's port leaves the bridge, every interface stays
    up): which side lost the network cannot be told; the link is named (both ends), no rank
    blamed as a cause."""
    with _fleet("partition-sw") as f:
        scenarios.run_fault(f, "partition", part_host=1, switch=True)


def test_fleet_straggler_alert_and_verdict():
    with _fleet("straggler", prometheus=True) as f:
        scenarios.run_straggler(f, culprit=3)


def test_fleet_straggler_recorder_attached_after_comm_init():
    """Host 0's recorder starts before the job, host 1's during its start (after comm init):
    the straggler on host 1 has a local comm id, yet its alert fires (peers by comm_group)
    and the dumps name it."""
    with _fleet("straggler-mixed", prometheus=True) as f:
        scenarios.run_straggler(f, culprit=3, when="mixed")


def test_fleet_tcp_transport_reduces_and_partition_blocks():
    """The simulated NCCL across hosts: a 2 x 2 job's allreduce really sums over TCP (every
    rank's check line); a host whose link goes down stops the whole job (no rank errors out
    or exits: they block in the collective, as real NCCL), and the job goes on once the link
    is back (TCP retransmits)."""
    with _fleet("tcp") as f:
        f.new_run()
        try:
            f.start_job(steps=6, step_ms=1)
            f.go()
            # every rank done before any exits: the root rank's process leaving closes the
            # remote ranks' links (ncclRemoteError), and a loaded host's rank 2 was still
            # before its DONE when rank 0 had finished (make test-loaded)
            for w in f.ranks:
                w.wait_done(f.bound)
            for w in f.ranks:
                line = w.out.wait_for(lambda l: l.startswith("# allreduce_check"), 5)
                got, want = (line.split()[2].split("=")[1], line.split()[3].split("=")[1])
                assert got == want, line
                assert w.finish() == 0, w.err.text()
            f.kill_job()
            f.start_job(step_ms=20)
            f.go()
            f.wait_step(2)
            f.partition(1)
            # blocked: no rank announces a step for 3 s (150 steps of 20 ms); a job that
            # keeps going for 60 s was not partitioned
            t0 = time.time()
            last, quiet_since = None, time.time()
            while time.time() - quiet_since < 3:
                now = sum(len(w.out.lines) for w in f.ranks)
                if now != last:
                    last, quiet_since = now, time.time()
                assert time.time() - t0 < 60, "the job went on through the partition"
                time.sleep(0.2)
            for r, w in enumerate(f.ranks):
                assert w.p.poll() is None, f"rank {r} exited during the partition: {w.err.text()}"
                assert "error" not in w.err.text().lower(), w.err.text()
            top = max(int(l.split()[2]) for w in f.ranks for l in w.out.lines
                      if l.startswith("# step "))
            f.heal()
            f.wait_step(top + 2)
        finally:
            f.end_run()


def test_fleet_scope_pidns_records_only_that_namespace():
    """-a --scope pidns=PATH: a 2-rank job inside the pid namespace is recorded, an identical
    job outside it is not (neither dumped nor named)."""
    import glob
    import json
    import signal
    import subprocess
    from lib import TPTRACE, WL, Tracer, Workload, tmp_path
    need_root()
    d = tmp_path("fleet-pidns")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sleep", "600"])
    tracer = None
    jobs = []
    try:
        def child():    # unshare forks sleep: wait for it to exist
            kids = subprocess.run(["pgrep", "-P", str(ns.pid)], stdout=subprocess.PIPE,
                                  text=True).stdout.split()
            return int(kids[0]) if kids else None
        from lib import wait_until
        inner = wait_until(child, 60, "the process in the new pid namespace")
        tracer = Tracer(["fr", "-a", "--scope", f"pidns=/proc/{inner}/ns/pid", "--dump-dir",
                         os.path.join(d, "dumps"), "--no-stacks", "-v"], ready=False)
        assert tracer.err.wait_for(lambda l: "flight recorder on" in l, 60), tracer.err.text()
        rank = os.path.join(WL, "nccl_rank")
        for where, enter in (("in", ["nsenter", "-t", str(inner), "-p"]), ("out", [])):
            ranks = [Workload(enter + [rank, "--rank", str(r), "--nranks", "2", "--id-file",
                                       os.path.join(d, f"{where}.id"), "--steps", "20"],
                              wait_ready=False) for r in range(2)]
            jobs += ranks
            for w in ranks:
                w.wait_ready()
                w.go()
            for w in ranks:
                w.wait_done()
                assert w.finish() == 0, w.err.text()
        assert tracer.stop() == 0, tracer.err.text()
        cmds = []
        for p in glob.glob(os.path.join(d, "dumps", "tptrace-fr.*.json")):
            with open(p) as f:
                cmds.append(json.load(f)["cmdline"])
        assert len(cmds) == 2 and all("in.id" in c for c in cmds), cmds
    finally:
        for w in jobs:
            w.kill()
        if tracer and tracer.p.poll() is None:
            tracer.p.send_signal(signal.SIGINT)
            tracer.wait()
        ns.kill()
        ns.wait()


def _prog_runs(pid):
    """Runs of the uprobe programs (cuda_*) process pid holds (kernel.bpf_stats_enabled)."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                ids |= {int(l.split()[1]) for l in f if l.startswith("prog_id:")}
        except OSError:
            pass
    import json
    import subprocess
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], check=True,
                                      stdout=subprocess.PIPE, text=True).stdout)
    return sum(p.get("run_cnt", 0) for p in progs
               if p["id"] in ids and p.get("name", "").startswith("cuda_"))


def test_fleet_scope_other_hosts_calls_cost_one_run():
    """Two hosts' recorders (-a --scope netns) on one kernel: host a's job runs, host b's rank
    idles. b's probes are system-wide, so its program runs on a's calls, but only at their
    entries (out of scope: the entry tells the kernel to skip the return) while a's own runs at
    entries and returns: b's runs < a's <= 2 x b's (docs/benchmarks.md "Many recorders on one
    kernel"). With entry and return links (TPTRACE_NO_UPROBE_SESSION=1) b's equal a's."""
    import signal
    import subprocess
    from lib import TPTRACE, WL, Lines, Workload, kernel_at_least, tmp_path
    need_root()
    if not shutil.which("ip") or not shutil.which("bpftool"):
        raise Skip("no ip(8) or bpftool")
    if not kernel_at_least(6, 13):
        raise Skip("no uprobe sessions before linux 6.13")
    d = tmp_path("fleet-runs")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tag = f"tpr{os.getpid()}"
    knob = "/proc/sys/kernel/bpf_stats_enabled"
    with open(knob) as f:
        old = f.read().strip()
    rank = os.path.join(WL, "nccl_rank")
    jobs, recs = [], {}
    try:
        for h in "ab":
            subprocess.run(["ip", "netns", "add", f"{tag}-{h}"], check=True)
        for h in "ba":      # b first: its recorder learns the library files from its rank
            w = Workload(["ip", "netns", "exec", f"{tag}-{h}", rank, "--rank", "0", "--nranks",
                          "1", "--id-file", os.path.join(d, f"{h}.id"), "--steps", "30"])
            jobs.append(w)
            r = subprocess.Popen(["ip", "netns", "exec", f"{tag}-{h}", TPTRACE, "fr", "-a", "-v",
                                  "--scope", "netns", "--no-stacks", "--host-id", h,
                                  "--dump-dir", os.path.join(d, h)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            r.errl = Lines(r.stderr)
            recs[h] = r
            assert r.errl.wait_for(lambda l: l.startswith(f"tptrace: recording pid {w.pid} "),
                                   120), r.errl.text()
            assert r.errl.wait_for(lambda l: "flight recorder on" in l, 120), r.errl.text()
            if "uprobe sessions unavailable" in r.errl.text():
                raise Skip("this kernel has no uprobe session links")
        with open(knob, "w") as f:
            f.write("1")
        before = {h: _prog_runs(r.pid) for h, r in recs.items()}
        jobs[1].go()        # host a's job: 30 steps of collectives and syncs
        jobs[1].wait_done()
        after = {h: _prog_runs(r.pid) for h, r in recs.items()}
        runs = {h: after[h] - before[h] for h in recs}
        assert runs["b"] > 0, f"b's system-wide probes never ran on a's calls: {runs}"
        assert runs["b"] < runs["a"] <= 2 * runs["b"], \
            f"out of scope, b's program should run at a's entries only: {runs}"
    finally:
        with open(knob, "w") as f:
            f.write(old)
        for r in recs.values():
            if r.poll() is None:
                r.send_signal(signal.SIGINT)
            r.wait(120)
        for w in jobs:
            w.kill()
        for h in "ab":
            subprocess.run(["ip", "netns", "del", f"{tag}-{h}"], stderr=subprocess.DEVNULL)
