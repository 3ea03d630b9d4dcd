"""A fleet on one machine (README "A fleet you can run here"): hosts as network namespaces on
a bridge, each with its NCCL ranks (tests/workloads/nccl_rank over the simulated NCCL's TCP
transport) and its own `tptrace fr -a --scope netns` recorder serving metrics on its own
address; a real Prometheus (Debian's) scrapes them all and evaluates deploy/alerts.yml.

Layout, for a fleet tagged T (tpf<harness pid>, so a dead harness's leftovers are found):
  netns T-br   bridge br0 10.231.K.254/24, Prometheus on 127.0.0.1:9090 (loopback only)
  netns T-hN   eth0 10.231.K.(N+1)/24 (veth into br0), its ranks and its recorder
  cgroup v2    <root>/T/hN holds host N's ranks (a one-recorder run scopes to <root>/T)
Everything is torn down by close() (also on failure: use `with Fleet(...) as f`), and
sweep() removes what a killed harness left behind.

Waits are on events (handshake lines, dump files, metric and alert values), each bounded by
a generous timeout that only turns a hang into a failure."""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from lib import TPTRACE, WL, Lines, Workload, tmp_path  # noqa: E402

FR_TOOL = os.path.join(os.path.dirname(TPTRACE), "tptrace-fr")
NCCL_RANK = os.path.join(WL, "nccl_rank")
ALERTS = os.path.join(ROOT, "deploy", "alerts.yml")
METRICS_PORT = 9400
PROM_PORT = 9090


def sh(*argv, check=True):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode:
        raise RuntimeError(f"{' '.join(argv)}: rc={p.returncode} {p.stderr.strip()}")
    return p


def cgroup2_root():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                return left.split()[4]
    return None


def sweep():
    """Removes namespaces and cgroups of fleets whose harness process is gone."""
    for name in sh("ip", "netns", "list", check=False).stdout.split():
        if name.startswith("tpf") and "-" in name:
            pid = name[3:].split("-")[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                sh("ip", "netns", "del", name, check=False)
    root = cgroup2_root()
    for d in glob.glob(os.path.join(root, "tpf*")) if root else []:
        pid = os.path.basename(d)[3:]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _rm_cgroup(d)


def _rm_cgroup(d):
    for sub in sorted(glob.glob(os.path.join(d, "*/")), reverse=True):
        _rm_cgroup(sub.rstrip("/"))
    procs = os.path.join(d, "cgroup.procs")
    if os.path.exists(procs):
        with open(procs) as f:
            for pid in f.read().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
    for _ in range(100):
        try:
            os.rmdir(d)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)     # teardown only: the killed processes leave the cgroup


class Recorder:
    def __init__(self, fleet, argv, host_id):
        self.host_id = host_id
        self.bound = fleet.bound
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out = Lines(self.p.stdout)
        self.err = Lines(self.p.stderr)

    def wait_on(self, timeout=None):
        timeout = timeout or self.bound
        line = self.err.wait_for(lambda l: "flight recorder on" in l, timeout)
        if not line:
            self.p.kill()
            raise AssertionError(f"recorder {self.host_id} did not start: {self.err.text()}")

    def stop(self, timeout=None):
        timeout = timeout or self.bound
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"recorder {self.host_id} did not exit: {self.err.text()}")


