#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# tests/gpu/check.sh: tptrace --gpu on a machine WITH a GPU, a driver and PyTorch, as one
# prepared script: under 8 minutes whatever hangs; PASS/FAIL/WARN/INFO lines, then
# "summary: N passed, N failed, N warnings"; exit 0 only when nothing failed.
#
#   1. environment: root, nvidia-smi, torch.cuda, torch.compile/triton (a WARN, not a FAIL,
#      when missing: the compiled step is skipped).
#   2. a PyTorch job that warms up (eager step, a torch.compile'd step, a captured CUDA graph)
#      and waits at READY. BPF is checked first, on this machine (`tptrace -p JOB -d 1`).
#   3. `tptrace -p JOB --gpu` must say "tracing" within 10 s; the job then runs three phases,
#      eager (matmul, relu, HtoD + DtoH copies), compiled (Triton kernels launched through
#      cuLaunchKernel/cuLaunchKernelEx) and graph (CUDAGraph.replay), printing CLOCK_MONOTONIC
#      around each; tptrace is stopped with SIGINT and must unload the agent.
#   4. the same phases under torch.profiler (Kineto) in the same process.
#   5. torch.profiler active while attaching: tptrace must be REFUSED (the agent attaching
#      would be a FAIL: its detach calls cuptiFinalize under the profiler).
#   6. the traces: host launch events; every ac2g arrow joins a launch to a kernel with the
#      launch's correlation; per stream, the sequence of kernel names joined to our launches
#      equals the sequence Kineto correlates with its launches, phase by phase; copies (HtoD,
#      DtoH, bytes); clock_residual_ns; the naming path ("kernel source" counts); Triton names
#      and arrows on driver launches; graph launches and graph kernels.
#   7. the real stack (tests/gpu/realstack.py jobs, tests/gpu/validate.py --real), each
#      behaviour the simulated stack models and only a GPU shows, INFO what was measured:
#      CUPTI's default thread id type vs gettid, and the join rate the agent's SYSTEM type
#      gives; the GPU clock's offset and drift against CLOCK_MONOTONIC (cuptiGetTimestamp
#      between two clock reads) and our alignment's residual (<= 1 us, probe kernels inside
#      their host windows); delivery (out-of-order/late/incomplete counts where reported, no
#      record twice); kernels starting before their launch returns; NCCL (a 1-rank
#      communicator: cuLaunchKernelEx, its own stream, events between the streams, overlap
#      with compute; a WARN when torch has no NCCL); two processes under one --gpu (no
#      arrow across them, tracks per process); a second context (a second device if any);
#      records dropped with tiny CUPTI buffers, every lost kernel counted (when the agent
#      has TPTRACE_AGENT_BUF_BYTES; a WARN otherwise).
#
# Usage: tests/gpu/check.sh [--steps N (10)] [--keep DIR]    (run from the repo, as root)
# Environment: CHECK_LIMIT_S (450) the whole run's limit; PYTHON (python3);
#   CHECK_SELFTEST=hang replaces the checks by a step that never ends, with a stand-in job and
#   tracer, to test the watchdog (tests/e2e/test_gpu_check.py).
# shellcheck disable=SC2317  # the watchdog's functions run from traps
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
LIMIT=${CHECK_LIMIT_S:-450}
WORK=$(mktemp -d /tmp/tptrace-gpu-check.XXXXXX)
PY=${PYTHON:-python3}
TPTRACE=$ROOT/tptrace
AGENT=$ROOT/.output/libtptrace_agent.so
RESULTS=$WORK/results		# one letter per result: the body runs in a child process
TRACERS=$WORK/tracer.pids	# tptrace processes: stopped with SIGINT first (agent detach)
: >"$RESULTS"
: >"$TRACERS"

pass() { echo "PASS $*"; echo P >>"$RESULTS"; }
fail() { echo "FAIL $*"; echo F >>"$RESULTS"; }
warn() { echo "WARN $*"; echo W >>"$RESULTS"; }
info() { echo "INFO $*"; }
fatal() { fail "$*"; exit 1; }

# ---- the checks (run as a child in a process group of its own) -------------------------

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

