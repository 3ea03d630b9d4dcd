#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# tests/gpu/check.sh: the CUPTI agent on a machine WITH a GPU, a driver and PyTorch.
# Runs in a few minutes (hard limit 8 min); prints PASS/FAIL/WARN/INFO lines and a summary.
#
#   1. environment: nvidia-smi, torch.cuda; whether BPF works here (a tiny tptrace probe) —
#      without BPF only the CUPTI path is checked, through .output/e2e/gpu_attach.
#   2. a small PyTorch job (matmul + relu + copies, one synchronize per step, 20 ms gaps)
#      waits at READY; the agent is attached (`tptrace -p PID --gpu -d 5` when tptrace has
#      --gpu, else gpu_attach), the job runs STEPS steps, printing CLOCK_MONOTONIC and
#      CLOCK_REALTIME around each synchronized step.
#   3. checks: GPU tracks (pid = device, tid = stream, "GPU N"/"stream N" names), kernel names
#      demangled and non-empty, every kernel inside its step's [t0, t1] window (clock alignment:
#      largest distance outside reported), agent gone from /proc/PID/maps after detach.
#   4. the same steps under torch.profiler in the same process (proves the agent released
#      CUPTI: one subscriber per process), and our kernels compared with Kineto's: names and
#      counts per step, median duration per name within 2x.
#   5. torch.profiler active while attaching: the agent must refuse (another subscriber).
#
# Usage: tests/gpu/check.sh [--steps N (10)] [--keep DIR]    (run from the repo, as root)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=10
KEEP=""
while [ $# -gt 0 ]; do
	case "$1" in
	--steps) STEPS=$2; shift 2 ;;
	--keep) KEEP=$2; shift 2 ;;
	*) echo "usage: $0 [--steps N] [--keep DIR]" >&2; exit 2 ;;
	esac
done
WORK=$(mktemp -d /tmp/tptrace-gpu-check.XXXXXX)
PY=${PYTHON:-python3}
TPTRACE=$ROOT/tptrace
GPU_ATTACH=$ROOT/.output/e2e/gpu_attach
AGENT=$ROOT/.output/libtptrace_agent.so
PASS=0 FAIL=0 WARN=0
JOB_PID=""

pass() { echo "PASS $*"; PASS=$((PASS + 1)); }
fail() { echo "FAIL $*"; FAIL=$((FAIL + 1)); }
warn() { echo "WARN $*"; WARN=$((WARN + 1)); }
info() { echo "INFO $*"; }

cleanup() {
	[ -n "${JOB_PID}" ] && kill "${JOB_PID}" 2>/dev/null
	exec 3>&- 4<&- 2>/dev/null
	if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp -r "$WORK"/. "$KEEP"/; fi
	rm -rf "$WORK"
}
trap cleanup EXIT
# the whole script must end within 8 minutes, whatever hangs
( sleep 470; echo "FAIL check.sh: time limit reached" >&2; kill -TERM $$ ) 2>/dev/null &
WATCHDOG=$!
stop_watchdog() {
	local children
	children=$(pgrep -P "$WATCHDOG" 2>/dev/null)
	# shellcheck disable=SC2086  # a list of pids
	kill $children "$WATCHDOG" 2>/dev/null
}
trap 'stop_watchdog; cleanup' EXIT

summary() {
	echo "summary: $PASS passed, $FAIL failed, $WARN warnings"
	[ "$FAIL" -eq 0 ]
	exit $?
}

# ---- 1. environment --------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || { fail "needs root (ptrace, BPF)"; summary; }
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
	fail "no GPU/driver (nvidia-smi -L failed)"; summary
fi
info "$(nvidia-smi -L | head -1)"
if ! timeout 120 "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	fail "PyTorch with CUDA not importable by $PY"; summary
fi
info "torch $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
[ -r "$AGENT" ] || { fail "$AGENT missing: make all test-bins"; summary; }
ATTACH_MODE=gpu_attach
if [ -x "$TPTRACE" ] && "$TPTRACE" --help 2>&1 | grep -q -- '--gpu'; then
	ATTACH_MODE=tptrace