class Fleet:
    def __init__(self, hosts, ranks_per_host, name="fleet", stall_timeout=5, prometheus=True,
                 scope="netns", poll_ms=None):
        """scope: the recorders' --scope (netns: each host's own; "" none, to see the
        scope test fail); poll_ms: the ranks' watchdog poll (nccl_rank --poll-ms; None: its
        1 ms, 100 times PyTorch's: every poll is a probed cudaEventQuery, on a kernel shared
        by many recorders the bulk of the fleet's probe cost, docs/benchmarks.md "Many
        recorders on one kernel")"""
        self.poll_ms = poll_ms
        sweep()
        self.nhosts, self.rph = hosts, ranks_per_host
        self.nranks = hosts * ranks_per_host
        self.tag = f"tpf{os.getpid()}"
        self.stall_timeout = stall_timeout
        # bounds that only turn a hang into a failure: attaching -a recorders to hundreds of
        # processes on 2 shared cores takes minutes (uprobes registered per file, per recorder)
        self.bound = 60 + 3 * self.nranks
        self.scope = scope
        self.k = os.getpid() % 200 + 20
        self.dir = tmp_path(f"fleet-{name}")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.dump_dir = None
        self.recorders = {}
        self.ranks = []
        self.prom = None
        self.job_id = None
        self.runs = 0
        self.states_seen = {}
        self.last = {}
        self.down = {}
        self.t0 = time.time()
        self.cg = None
        self._netns = []
        try:
            self._build()
            if prometheus:
                self._start_prometheus()
        except BaseException:
            self.close()
            raise

    # ---- topology ----

    def ns(self, h):
        return f"{self.tag}-h{h}"

    def addr(self, h):
        return f"10.231.{self.k}.{h + 1}"

    def host_of(self, rank):
        return rank // self.rph

    def _build(self):
        br = f"{self.tag}-br"
        sh("ip", "netns", "add", br)
        self._netns.append(br)
        sh("ip", "-n", br, "link", "set", "lo", "up")
        sh("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", br, "addr", "add", f"10.231.{self.k}.254/24", "dev", "br0")
        sh("ip", "-n", br, "link", "set", "br0", "up")
        root = cgroup2_root()
        if root:
            self.cg = os.path.join(root, self.tag)
            os.makedirs(self.cg, exist_ok=True)
        for h in range(self.nhosts):
            ns, peer = self.ns(h), f"v{self.tag[3:]}x{h}"
            sh("ip", "netns", "add", ns)
            self._netns.append(ns)
            sh("ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", peer, "netns", br)
            sh("ip", "-n", br, "link", "set", peer, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(h)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            if self.cg:
                os.makedirs(os.path.join(self.cg, f"h{h}"), exist_ok=True)

    def partition(self, h, switch=False):
        """Takes host h's link down: a real partition (TCP just stops delivering). switch:
        its port leaves the bridge instead (a switch that fails inside: both ends keep their
        carrier, the host's interface stays up)."""
        if switch:
            sh("ip", "-n", f"{self.tag}-br", "link", "set", f"v{self.tag[3:]}x{h}", "nomaster")
        else:
            sh("ip", "-n", self.ns(h), "link", "set", "eth0", "down")
        self.down[h] = switch

    def heal(self):
        for h, switch in sorted(self.down.items()):
            if switch:
                sh("ip", "-n", f"{self.tag}-br", "link", "set", f"v{self.tag[3:]}x{h}",
                   "master", "br0")
            else:
                sh("ip", "-n", self.ns(h), "link", "set", "eth0", "up")
        self.down = {}

    # ---- Prometheus ----

    def _start_prometheus(self):
        cfg = os.path.join(self.dir, "prometheus.yml")
        targets = ", ".join(f"'{self.addr(h)}:{METRICS_PORT}'" for h in range(self.nhosts))
        with open(cfg, "w") as f:
            # 2 s: a recorder renders its metrics once a second in its loop, which a
            # loaded 2-core machine delays past a 1 s scrape timeout
            f.write("global:\n  scrape_interval: 2s\n  evaluation_interval: 1s\n"
                    f"rule_files: ['{ALERTS}']\n"
                    "scrape_configs:\n  - job_name: tptrace\n    scrape_timeout: 2s\n"
                    "    honor_labels: true\n"
                    f"    static_configs:\n      - targets: [{targets}]\n")
        data = os.path.join(self.dir, "prom-data")
        self.prom_log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.prom = subprocess.Popen(
            ["ip", "netns", "exec", f"{self.tag}-br", "prometheus", f"--config.file={cfg}",
             f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{PROM_PORT}"],
            stdout=self.prom_log, stderr=subprocess.STDOUT)
        end = time.time() + 60
        while time.time() < end:
            if self.prom.poll() is not None:
                raise AssertionError(f"prometheus exited: see {self.prom_log.name}")
            if self._prom_get("/-/ready", raw=True) == "ready":
                return
            time.sleep(0.2)
        raise AssertionError("prometheus not ready in 60 s")

    def _prom_get(self, path, raw=False):
        code = ("import sys, urllib.request\n"
                "try:\n"
                f"    r = urllib.request.urlopen('http://127.0.0.1:{PROM_PORT}' + sys.argv[1], "
                "timeout=5)\n"
                "    sys.stdout.write(r.read().decode())\n"
                "except Exception as e:\n"
                "    sys.exit(1)\n")
        p = subprocess.run(["ip", "netns", "exec", f"{self.tag}-br", sys.executable, "-c", code,
                            path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if p.returncode:
            return None
        if raw:
            return "ready" if "Ready" in p.stdout else p.stdout
        return json.loads(p.stdout)

    def prom_query(self, expr):
        r = self._prom_get("/api/v1/query?query=" + urllib.parse.quote(expr))
        return r["data"]["result"] if r and r.get("status") == "success" else None

    def prom_alerts(self):
        """Every alert Prometheus holds now: [{labels, state, ...}]"""
        r = self._prom_get("/api/v1/alerts")
        return r["data"]["alerts"] if r and r.get("status") == "success" else []

    def wait_scraped(self, timeout=None):
        """Waits until Prometheus scraped every host's recorder; the set it scraped."""
        want = {self.addr(h) for h in range(self.nhosts)}
        end = time.time() + (timeout or self.bound)
        got = set()
        while time.time() < end:
            got = self.scraped_hosts()
            if got >= want:
                break
            time.sleep(0.2)
        return got

    def scraped_hosts(self):
        """Hosts whose recorder Prometheus scraped successfully last time."""
        res = self.prom_query("up") or []
        return {r["metric"]["instance"].split(":")[0] for r in res if r["value"][1] == "1"}

    # ---- recorders ----

    def recorder_argv(self, h, extra=()):
        argv = ["ip", "netns", "exec", self.ns(h), TPTRACE, "fr", "-a"]
        if self.scope:
            argv += ["--scope", self.scope]
        return argv + ["--host-id", f"h{h}", "--dump-dir", self.dump_dir,
                       "--metrics", f"{self.addr(h)}:{METRICS_PORT}",
                       "--stall-timeout", str(self.stall_timeout)] + list(extra)

    def start_recorders(self, hosts=None, wait=True, extra=()):
        hosts = range(self.nhosts) if hosts is None else hosts
        for h in hosts:
            self.recorders[h] = Recorder(self, self.recorder_argv(h, extra) + ["-v"], f"h{h}")
        if wait:
            for h in hosts:
                self.recorders[h].wait_on()

    def start_one_recorder(self, extra=()):
        """One recorder for the whole fleet (no per-host recorders), scoped to the fleet's
        cgroup (no metrics)."""
        assert self.cg, "no cgroup v2 hierarchy"
        # in the harness's own namespaces: `ip netns exec` remounts /sys, hiding cgroup v2
        argv = [TPTRACE, "fr", "-a", "-v", "--scope",
                f"cgroup={self.cg}", "--host-id", "all", "--dump-dir", self.dump_dir,
                "--stall-timeout", str(self.stall_timeout)] + list(extra)
        self.recorders["all"] = Recorder(self, argv, "all")
        self.recorders["all"].wait_on()

    def stop_recorders(self):
        """SIGINT to every recorder at once (final dumps while the job runs on), then wait."""
        for r in self.recorders.values():
            if r.p.poll() is None:
                r.p.send_signal(signal.SIGINT)
        rcs = {h: r.stop() for h, r in self.recorders.items()}
        for h, r in self.recorders.items():
            with open(os.path.join(self.dir, f"recorder-{self.runs}-{r.host_id}.log"), "w") as f:
                f.write(r.err.text())
        self.recorders = {}
        return rcs

    # ---- one run: its own dump dir, recorders and job ----

    def new_run(self):
        self.runs += 1
        self.job_id = f"{self.tag}-j{self.runs}"
        self.dump_dir = os.path.join(self.dir, f"run{self.runs}")
        os.makedirs(self.dump_dir)
        self.states_seen = {}

    def end_run(self):
        try:
            if self.recorders:
                self.stop_recorders()
        finally:
            self.kill_job()
            self.heal()

    # ---- the job ----

    def start_job(self, scenario="healthy", culprit=1, steps=1000000, fault_step=None,
                  extra=(), step_ms=50, wait_ready=True):
        """Starts every rank (each in its host's namespace and cgroup) up to READY."""
        # a file per job, never one an earlier job of this run left: ranks that read a stale
        # id would wait on a root that is gone
        self.jobs = getattr(self, "jobs", 0) + 1
        id_file = os.path.join(self.dir, f"nccl-{self.runs}-{self.jobs}.id")
        if os.path.exists(id_file):
            os.unlink(id_file)
        self.ranks = []
        for r in range(self.nranks):
            h = self.host_of(r)
            argv = ["ip", "netns", "exec", self.ns(h), NCCL_RANK, "--rank", str(r),
                    "--nranks", str(self.nranks), "--id-file", id_file, "--steps", str(steps),
                    "--scenario", scenario, "--culprit", str(culprit), "--announce",
                    "--kernels", "1", "--compute-us", str(step_ms * 1000)]
            if fault_step is not None:
                argv += ["--fault-step", str(fault_step)]
            if self.poll_ms:
                argv += ["--poll-ms", str(self.poll_ms)]
            env = {"RANK": str(r), "WORLD_SIZE": str(self.nranks),
                   "LOCAL_RANK": str(r % self.rph), "TORCHELASTIC_RUN_ID": self.job_id,
                   "TPSIM_NCCL_SOCKET_ADDR": self.addr(h),
                   "TPSIM_NCCL_INIT_TIMEOUT_S": "300"}
            procs = os.path.join(self.cg, f"h{h}", "cgroup.procs") if self.cg else None

            def enter(procs=procs):
                if procs:
                    with open(procs, "w") as f:
                        f.write(str(os.getpid()))
            self.ranks.append(Workload(argv + list(extra), env=env, preexec_fn=enter,
                                       wait_ready=False))
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout=None):
        end = time.time() + (timeout or self.bound)
        for r, w in enumerate(self.ranks):
            line = w.out.wait_for(lambda l: l.startswith("READY"), max(1, end - time.time()))
            if not line:
                raise AssertionError(f"rank {r} never got READY: {self._proc_state(w.p.pid)} "
                                     f"stdout={w.out.text()[-300:]!r} "
                                     f"stderr={w.err.text()[-300:]!r}")
            w.pid = int(line.split()[1])

    @staticmethod
    def _proc_state(pid):
        """State, wchan and kernel stack of a process's threads, for a failure message."""
        out = []
        for tid in sorted(os.listdir(f"/proc/{pid}/task"))[:8] if os.path.exists(
                f"/proc/{pid}/task") else []:
            t = f"/proc/{pid}/task/{tid}"
            try:
                with open(f"{t}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()[0]
                with open(f"{t}/wchan") as f:
                    wchan = f.read()
                with open(f"{t}/comm") as f:
                    comm = f.read().strip()
                out.append(f"{tid} {comm} {st} {wchan}")
            except OSError:
                pass
        return f"pid {pid}: " + ("; ".join(out) or "gone")

    def go(self):
        for w in self.ranks:
            w.go()

    def wait_step(self, k, ranks=None, timeout=None):
        """Waits until every rank (of ranks) announced step >= k."""
        for r in ranks if ranks is not None else range(self.nranks):
            w = self.ranks[r]
            ok = w.out.wait_for(lambda l: l.startswith("# step ") and
                                int(l.split()[2]) >= k, timeout or self.bound)
            assert ok, f"rank {r} never reached step {k}: {w.out.text()[-500:]} " \
                       f"{w.err.text()[-500:]}"

    def step_now(self):
        """The newest step every rank announced."""
        def last(w):
            steps = [int(l.split()[2]) for l in w.out.text().splitlines()
                     if l.startswith("# step ")]
            return steps[-1] if steps else -1
        return min(last(w) for w in self.ranks)

    def kill_job(self):
        for w in self.ranks:
            w.kill()
        self.ranks = []

    # ---- dumps and verdicts ----

    def dumps(self):
        out = []
        for path in glob.glob(os.path.join(self.dump_dir, "tptrace-fr.*.json")):
            try:
                with open(path) as f:
                    d = json.load(f)
            except (OSError, ValueError):
                continue        # being renamed into place: read again later
            d["_path"], d["_mtime"] = path, os.stat(path).st_mtime
            # a state-first file (docs/fr-schema.md): the complete one replaces it
            d["_pending"] = d.get("stacks_pending") is True
            # when the dump's state was on disk: the complete file says when its state-first
            # file was; a state-first file, or a dump written once (no snapshot of its own:
            # --no-stacks, exited), is its own mtime
            w = d.get("state_written_ns")
            if isinstance(w, int):
                d["_state_time"] = w / 1e9
            elif d["_pending"] or not any(s.get("taken") == "dump" for s in d.get("stacks") or []):
                d["_state_time"] = d["_mtime"]
            else:
                raise AssertionError(f"{path}: a dump snapshot but no state_written_ns: the "
                                     "recorder did not write its state first")
            # every state time seen per host: a later round (another host's trigger, its
            # own stall) replaces a process's file, and with it when its first state was
            self.states_seen.setdefault(d["host"], set()).add(d["_state_time"])
            out.append(d)
        return out

    def triggers(self):
        """{id: (mtime, record)} of the trigger files in the dump dir."""
        out = {}
        for path in glob.glob(os.path.join(self.dump_dir, "tptrace-trigger.*.json")):
            try:
                with open(path) as f:
                    t = json.load(f)
                out[t["id"]] = (os.stat(path).st_mtime, t)
            except (OSError, ValueError, KeyError):
                pass
        return out

    def wait_dumps(self, pred, timeout=None, poll=0.05):
        """Polls the dump dir until pred(dumps) is true; returns (dumps, time seen). The
        dumps include state-first files (d["_pending"]): a pred that analyzes or checks
        stacks waits for complete ones."""
        timeout = timeout or self.bound
        end = time.time() + timeout
        while True:
            d = self.dumps()
            if pred(d):
                return d, time.time()
            if time.time() > end:
                raise AssertionError(f"dumps never matched in {timeout} s: "
                                     f"{sorted((x['host'], x['pid'], x['dump_reason']) for x in d)}")
            time.sleep(poll)

    def snapshot(self, name):
        """Copies the dump dir's dumps now (a later dump replaces a process's file)."""
        d = os.path.join(self.dir, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for p in glob.glob(os.path.join(self.dump_dir, "tptrace-fr.*.json")):
            shutil.copy2(p, d)
        return d

    def analyze(self, d=None):
        p = subprocess.run([FR_TOOL, "--json", d or self.dump_dir], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=300)
        try:
            return json.loads(p.stdout), p.stderr
        except ValueError:
            raise AssertionError(f"tptrace-fr output is not JSON: rc={p.returncode} "
                                 f"{p.stdout[:500]!r} {p.stderr[:500]!r}")

    def close(self):
        for r in list(self.recorders.values()):
            try:
                r.stop(timeout=30)
            except AssertionError:
                pass
        self.recorders = {}
        self.kill_job()
        if self.prom and self.prom.poll() is None:
            self.prom.terminate()
            try:
                self.prom.wait(30)
            except subprocess.TimeoutExpired:
                self.prom.kill()
                self.prom.wait()
        self.prom = None
        for ns in reversed(self._netns):
            sh("ip", "netns", "del", ns, check=False)
        self._netns = []
        if self.cg:
            _rm_cgroup(self.cg)
            self.cg = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
