#!/usr/bin/env bash
# make demo: start a training-shaped job on the simulated CUDA stack, attach tptrace to the
# running process for a few seconds, and say where the trace is and how to open it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${DEMO_OUT:-out}
mkdir -p "$out"
trace="$out/demo-trace.json.gz"
fifo=$(mktemp -u /tmp/tptrace-demo.XXXXXX)
mkfifo "$fifo"
cleanup() { exec 3>&- 2>/dev/null || true; [ -n "${job:-}" ] && kill "$job" 2>/dev/null; rm -f "$fifo"; }
trap cleanup EXIT

# the job: 2 training threads, each step 3 GEMMs + 1 ReLU on two streams, copies, an event
# handoff and a stream sync (see tests/workloads/sim_train.c)
.output/tests/sim_train --threads 2 --steps 100000 --kernel-us 800 < "$fifo" > "$out/demo-job.log" 2>&1 &
job=$!
exec 3>"$fifo"
for _ in $(seq 50); do grep -q READY "$out/demo-job.log" 2>/dev/null && break; sleep 0.1; done
echo GO >&3
sleep 0.5
echo "demo job running as pid $job (simulated CUDA runtime and CUPTI, never restarted)"
echo "attaching for 3 s, with the GPU timeline:"
echo "  tptrace -p $job --gpu -d 3 -o $trace"
gpu=1
if ! ./tptrace -p "$job" --gpu -d 3 -o "$trace"; then
	echo "(--gpu refused, see above: tracing the CPU side only)"
	gpu=0
	./tptrace -p "$job" -d 3 -o "$trace"
fi
kill "$job" 2>/dev/null || true
wait "$job" 2>/dev/null || true
job=
status=0
python3 - "$trace" <<'PY' || status=$?
import gzip, json, sys
t = json.load(gzip.open(sys.argv[1], "rt"))
ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
names = {}
for e in ev:
    names[e["name"]] = names.get(e["name"], 0) + 1
print("events:", ", ".join(f"{k} {v}" for k, v in sorted(names.items())))
print("kernels:", sorted({e["args"]["kernel"] for e in ev if "kernel" in e["args"]}))
gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")]
flows = [e for e in t["traceEvents"] if e.get("ph") == "s" and e.get("cat") == "ac2g"]
print(f"GPU timeline: {len(gpu)} GPU events on their stream tracks, {len(flows)} launch->kernel arrows")
print("dropped:", t["tptrace"]["events_dropped"])
sys.exit(0 if gpu and flows else 3)
PY
cat <<MSG

Trace: $(realpath "$trace")
Open it: https://ui.perfetto.dev -> "Open trace file" (the .json.gz loads as is), or
chrome://tracing. Analyse with HTA: TraceAnalysis(trace_dir="$(realpath "$out")").
MSG
if [ "$status" -ne 0 ] || [ "$gpu" -eq 0 ]; then
	echo "demo: FAILED: the trace has no GPU timeline (no GPU events or no launch->kernel arrows; see above)"
	exit 1
fi