elif [ ! -x "$GPU_ATTACH" ]; then
	fail "neither tptrace --gpu nor $GPU_ATTACH available"; summary
fi
info "attaching with: $ATTACH_MODE"

# ---- 2. the job ------------------------------------------------------------------------
cat >"$WORK/job.py" <<'EOF'
import os, sys, time, json
import torch
dev = torch.device("cuda:0")
a = torch.randn(2048, 2048, device=dev)
b = torch.randn(2048, 2048, device=dev)
host = torch.randn(1 << 20).pin_memory()

def step():
    c = torch.relu(a @ b)
    d = (c * 0.5).sum()
    dev_buf = host.to(dev, non_blocking=True)
    out = dev_buf[:1024].cpu()
    return d.item() + float(out[0])

for _ in range(3):           # warm-up: cuBLAS handles, allocator, module loads
    step()
torch.cuda.synchronize()
print("READY", os.getpid(), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "RUN":
        for i in range(int(cmd[1])):
            torch.cuda.synchronize()
            m0, r0 = time.monotonic_ns(), time.time_ns()
            step()
            torch.cuda.synchronize()
            m1, r1 = time.monotonic_ns(), time.time_ns()
            print("STEP", i, m0, m1, r0, r1, flush=True)
            time.sleep(0.02)
        print("RAN", flush=True)
    elif cmd[0] == "PROFILE":
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(int(cmd[1])):
                step()
                torch.cuda.synchronize()
                time.sleep(0.02)
        prof.export_chrome_trace(cmd[2])
        print("PROFILED", flush=True)
    elif cmd[0] == "PROFILE_HOLD":
        # a profiler session that stays open until the next line: another CUPTI subscriber
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]):
            step()
            print("HOLDING", flush=True)
            sys.stdin.readline()
            step()
        print("RELEASED", flush=True)
    elif cmd[0] == "QUIT":
        break
print("DONE", flush=True)
EOF

mkfifo "$WORK/job_in" "$WORK/job_out"
"$PY" "$WORK/job.py" <"$WORK/job_in" >"$WORK/job_out" 2>"$WORK/job_err" &
JOB_PID=$!
exec 3>"$WORK/job_in" 4<"$WORK/job_out"

# read_until PATTERN TIMEOUT: job lines into $WORK/job.log until one matches
read_until() {
	local line
	while IFS= read -r -t "$2" line <&4; do
		echo "$line" >>"$WORK/job.log"
		# shellcheck disable=SC2254  # $1 is a glob on purpose
		case "$line" in $1) return 0 ;; esac
	done
	return 1
}
if ! read_until "READY*" 180; then
	fail "job did not start: $(tail -3 "$WORK/job_err")"; summary
fi
info "job pid $JOB_PID"

# BPF probe: tptrace attaching its uprobes to the job for a second
if [ -x "$TPTRACE" ] && timeout 30 "$TPTRACE" -p "$JOB_PID" -d 1 -o "$WORK/bpf_probe.json" \
	>"$WORK/bpf_probe.out" 2>&1; then
	info "BPF works here (tptrace -p $JOB_PID -d 1 ok)"
	BPF=1
else
	warn "BPF unavailable or tptrace failed here: only the CUPTI path is checked ($(tail -1 "$WORK/bpf_probe.out" 2>/dev/null))"
	BPF=0
fi
[ "$ATTACH_MODE" = tptrace ] && [ "$BPF" = 0 ] && ATTACH_MODE=gpu_attach
[ "$ATTACH_MODE" = gpu_attach ] && [ ! -x "$GPU_ATTACH" ] && { fail "no BPF and no $GPU_ATTACH"; summary; }

# ---- 3. attach, run, detach ------------------------------------------------------------
TRACE=$WORK/ours.json
if [ "$ATTACH_MODE" = tptrace ]; then
	"$TPTRACE" -p "$JOB_PID" --gpu -d 5 -o "$TRACE" >"$WORK/attach.out" 2>"$WORK/attach.err" &
	ATT=$!
	for _ in $(seq 100); do grep -q "tracing" "$WORK/attach.err" && break; sleep 0.1; done