# read_fd FD LOG PATTERN TIMEOUT: a realstack job's lines (on FD) into LOG until one matches
read_fd() {
	local line
	while IFS= read -r -t "$4" line <&"$1"; do
		echo "$line" >>"$2"
		# shellcheck disable=SC2254  # $3 is a glob on purpose
		case "$line" in $3) return 0 ;; esac
	done
	return 1
}

# relay FILE: validate.py's lines as results
relay() {
	local line
	while IFS= read -r line; do
		case "$line" in
		"PASS "*) pass "${line#PASS }" ;;
		"FAIL "*) fail "${line#FAIL }" ;;
		"WARN "*) warn "${line#WARN }" ;;
		*) echo "$line" ;;
		esac
	done <"$1"
}

# real_check CHECK TRACE LOG NAME [KEY=JSON...]: validate.py --real on the job's CTX NAME
real_check() {
	local check=$1 trace=$2 log=$3 name=$4
	shift 4
	if ! "$PY" "$ROOT/tests/gpu/realstack.py" ctx "$log" "$name" "$@" >"$WORK/ctx.$check.json" \
		2>"$WORK/ctx.$check.err"; then
		fail "$check: $(cat "$WORK/ctx.$check.err")"
		return
	fi
	"$PY" "$ROOT/tests/gpu/validate.py" --real "$check" "$trace" "$WORK/ctx.$check.json" \
		>"$WORK/real.$check.out" 2>&1
	relay "$WORK/real.$check.out"
	grep -q "^[A-Z]* $check: " "$WORK/real.$check.out" || fail "$check: validate.py said nothing"
}

# spawn_job NAME MARKER IN_FD OUT_FD [ENV=VALUE...]: a realstack job on fifos (its imports and
# CUDA init overlap what runs meanwhile); ready_job NAME OUT_FD: its READY within 240 s
spawn_job() {
	local name=$1 marker=$2 infd=$3 outfd=$4
	shift 4
	mkfifo "$WORK/$name.in" "$WORK/$name.out"
	env "$@" "$PY" "$ROOT/tests/gpu/realstack.py" job "$marker" <"$WORK/$name.in" \
		>"$WORK/$name.out" 2>"$WORK/$name.err" &
	echo $! >"$WORK/$name.pid"
	eval "exec $infd>\"\$WORK/\$name.in\" $outfd<\"\$WORK/\$name.out\""
}
ready_job() { read_fd "$2" "$WORK/$1.log" "READY*" 240; }

