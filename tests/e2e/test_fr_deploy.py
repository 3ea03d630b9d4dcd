"""Tier 2: the flight recorder's deployment files (deploy/). The systemd unit passes
`systemd-analyze verify` and its capability set is enough for `tptrace fr` to record and dump
a job (run under exactly that bounding set); the DaemonSet has the fields the recorder needs."""
import os
import shutil
import stat
import subprocess
from lib import ROOT, TPTRACE, Skip, need_root, tmp_path
from ncclib import Job

SERVICE = os.path.join(ROOT, "deploy", "tptrace-fr.service")
DAEMONSET = os.path.join(ROOT, "deploy", "daemonset.yaml")
CAPS = {"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_SYS_NICE"}


def unit_settings():
    """[Service] key -> list of values (keys may repeat)"""
    out, section = {}, None
    with open(SERVICE) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("["):
                section = line.strip("[]")
                continue
            k, v = line.split("=", 1)
            out.setdefault((section, k), []).append(v)
    return out


def test_fr_service_unit_verifies_and_is_hardened():
    if not shutil.which("systemd-analyze"):
        raise Skip("systemd-analyze not installed (Debian package systemd)")
    s = unit_settings()
    svc = lambda k: s.get(("Service", k), [None])[-1]
    assert set(svc("CapabilityBoundingSet").split()) == CAPS, svc("CapabilityBoundingSet")
    assert set(svc("AmbientCapabilities").split()) == CAPS
    want = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
            "PrivateTmp": "yes", "Restart": "on-failure", "ReadWritePaths": "/var/lib/tptrace",
            "StateDirectory": "tptrace", "StateDirectoryMode": "0700"}
    assert {k: svc(k) for k in want} == want
    argv = svc("ExecStart").split()
    assert argv[:3] == ["/usr/local/sbin/tptrace", "fr", "-a"], argv
    assert argv[argv.index("--dump-dir") + 1] == "/var/lib/tptrace", argv
    # verify checks that ExecStart's binary exists: point it at this build's
    d = tmp_path("fr-deploy-unit")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    unit = os.path.join(d, "tptrace-fr.service")
    with open(SERVICE) as f:
        text = f.read()
    with open(unit, "w") as f:
        f.write(text.replace("/usr/local/sbin/tptrace", TPTRACE))
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    # verify exits 0 on settings it ignores: any line about the unit is a failure
    lines = [l for l in p.stdout.splitlines() if "tptrace-fr.service" in l or unit in l]
    assert p.returncode == 0 and not lines, p.stdout


def capped(caps, name):
    """a wrapper that runs this build's tptrace as root with only caps in its bounding set"""
    d = tmp_path(name)
    os.makedirs(d, exist_ok=True)
    w = os.path.join(d, "tptrace-capped")
    want = ",".join(["-all"] + ["+" + c[4:].lower() for c in sorted(caps)])
    with open(w, "w") as f:
        f.write(f"#!/bin/sh\nexec setpriv --no-new-privs --inh-caps=-all --bounding-set={want} "
                f"{TPTRACE} \"$@\"\n")
    os.chmod(w, 0o755)
    return w


def record_with(caps, name):
    import lib
    import ncclib
    job = Job(2, "size", steps=2, extra=["--init-after-go"], name=name)
    saved = lib.TPTRACE
    lib.TPTRACE = capped(caps, name)
    try:
        job.record()
        job.run_clean()
    finally:
        lib.TPTRACE = saved
        job.kill()
    return job


def test_fr_service_capabilities_suffice():
    """tptrace fr under exactly the unit's capability set records a job and dumps it; without
    CAP_SYS_PTRACE, CAP_BPF or CAP_PERFMON it cannot: the set is not larger than it looks nor smaller."""
    need_root()
    if not shutil.which("setpriv"):
        raise Skip("setpriv not installed (Debian package util-linux)")
    job = record_with(CAPS, "fr-deploy-caps")
    dumps = job.dumps()
    assert sorted(dumps) == [0, 1], (sorted(dumps), job.tracer.err.text())
    assert all(len(d["entries"]) > 0 for d in dumps.values())
    assert "cannot run at nice" not in job.tracer.err.text(), job.tracer.err.text()
    # without CAP_SYS_NICE: recorded all the same, at the priority it started with, said once
    job = record_with(CAPS - {"CAP_SYS_NICE"}, "fr-deploy-no-nice")
    assert sorted(job.dumps()) == [0, 1], job.tracer.err.text()
    said = [l for l in job.tracer.err.lines if " nice " in l]
    assert said == ["tptrace: cannot run at nice -10: Permission denied (recording goes on; its "
                    "dumps may come late on a busy host)"], said
    for missing in ("CAP_SYS_PTRACE", "CAP_BPF", "CAP_PERFMON"):
        failed = False
        try:
            record_with(CAPS - {missing}, f"fr-deploy-no-{missing.lower()}")
        except AssertionError:
            failed = True
        assert failed, f"recorded without {missing}: the unit would not need it"


def test_fr_daemonset_fields():
    import yaml
    with open(DAEMONSET) as f:
        ds = yaml.safe_load(f)
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    sel = ds["spec"]["selector"]["matchLabels"]
    assert all(ds["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())
    [c] = spec["containers"]
    sc = c["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert {"CAP_" + x for x in sc["capabilities"]["add"]} == CAPS, sc["capabilities"]
    assert sc.get("privileged") is False and sc["allowPrivilegeEscalation"] is False
    assert sc["runAsUser"] == 0
    args = c["args"]
    assert args[:2] == ["fr", "-a"], args
    dump_dir = args[args.index("--dump-dir") + 1]
    metrics = args[args.index("--metrics") + 1]
    assert metrics == "$(POD_IP):9464", "binds the pod's address, never all interfaces"
    assert [e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if e["name"] == "POD_IP"] \
        == ["status.podIP"]
    assert [(p["containerPort"], p.get("protocol", "TCP")) for p in c["ports"]] == [(9464, "TCP")]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    by_path = {m["mountPath"]: vols[m["name"]]["hostPath"]["path"] for m in mounts.values()}
    assert by_path == {"/sys/kernel/btf": "/sys/kernel/btf", dump_dir: "/var/lib/tptrace"}, \
        by_path
    assert mounts["btf"]["readOnly"] is True
    assert not any("debug" in p for p in by_path), "uprobes attach without tracefs"
    if "readinessProbe" in c:
        assert c["readinessProbe"]["httpGet"]["port"] in (9464, "metrics")
