"""Tier 2: the flight recorder's Prometheus metrics (`tptrace fr --metrics ADDR:PORT
--metrics-file PATH`, README "Metrics"). A 4-rank simulated NCCL job hangs (rank 1 stops calling
NCCL and sleeps, the others wait for it); `tptrace fr -a` records it; promtool checks the text,
the real Prometheus server scrapes it and its HTTP API names the rank behind; deploy/alerts.yml
passes `promtool check rules` and its alert expressions fire on the hang."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from lib import ROOT, Skip, Tracer, need_root, tmp_path
from ncclib import Job

NRANKS = 4
CULPRIT = 1
ALERTS = os.path.join(ROOT, "deploy", "alerts.yml")


def need_prometheus():
    for tool in ("promtool", "prometheus"):
        if not shutil.which(tool):
            raise Skip(f"{tool} not installed (Debian package prometheus)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.headers.get("Content-Type"), r.read().decode()


def promtool_metrics(text):
    p = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p.returncode, p.stdout


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$')


def samples(text):
    """{(name, labels): value}"""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, line
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def untimed(text):
    """the text without the values that move with the clock (ages, durations)"""
    return [re.sub(r" \S+$", " T", l) if re.match(r"^\w+_seconds\{", l) else l
            for l in text.splitlines()]


def listeners(port):
    """local addresses listening on port, from /proc/net/tcp and tcp6 (state 0A)"""
    found = []
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(f) as fh:
            for line in fh.readlines()[1:]:
                local, st = line.split()[1], line.split()[3]
                addr, p = local.split(":")
                if int(p, 16) == port and st == "0A":
                    found.append((f, addr))
    return found


def query(prom_port, expr):
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        d = json.load(r)
    assert d["status"] == "success", d
    return d["data"]["result"]


def start_prometheus(d, target_port):
    port = free_port()
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                f"rule_files:\n  - {ALERTS}\n"
                "scrape_configs:\n  - job_name: tptrace_fr\n"
                # the NCCL job's id is the job label: keep it (else exported_job)
                "    honor_labels: true\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{target_port}']\n")
    log = open(os.path.join(d, "prometheus.log"), "w")
    p = subprocess.Popen(["prometheus", f"--config.file={cfg}",
                          f"--storage.tsdb.path={os.path.join(d, 'tsdb')}",
                          f"--web.listen-address=127.0.0.1:{port}"],
                         stdout=log, stderr=subprocess.STDOUT)
    return p, port


def wait_until(fn, timeout, what):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError) as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


def test_fr_metrics_prometheus_names_stalled_rank():
    """the hang seen through Prometheus: promtool accepts the text, the server scrapes it, its
    API says rank 1 is behind on the world comm and 0,2,3 are stalled waiting; the file holds
    the same text; the endpoint listens on 127.0.0.1 only"""
    need_root()
    need_prometheus()
    job_id = f"tptrace-metrics-{os.getpid()}"
    job = Job(NRANKS, "idle", steps=3, culprit=CULPRIT, name="metrics",
              env={"TORCHELASTIC_RUN_ID": job_id, "SECRET_TOKEN": "hunter2"},
              extra=["--init-after-go", "--announce"])
    mport = free_port()
    mfile = os.path.join(job.dir, "tptrace_fr.prom")
    prom = None
    tr = Tracer(["fr", "-a", "--dump-dir", job.dump_dir, "--stall-timeout", "1",
                 "--metrics", f"127.0.0.1:{mport}", "--metrics-file", mfile], ready=False)
    try:
        assert tr.err.wait_for(lambda l: "flight recorder on" in l, 30), tr.err.text()
        for p in job.pids():
            assert tr.err.wait_for(lambda l, p=p: f"recording pid {p} " in l, 10), tr.err.text()
        job.go()
        assert job.ranks[CULPRIT].out.wait_for(lambda l: l.startswith("# culprit idle"), 30)
        # bound to the address given, nowhere else
        assert listeners(mport) == [("/proc/net/tcp", "0100007F")], listeners(mport)

        mine = f'job="{job_id}"'
        # the others are stalled (pending work, no progress for 1 s); scraped and rendered
        text = wait_until(lambda: (lambda t: t if t.count("tptrace_fr_stalled{") and sum(
            1 for l in t.splitlines() if l.startswith("tptrace_fr_stalled{") and mine in l
            and l.endswith(" 1")) == NRANKS - 1 else None)(scrape(mport)[1]), 30, "stalled ranks")
        ctype, text = scrape(mport)
        assert ctype.startswith("text/plain; version=0.0.4"), ctype
        rc, out = promtool_metrics(text)
        assert rc == 0, (out, text)
        assert "hunter2" not in text and "nccl_rank" not in text and "--scenario" not in text
        s = samples(text)
        procs = {l for (n, l) in s if n == "tptrace_fr_process_exited" and mine in l}
        assert len(procs) == NRANKS, procs
        for r in range(NRANKS):
            enq = [v for (n, l), v in s.items()
                   if n == "tptrace_fr_coll_seq_enqueued" and mine in l and f'rank="{r}"' in l]
            assert len(enq) == 1, (r, enq)
        assert s[("tptrace_fr_events_dropped_unknown", '{host="%s"}' % socket.gethostname())] == 0
        # the file: the same rendering, written atomically (no temp file left)
        with open(mfile) as f:
            ftext = f.read()
        assert untimed(ftext) == untimed(scrape(mport)[1]), (ftext, text)
        assert os.listdir(os.path.dirname(mfile)).count("tptrace_fr.prom") == 1
        assert not [n for n in os.listdir(job.dir) if n.startswith("tptrace_fr.prom.")]
        # 404 elsewhere
        try:
            scrape(mport, "/")
            raise AssertionError("/ served")
        except urllib.error.HTTPError as e:
            assert e.code == 404

        # the real Prometheus server scrapes it; its API names the ranks
        pdir = os.path.join(job.dir, "prometheus")
        os.makedirs(pdir)
        prom, pport = start_prometheus(pdir, mport)
        stalled = wait_until(lambda: query(pport, f'tptrace_fr_stalled{{{mine}}} == 1'), 60,
                             "Prometheus scrape")
        assert sorted(int(r["metric"]["rank"]) for r in stalled) == [0, 2, 3], stalled
        # the rank behind: its last enqueued seq on a comm is below the others'
        behind = query(pport, 'tptrace_fr_coll_seq_enqueued{%s} < on(job, comm) group_left() '
                              'max by (job, comm) (tptrace_fr_coll_seq_enqueued{%s})' % (mine, mine))
        assert [int(r["metric"]["rank"]) for r in behind] == [CULPRIT], behind
        in_call = query(pport, f'tptrace_fr_threads_in_call{{{mine}}} > 0')
        assert sorted(int(r["metric"]["rank"]) for r in in_call) == [0, 2, 3], in_call
        # deploy/alerts.yml, loaded by the server: the stall alert is pending or firing
        alerts = wait_until(lambda: [a for a in query(pport, 'ALERTS{alertname="TptraceFrStalled"}')
                                     if a["metric"].get("job") == job_id], 30, "stall alert")
        assert {int(a["metric"]["rank"]) for a in alerts} == {0, 2, 3}, alerts

        # dumps by reason: SIGUSR2 on a job with a job id writes a trigger for the job, and
        # the recorder answers it: 4 "trigger" dumps counted
        tr.p.send_signal(signal.SIGUSR2)
        assert tr.err.wait_for(
            lambda l: sum(1 for x in tr.err.lines if "(trigger " in x) >= NRANKS, 20)
        host = socket.gethostname()
        wait_until(lambda: samples(scrape(mport)[1]).get(
            ("tptrace_fr_dumps_total", '{host="%s",reason="trigger"}' % host), 0) >= NRANKS, 10,
            "trigger dumps counted")
    finally:
        if prom:
            prom.terminate()
            prom.wait(20)
        job.kill()
        assert tr.stop() == 0, tr.err.text()
    # the final rendering stays in the file: the final dumps are counted there
    with open(mfile) as f:
        s = samples(f.read())
    assert s[("tptrace_fr_dumps_total", '{host="%s",reason="trigger"}' % host)] >= NRANKS


def test_fr_metrics_port_in_use_refuses_start():
    """a metrics port already taken: one clear line, exit 1, nothing recorded"""
    need_root()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        tr = Tracer(["fr", "-a", "--dump-dir", tmp_path("fr-metrics-inuse"),
                     "--metrics", f"127.0.0.1:{port}"], ready=False)
        rc = tr.wait(30)
    assert rc == 1, tr.err.text()
    assert tr.err.lines == [f"tptrace: cannot serve metrics on 127.0.0.1:{port}: "
                            "Address already in use"], tr.err.lines


def test_fr_metrics_bad_address():
    """no default address: ':PORT' and a name are refused (argp-free, one line)"""
    for bad in (f":{free_port()}", "localhost:9464", "127.0.0.1:0", "127.0.0.1:x", "[::1]9464"):
        tr = Tracer(["fr", "-a", "--metrics", bad], ready=False)
        assert tr.wait(30) == 1, (bad, tr.err.text())
        assert len(tr.err.lines) == 1 and "invalid --metrics" in tr.err.lines[0], tr.err.lines


def test_fr_metrics_file_unwritable_recording_goes_on():
    """a metrics file in a missing directory: one line, recording and dumps go on; once the
    directory exists the file appears"""
    need_root()
    d = tmp_path("fr-metrics-unwritable")
    shutil.rmtree(d, ignore_errors=True)
    job = Job(2, "healthy", steps=2, extra=["--init-after-go"], name="metrics-unwritable")
    mfile = os.path.join(d, "sub", "m.prom")
    try:
        job.record(["--metrics-file", mfile])
        assert job.tracer.err.wait_for(lambda l: "cannot write metrics file" in l, 10), \
            job.tracer.err.text()
        time.sleep(2.5)     # two more renderings: still one line
        bad = [l for l in job.tracer.err.lines if "metrics file" in l]
        assert bad == [f"tptrace: cannot write metrics file {mfile}: No such file or directory "
                       "(recording goes on)"], bad
        job.dump_now()      # recording went on
        os.makedirs(os.path.dirname(mfile))
        wait_until(lambda: os.path.exists(mfile), 10, "metrics file")
        with open(mfile) as f:
            assert promtool_metrics(f.read())[0] == 0 if shutil.which("promtool") else True
        job.go()
        job.wait_done()
        for w in job.ranks:
            assert w.finish() == 0
        assert job.tracer.wait(30) == 0, job.tracer.err.text()
    finally:
        job.kill()


def test_fr_metrics_alert_rules():
    """deploy/alerts.yml: promtool check rules, and its unit test (promtool test rules
    deploy/alerts_test.yml)"""
    need_prometheus()
    p = subprocess.run(["promtool", "check", "rules", ALERTS], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
    assert "SUCCESS" in p.stdout, p.stdout
    # the straggler alert on synthetic series: fires for the lagging rank only, after 15 s
    # (deploy/alerts_test.yml)
    p = subprocess.run(["promtool", "test", "rules", os.path.join(ROOT, "deploy", "alerts_test.yml")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout
    assert "SUCCESS" in p.stdout, p.stdout