real_stack() {
	local a b c tr rc
	echo '{}' >"$WORK/clock.json"
	info "the real stack: behaviours the simulated stack models"
	"$PY" "$ROOT/tests/gpu/realstack.py" clock 40 250 >"$WORK/clock.json" 2>"$WORK/clock.err" || true
	grep -q "^{" "$WORK/clock.json" || echo "{}" >"$WORK/clock.json"
	grep -q '"pairs"' "$WORK/clock.json" ||
		info "clock: no cuptiGetTimestamp reads: $(tail -1 "$WORK/clock.err") $(cat "$WORK/clock.json")"
	ready_job a 6 || { fail "realstack job a did not start: $(tail -2 "$WORK/a.err")"; return; }
	ready_job b 8 || { fail "realstack job b did not start: $(tail -2 "$WORK/b.err")"; return; }
	a=$(cat "$WORK/a.pid")
	b=$(cat "$WORK/b.pid")
	tr=$WORK/real.json
	"$TPTRACE" -p "$a" -p "$b" --gpu -o "$tr" >"$WORK/real.tptrace.out" 2>"$WORK/real.tptrace.err" &
	rc=$!
	echo "$rc" >>"$TRACERS"
	if ! wait_for_tracing "$rc" "$WORK/real.tptrace.err"; then
		fail "tptrace -p A -p B --gpu: no \"tracing\" line: $(tail -2 "$WORK/real.tptrace.err" | tr '\n' ' ')"
		stop_tracer "$rc"
		return
	fi
	printf 'TIDS\nPROBES 20 250\nLAUNCHES 300\nNCCL\nCTX2\n' >&5
	printf 'LAUNCHES 300\n' >&7
	read_fd 6 "$WORK/a.log" "CTX contexts *" 240 || fail "job a: $(tail -2 "$WORK/a.err")"
	read_fd 8 "$WORK/b.log" "CTX launches *" 120 || fail "job b: $(tail -2 "$WORK/b.err")"
	stop_tracer "$rc" || fail "tptrace -p A -p B --gpu rc $?: $(tail -2 "$WORK/real.tptrace.err")"
	echo QUIT >&5
	echo QUIT >&7
	real_check threads "$tr" "$WORK/a.log" tids "+$WORK/clock.json"
	real_check clock "$tr" "$WORK/a.log" probes "+$WORK/clock.json"
	real_check delivery "$tr" "$WORK/a.log" tids
	real_check early "$tr" "$WORK/a.log" launches
	if grep -q '^CTX nccl {"skip"' "$WORK/a.log"; then
		warn "nccl: skipped: $(grep -o '"skip": .*' "$WORK/a.log" | head -1)"
	else
		real_check nccl "$tr" "$WORK/a.log" nccl
	fi
	real_check procs "$tr" "$WORK/a.log" tids \
		"procs=[{\"pid\": $a, \"marker\": \"sin_kernel\", \"launches\": 300}, {\"pid\": $b, \"marker\": \"cos_kernel\", \"launches\": 300}]"
	real_check contexts "$tr" "$WORK/a.log" contexts
	wait "$a" "$b"
	exec 5>&- 6<&- 7>&- 8<&-

	# drops: tiny CUPTI buffers, when the agent lets a test choose their size
	if ! grep -q TPTRACE_AGENT_BUF_BYTES "$AGENT"; then
		warn "drops: the agent has no TPTRACE_AGENT_BUF_BYTES: dropped records not provoked"
		return
	fi
	spawn_job c sin 5 6 TPTRACE_AGENT_BUF_BYTES=4096
	ready_job c 6 || { fail "realstack job c did not start: $(tail -2 "$WORK/c.err")"; return; }
	c=$(cat "$WORK/c.pid")
	"$TPTRACE" -p "$c" --gpu -o "$WORK/drops.json" >/dev/null 2>"$WORK/drops.tptrace.err" &
	rc=$!
	echo "$rc" >>"$TRACERS"
	if wait_for_tracing "$rc" "$WORK/drops.tptrace.err"; then
		echo "FLOOD 20000" >&5
		read_fd 6 "$WORK/c.log" "CTX flood *" 240 || fail "job c: $(tail -2 "$WORK/c.err")"
		stop_tracer "$rc" || fail "tptrace (drops) rc $?: $(tail -2 "$WORK/drops.tptrace.err")"
		real_check drops "$WORK/drops.json" "$WORK/c.log" flood
	else
		fail "tptrace (drops): no \"tracing\" line: $(tail -2 "$WORK/drops.tptrace.err")"
		stop_tracer "$rc"
	fi
	echo QUIT >&5
	wait "$c"
	exec 5>&- 6<&-
}

# wait_for_tracing PID ERRFILE: tptrace's "tracing N process(es)" line within 10 s
wait_for_tracing() {
	local i
	for i in $(seq 100); do
		grep -q "^tptrace: tracing \|^tracing " "$2" && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.1
	done
	: "$i"
	return 1
}

# stop_tracer PID: SIGINT (tptrace drains, detaches the agent, writes the trace), 60 s
stop_tracer() {
	local i
	kill -INT "$1" 2>/dev/null
	for i in $(seq 600); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	: "$i"
	if kill -0 "$1" 2>/dev/null; then
		fail "tptrace pid $1 did not stop within 60 s of SIGINT: killed"
		kill -KILL "$1" 2>/dev/null
	fi
	wait "$1"
}

# new_objects MAPS_FILE PID: paths PID maps now that MAPS_FILE did not have ("none" if none)
new_objects() {
	local new
	new=$(comm -13 <(awk 'NF >= 6 && $6 !~ /^\[/ {print $6}' "$1" | sort -u) \
		<(awk 'NF >= 6 && $6 !~ /^\[/ {print $6}' "/proc/$2/maps" | sort -u) | tr '\n' ' ')
	echo "${new:-none}"
}

agent_mapped() { grep -q -e "libtptrace_agent" -e "tptrace-agent-" "/proc/$1/maps" 2>/dev/null; }