else
	mkfifo "$WORK/ga_in"
	"$GPU_ATTACH" -p "$JOB_PID" -o "$TRACE" -d 5 <"$WORK/ga_in" >"$WORK/attach.out" 2>"$WORK/attach.err" &
	ATT=$!
	exec 5>"$WORK/ga_in"
	for _ in $(seq 100); do grep -q "^ATTACHED" "$WORK/attach.out" && break; sleep 0.1; done
	grep -q "^ATTACHED" "$WORK/attach.out" || { fail "attach: $(cat "$WORK/attach.err")"; summary; }
fi
if grep -q "libtptrace_agent" "/proc/$JOB_PID/maps"; then pass "agent mapped in the job while attached"
else fail "agent not in /proc/$JOB_PID/maps while attached"; fi
echo "RUN $STEPS" >&3
read_until "RAN" 120 || fail "job did not finish its steps"
timeout 60 tail --pid="$ATT" -f /dev/null
wait "$ATT"; RC=$?
[ "$ATTACH_MODE" = gpu_attach ] && exec 5>&-
if [ "$RC" -eq 0 ] && [ -s "$TRACE" ]; then pass "attach/detach rc 0, trace written"
else fail "attach rc $RC: $(tail -3 "$WORK/attach.err")"; fi
info "$(grep -h '^STATS' "$WORK/attach.out" 2>/dev/null)"
if grep -q -e "libtptrace_agent" -e "tptrace-agent-" "/proc/$JOB_PID/maps"; then
	fail "agent still mapped after detach"
else
	pass "agent gone from /proc/$JOB_PID/maps after detach"
fi

# ---- 4. torch.profiler on the same steps -----------------------------------------------
echo "PROFILE $STEPS $WORK/kineto.json" >&3
if read_until "PROFILED" 180; then pass "torch.profiler works after detach (CUPTI released)"
else fail "torch.profiler failed after detach: $(tail -3 "$WORK/job_err")"; fi

# ---- 5. another subscriber -------------------------------------------------------------
echo "PROFILE_HOLD" >&3
if read_until "HOLDING" 120; then
	if [ "$ATTACH_MODE" = tptrace ]; then
		timeout 60 "$TPTRACE" -p "$JOB_PID" --gpu -d 1 -o "$WORK/refused.json" >"$WORK/refused.out" 2>&1
	else
		timeout 60 "$GPU_ATTACH" -p "$JOB_PID" -o "$WORK/refused.json" -d 1 </dev/null >"$WORK/refused.out" 2>&1
	fi
	RRC=$?
	if grep -q "another CUPTI client" "$WORK/refused.out"; then
		pass "attach refused while torch.profiler holds CUPTI (rc $RRC)"
	else
		# Kineto may not keep a CUPTI subscription for a CUDA-activity-only session
		warn "attach during torch.profiler not refused (rc $RRC): $(tail -1 "$WORK/refused.out")"
	fi
	echo "" >&3
	read_until "RELEASED" 120 || warn "profiler hold did not end"
else
	warn "PROFILE_HOLD did not start"
fi
grep -q -e "libtptrace_agent" -e "tptrace-agent-" "/proc/$JOB_PID/maps" && fail "agent left mapped after refusal"
echo "QUIT" >&3
read_until "DONE" 60 || warn "job did not quit cleanly"

# ---- validation of the traces ----------------------------------------------------------
"$PY" - "$TRACE" "$WORK/kineto.json" "$WORK/job.log" <<'EOF'
import gzip, json, statistics, sys
ours_path, kineto_path, log_path = sys.argv[1:4]
ok = True
def res(good, what):
    global ok
    print(("PASS " if good else "FAIL ") + what)
    ok = ok and good
def load(p):
    with (gzip.open if p.endswith(".gz") else open)(p, "rt") as f:
        return json.load(f)
ours = load(ours_path)
steps = []
for line in open(log_path):
    f = line.split()
    if f and f[0] == "STEP":
        steps.append(tuple(int(x) for x in f[2:6]))
