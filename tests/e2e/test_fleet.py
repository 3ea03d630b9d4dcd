"""The fleet harness (tests/fleet) small: 2 hosts x 2 ranks as network namespaces, one
`tptrace fr -a --scope netns` per host, a real Prometheus. `make soak` runs the same scenarios
at 32 hosts x 8 ranks (tests/fleet/soak.py). What each scenario asserts: tests/fleet/
scenarios.py."""
import os
import shutil
import sys

from lib import ROOT, Skip, need_root

sys.path.insert(0, os.path.join(ROOT, "tests", "fleet"))
import fleet as fleetlib  # noqa: E402
import scenarios  # noqa: E402

HOSTS, RPH, STALL = 2, 2, 3


def _fleet(name, prometheus=False, **kw):
    need_root()
    if not shutil.which("ip"):
        raise Skip("no ip(8)")
    if prometheus and not shutil.which("prometheus"):
        raise Skip("no prometheus")
    return fleetlib.Fleet(HOSTS, RPH, name=name, stall_timeout=STALL, prometheus=prometheus,
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
    with _fleet("partition") as f:
        scenarios.run_fault(f, "partition", part_host=1)


def test_fleet_straggler_alert_and_verdict():
    with _fleet("straggler", prometheus=True) as f:
        scenarios.run_straggler(f, culprit=3)