selftest_hang() {
	mkfifo "$WORK/never"
	sleep 600 &
	JOB_PID=$!
	timeout 600 sleep 600 &		# timeout(1) makes a process group of its own
	echo $! >>"$TRACERS"
	info "selftest pids: $$ $BASHPID $JOB_PID $(cat "$TRACERS")"
	exec 4<>"$WORK/never"
	read_until "NEVER" 600
	fatal "selftest: the step ended"
}

checks() {
	[ "$(id -u)" -eq 0 ] || fatal "needs root (ptrace, BPF)"
	[ "${CHECK_SELFTEST:-}" = hang ] && selftest_hang
	if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
		fatal "no GPU: nvidia-smi -L failed (no NVIDIA driver or device on this machine)"
	fi
	info "$(nvidia-smi -L | head -1)"
	[ -x "$TPTRACE" ] || fatal "$TPTRACE missing: make"
	[ -r "$AGENT" ] || fatal "$AGENT missing: make"
	"$TPTRACE" --help 2>&1 | grep -q -- '--gpu' || fatal "$TPTRACE has no --gpu"
	if ! timeout 120 "$PY" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
		>/dev/null 2>&1; then
		fatal "PyTorch with CUDA not importable by $PY"
	fi
	info "torch $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')"
	COMPILE=1
	if ! why=$(timeout 60 "$PY" -c 'import torch, triton; torch.compile' 2>&1); then
		warn "compiled step skipped: torch.compile/triton unavailable ($(echo "$why" | tail -1))"
		COMPILE=0
	fi

	cat >"$WORK/job.py" <<'EOF'
import os, sys, time
import torch
from torch.profiler import profile, ProfilerActivity, record_function
steps, use_compile = int(sys.argv[1]), sys.argv[2] == "1"
dev = torch.device("cuda:0")
a = torch.randn(2048, 2048, device=dev)
b = torch.randn(2048, 2048, device=dev)
host = torch.randn(1 << 20).pin_memory()          # 4 MiB HtoD per step

def eager():
    c = torch.relu(a @ b)
    d = (c * 0.5).sum()
    dev_buf = host.to(dev, non_blocking=True)
    out = dev_buf[:1024].cpu()                     # 4096 bytes DtoH per step
    return d.item() + float(out[0])

def fused(x, y):                                   # pointwise + reduction: Triton kernels only
    return (torch.relu(x * y + 1.0) * 0.25).sum(dim=1)
compiled = torch.compile(fused) if use_compile else None

x = torch.randn(1024, 1024, device=dev)
static_in = torch.randn(1024, 1024, device=dev)
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):                      # graph capture wants a warmed side stream
    for _ in range(3):
        static_out = torch.relu(static_in * 2.0) + 1.0
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = torch.relu(static_in * 2.0) + 1.0

for _ in range(3):                                 # warm-up: cuBLAS, allocator, modules, compile
    eager()
    if compiled:
        compiled(x, x)
    graph.replay()
torch.cuda.synchronize()

def phase(name, fn):
    torch.cuda.synchronize()
    m0 = time.monotonic_ns()
    with record_function("tpcheck:" + name):
        for i in range(steps):
            fn()
            torch.cuda.synchronize()
    m1 = time.monotonic_ns()
    print("PHASE", name, m0, m1, flush=True)
    time.sleep(0.02)

def phases():
    phase("eager", eager)
    if compiled:
        phase("compiled", lambda: compiled(x, x))
    phase("graph", graph.replay)

print("READY", os.getpid(), flush=True)
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "RUN":
        phases()
        print("RAN", flush=True)
    elif cmd[0] == "PROFILE":
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            phases()
        prof.export_chrome_trace(cmd[1])
        print("PROFILED", flush=True)
    elif cmd[0] == "PROFILE_HOLD":
        # a profiler session that stays open until the next line: another CUPTI subscriber
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            eager()
            print("HOLDING", flush=True)
            sys.stdin.readline()
            eager()
        print("RELEASED", flush=True)
    elif cmd[0] == "QUIT":
        break