evs = ours["traceEvents"]
kern = [e for e in evs if e.get("ph") == "X" and e.get("cat") == "kernel"]
res(len(kern) > 0, f"{len(kern)} kernels in our trace")
meta = [e for e in evs if e.get("ph") == "M"]
gpu_pids = {e["pid"] for e in kern}
pnames = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
res(all(pnames.get(p) == f"GPU {p}" for p in gpu_pids), f"GPU process names for devices {sorted(gpu_pids)}")
res(all(tnames.get((e["pid"], e["tid"])) == f"stream {e['tid']}" for e in kern), "stream track names")
res(all(e["args"]["stream"] == e["tid"] and e["args"]["stream"] >= 0 and e["args"]["correlation"] > 0 for e in kern),
    "kernel args stream/correlation (HTA)")
res(all(e["name"] and not e["name"].startswith("_Z") for e in kern), "kernel names demangled")
# clock alignment: ts back to CLOCK_MONOTONIC (gpu_attach) or CLOCK_REALTIME (tptrace file base)
if "tptrace_gpu" in ours:
    base, idx, clock = ours["tptrace_gpu"]["base_mono_ns"], (0, 1), "CLOCK_MONOTONIC"
else:
    base, idx, clock = ours.get("baseTimeNanoseconds", 0), (2, 3), "CLOCK_REALTIME (file base)"
wins = sorted((s[idx[0]], s[idx[1]]) for s in steps)
first, last = wins[0][0], wins[-1][1]
inside, outside, worst = 0, 0, 0
per_step = [[] for _ in wins]
for e in kern:
    t0 = base + round(e["ts"] * 1000); t1 = t0 + round(e["dur"] * 1000)
    if t1 < first - 5_000_000 or t0 > last + 5_000_000:
        continue   # outside the measured steps (warm-up stragglers, profiler phase)
    hit = [i for i, (a, b) in enumerate(wins) if a <= t0 and t1 <= b]
    if hit:
        inside += 1; per_step[hit[0]].append(e)
    else:
        outside += 1
        worst = max(worst, min(max(a - t0, t1 - b, 0) for a, b in wins))
print(f"INFO alignment ({clock}): {inside} kernels inside their step window, {outside} outside, worst {worst / 1000:.1f} us")
res(inside > 0 and worst <= 50_000, "every kernel within 50 us of its synchronized step window")
counts = {len(s) for s in per_step}
res(len(counts) == 1, f"same kernel count in every step: {sorted(counts)}")
# Kineto comparison
try:
    kin = load(kineto_path)
except Exception as ex:
    res(False, f"kineto trace unreadable: {ex}")
    sys.exit(0 if ok else 1)
kk = [e for e in kin["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
def per_name(events, n_steps):
    d = {}
    for e in events:
        d.setdefault(e["name"], []).append(e["dur"])
    return {k: (len(v) / n_steps, statistics.median(v)) for k, v in d.items()}
ours_k = per_name([e for s in per_step for e in s], len(wins))
kin_k = per_name(kk, len(wins))
res(set(ours_k) == set(kin_k), f"kernel names equal to torch.profiler's ({len(ours_k)} names)"
    + ("" if set(ours_k) == set(kin_k) else f": only ours {sorted(set(ours_k) - set(kin_k))[:3]}, only kineto {sorted(set(kin_k) - set(ours_k))[:3]}"))
for name in sorted(set(ours_k) & set(kin_k)):
    (n1, d1), (n2, d2) = ours_k[name], kin_k[name]
    res(abs(n1 - n2) < 1e-9, f"{name[:60]}: {n1:g} per step (kineto {n2:g})")
    res(0.5 <= (d1 + 1) / (d2 + 1) <= 2.0, f"{name[:60]}: median {d1:.1f} us (kineto {d2:.1f} us)")
sys.exit(0 if ok else 1)
EOF
if [ $? -eq 0 ]; then pass "trace validation"; else fail "trace validation (see above)"; fi
summary