print("DONE", flush=True)
EOF

	mkfifo "$WORK/job_in" "$WORK/job_out"
	"$PY" "$WORK/job.py" "$STEPS" "$COMPILE" <"$WORK/job_in" >"$WORK/job_out" 2>"$WORK/job_err" &
	JOB_PID=$!
	exec 3>"$WORK/job_in" 4<"$WORK/job_out"
	read_until "READY*" 240 || fatal "job did not start: $(tail -3 "$WORK/job_err")"
	# the real stack's two jobs start now: their imports overlap the phases below
	spawn_job a sin 5 6
	spawn_job b cos 7 8
	info "job pid $JOB_PID ready (eager, $([ $COMPILE = 1 ] && echo "compiled, ")graph warmed up)"

	# BPF first: tptrace's uprobes on the job for a second
	if timeout 30 "$TPTRACE" -p "$JOB_PID" -d 1 -o "$WORK/bpf_probe.json" >"$WORK/bpf_probe.out" 2>&1; then
		info "BPF checked first: works here (tptrace -p $JOB_PID -d 1 rc 0)"
	else
		fatal "BPF checked first: tptrace -p $JOB_PID -d 1 failed: $(tail -1 "$WORK/bpf_probe.out")"
	fi
	cp "/proc/$JOB_PID/maps" "$WORK/maps.before"

	# ---- attach, run the phases, detach ----
	TRACE=$WORK/ours.json
	"$TPTRACE" -p "$JOB_PID" --gpu -o "$TRACE" >"$WORK/attach.out" 2>"$WORK/attach.err" &
	ATT=$!
	echo "$ATT" >>"$TRACERS"
	if ! wait_for_tracing "$ATT" "$WORK/attach.err"; then
		fail "no \"tracing\" line from tptrace --gpu within 10 s: $(tail -2 "$WORK/attach.err" | tr '\n' ' ')"
		stop_tracer "$ATT"
		exit 1
	fi
	pass "tptrace --gpu attached (\"tracing\" within 10 s)"
	if agent_mapped "$JOB_PID"; then pass "agent mapped in the job while attached"
	else fail "agent not in /proc/$JOB_PID/maps while attached"; fi
	echo "RUN" >&3
	read_until "RAN" 120 || fail "job did not finish its phases: $(tail -2 "$WORK/job_err")"
	stop_tracer "$ATT"
	RC=$?
	if [ "$RC" -eq 0 ] && [ -s "$TRACE" ]; then pass "tptrace rc 0 after SIGINT, trace written"
	else fail "tptrace rc $RC: $(tail -3 "$WORK/attach.err" | tr '\n' ' ')"; fi
	if agent_mapped "$JOB_PID"; then fail "agent still mapped after detach"
	else pass "agent gone from /proc/$JOB_PID/maps after detach"; fi
	info "objects mapped after detach that were not before attach: $(new_objects "$WORK/maps.before" "$JOB_PID")"
	mv "$WORK/job.log" "$WORK/phases.log"

	# ---- torch.profiler on the same phases ----
	echo "PROFILE $WORK/kineto.json" >&3
	if read_until "PROFILED" 180; then pass "torch.profiler works after detach (CUPTI released)"
	else fail "torch.profiler failed after detach: $(tail -3 "$WORK/job_err")"; fi

	# ---- attaching under an active profiler must be refused ----
	echo "PROFILE_HOLD" >&3
	if read_until "HOLDING" 120; then
		cp "/proc/$JOB_PID/maps" "$WORK/maps.hold"
		timeout 60 "$TPTRACE" -p "$JOB_PID" --gpu -d 1 -o "$WORK/refused.json" \
			>"$WORK/refused.out" 2>&1 &
		REF=$!
		echo "$REF" >>"$TRACERS"
		wait "$REF"
		RRC=$?
		if [ "$RRC" -ne 0 ] && grep -q "another CUPTI client" "$WORK/refused.out" &&
			! grep -q "tracing " "$WORK/refused.out"; then
			pass "attach refused while torch.profiler holds CUPTI (rc $RRC): $(grep -m1 -- '--gpu' "$WORK/refused.out")"
		else
			fail "attach under an active torch.profiler NOT refused (rc $RRC; the agent's detach calls cuptiFinalize): $(tail -2 "$WORK/refused.out" | tr '\n' ' ')"
		fi
		info "refusal's account of the target: $(grep -o 'left mapped in the process.*\|nothing stays mapped.*' "$WORK/refused.out")"
		info "objects mapped after the refusal that were not before it: $(new_objects "$WORK/maps.hold" "$JOB_PID")"
		echo "" >&3
		read_until "RELEASED" 120 || fail "the profiler session did not end after the refusal: $(tail -2 "$WORK/job_err")"
	else
		fail "PROFILE_HOLD did not start: $(tail -2 "$WORK/job_err")"
	fi
	agent_mapped "$JOB_PID" && fail "agent left mapped after the refusal"
	echo "QUIT" >&3
	read_until "DONE" 60 || { warn "job did not quit cleanly: killed"; kill "$JOB_PID"; }
	wait "$JOB_PID"

	# ---- the traces ----
	"$PY" "$ROOT/tests/gpu/validate.py" "$TRACE" "$WORK/kineto.json" "$WORK/phases.log" "$STEPS" \
		>"$WORK/validate.out" 2>&1
	VRC=$?
	while IFS= read -r line; do
		case "$line" in
		"PASS "*) pass "${line#PASS }" ;;
		"FAIL "*) fail "${line#FAIL }" ;;
		"WARN "*) warn "${line#WARN }" ;;
		*) echo "$line" ;;
		esac
	done <"$WORK/validate.out"
	[ "$VRC" -eq 0 ] || grep -q "^FAIL " "$WORK/validate.out" || fail "validate.py rc $VRC"
	real_stack
	exit 0
}

# ---- the watchdog and the summary ------------------------------------------------------

summary() {
	local p f w
	p=$(grep -c '^P' "$RESULTS")
	f=$(grep -c '^F' "$RESULTS")
	w=$(grep -c '^W' "$RESULTS")
	echo "summary: $p passed, $f failed, $w warnings"
	[ "$f" -eq 0 ]
}

# every process below PID, deepest last
descendants() {
	local c
	for c in $(pgrep -P "$1"); do
		echo "$c"
		descendants "$c"
	done
}

# The body and everything it started, by process group (timeout(1) makes its own): tptrace
# first with SIGINT so it detaches the agent, then SIGTERM, then SIGKILL.
kill_everything() {
	local pids groups g ours i p alive sig tracers
	ours=$(ps -o pgid= -p $$ | tr -d ' ')
	mapfile -t tracers <"$TRACERS"
	for p in "${tracers[@]}"; do kill -INT "$p" 2>/dev/null; done
	for i in $(seq 50); do
		alive=""
		for p in "${tracers[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ -z "$alive" ] && break
		sleep 0.1
	done
	: "$i"
	for sig in TERM KILL; do
		pids="$BODY $(descendants "$BODY") ${tracers[*]}"
		groups=""
		for p in $pids; do
			g=$(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ')
			[ -n "$g" ] && [ "$g" != "$ours" ] && groups="$groups $g"
		done
		for g in $(echo "$groups" | tr ' ' '\n' | sort -u); do kill -"$sig" -- "-$g" 2>/dev/null; done
		# shellcheck disable=SC2086  # lists of pids
		kill -"$sig" $pids 2>/dev/null
		[ "$sig" = TERM ] && sleep 1
	done
	wait "$BODY" 2>/dev/null
}

on_limit() {
	trap - USR1 INT TERM
	fail "check.sh: $1: stopping tptrace and the job"
	kill_everything
	finish 124
}

finish() {
	local rc=$1 sleeper
	# the watchdog first (its sleep ending would let it signal us), then its sleep
	sleeper=$(pgrep -P "$WATCHDOG")
	kill "$WATCHDOG" 2>/dev/null
	# shellcheck disable=SC2086  # a list of pids
	[ -n "$sleeper" ] && kill $sleeper 2>/dev/null
	summary || { [ "$rc" -eq 0 ] && rc=1; }
	if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp -r "$WORK"/. "$KEEP"/; fi
	rm -rf "$WORK"
	exit "$rc"
}

trap 'on_limit "time limit of ${LIMIT} s reached"' USR1
trap 'on_limit "interrupted"' INT TERM
set -m				# the body in a process group of its own
checks </dev/null &
BODY=$!
set +m
(sleep "$LIMIT"; kill -USR1 $$ 2>/dev/null) &
WATCHDOG=$!
wait "$BODY"
RC=$?
# a signal ends `wait` early: the trap above has run and exited; this is a normal end
[ "$RC" -ne 0 ] && ! grep -q '^F' "$RESULTS" && fail "check.sh body exited with rc $RC"
finish "$([ "$RC" -eq 0 ] && echo 0 || echo 1)"
