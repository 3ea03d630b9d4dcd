"""A PyTorch training loop for `tptrace --torch` (tests/e2e/test_torch.py, tests/bench).

torch_train.py STEPS TIMES_FILE [LIBCUDART]: nn.Linear + ReLU + nn.Linear, SGD, seeded. Each
step runs forward+loss inside record_function("custom_phase"), then backward and
optimizer.step(); with LIBCUDART, inside record_function("launch_phase") it calls that
runtime's cudaLaunchKernel through ctypes (the simulated runtime in the tests), so tptrace's
probe of it must land inside that span. Prints "READY <pid>", waits for a line on stdin, then
every 10 steps a deterministic line (the step number and the loss, from the seeded model), and
appends to TIMES_FILE one line a step (flushed): its start (CLOCK_MONOTONIC ns), its wall time,
the main thread's CPU time in it (ns; the CPU time leaves out the sleep and other
processes, so it shows what a profiler left running would add), and 1 when a torch profiler
was on at the step's end (torch._C._autograd._profiler_enabled()), else 0. Ends
with "DONE".
TORCH_TRAIN_SLEEP=SEC: sleep SEC (in C, the main thread blocked) right after that line, or
until SIGUSR1 (a test wakes it when it is done with the sleeping process).
TORCH_TRAIN_LINGER=1: at exit (an atexit handler registered before READY, so it runs after
any a tracer registers later), print "LINGER" and keep running Python until tptrace's state
(sys._tptrace_state) is gone, at most 120 s: a tracer's request then runs during the exit.
With it the loop also ends after the first step that ends with a profiler on.
TORCH_TRAIN_KEYAVG=PATH: keep a reference to the profiler tptrace --torch starts in the job
(in sys._tptrace_state); the loop ends at the first step after that profiler stopped, and
the job writes to PATH torch's own key_averages() of that very profile, as JSON: one object a
key {"key", "count", "self_cpu_us", "cpu_total_us"} (tests/e2e/test_report_torch.py compares
`tptrace report`'s operator breakdown with it), then prints "KEYAVG <n keys>"."""
import atexit
import ctypes
import os
import signal
import sys
import time

import torch
from torch.autograd.profiler import record_function


def launcher(path):
	"""cudaLaunchKernel(func, grid, block, args, shmem, stream) of the runtime at path; dim3 by
	value is two registers (x|y<<32, z) on x86-64 SysV."""
	rt = ctypes.CDLL(path)
	fn = rt.cudaLaunchKernel
	fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint64,
		       ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
	fn.restype = ctypes.c_int
	args = (ctypes.c_void_p * 1)()
	return lambda: fn(ctypes.cast(fn, ctypes.c_void_p), 1 | (1 << 32), 1, 32 | (1 << 32), 1,
			  args, 0, None)


class Wake(Exception):
	pass


def on_usr1(sig, frame):
	raise Wake()


def main(steps, times_path, libcudart):
	torch.manual_seed(0)
	model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
				    torch.nn.Linear(128, 10))
	opt = torch.optim.SGD(model.parameters(), lr=0.01)
	x = torch.randn(32, 64)
	y = torch.randn(32, 10)
	launch = launcher(libcudart) if libcudart else None
	times = open(times_path, "w")
	if os.environ.get("TORCH_TRAIN_LINGER"):
		def linger():
			print("LINGER", flush=True)
			end = time.monotonic() + 120
			while hasattr(sys, "_tptrace_state") and time.monotonic() < end:
				time.sleep(0.001)
		atexit.register(linger)
	print("READY", os.getpid(), flush=True)
	sys.stdin.readline()
	# TORCH_TRAIN_SLEEP=SEC: the main thread first sleeps in C (blocked for tptrace's door),
	# until SIGUSR1 at the latest
	if float(os.environ.get("TORCH_TRAIN_SLEEP", "0")) > 0:
		signal.signal(signal.SIGUSR1, on_usr1)
		try:
			time.sleep(float(os.environ["TORCH_TRAIN_SLEEP"]))
		except Wake:
			pass
		signal.signal(signal.SIGUSR1, signal.SIG_IGN)
	keyavg = os.environ.get("TORCH_TRAIN_KEYAVG")
	prof = codes = None
	for step in range(steps):
		if keyavg:
			# tptrace's snippets keep their state in sys._tptrace_state, a dict per snippet
			states = getattr(sys, "_tptrace_state", None) or {}
			on = [st for st in states.values()
			      if isinstance(st, dict) and st.get("prof") is not None]
			if on:
				prof = on[0]["prof"]
				# and the code objects of tptrace's snippets, which the profile names:
				# torch reads their names when it builds its events (after tptrace let
				# them go, the names are freed memory: UnicodeDecodeError)
				codes = on[0].get("codes")
			elif prof is not None and not torch._C._autograd._profiler_enabled():
				break
		t0, c0 = time.monotonic_ns(), time.thread_time_ns()
		with record_function("custom_phase"):
			loss = torch.nn.functional.mse_loss(model(x), y)
		opt.zero_grad()
		loss.backward()
		opt.step()
		if launch is not None:
			with record_function("launch_phase"):
				launch()
		# a step of a few ms, as a real job's: the profiler's cost is then a ratio
		time.sleep(0.002)
		times.write("%d %d %d %d\n" % (t0, time.monotonic_ns() - t0, time.thread_time_ns() - c0,
						 torch._C._autograd._profiler_enabled()))
		times.flush()
		if step % 10 == 0:
			print("step %d loss %.6f" % (step, loss.item()), flush=True)
		if os.environ.get("TORCH_TRAIN_LINGER") and torch._C._autograd._profiler_enabled():
			break
	if keyavg and prof is not None:
		rows = [{"key": e.key, "count": e.count, "self_cpu_us": e.self_cpu_time_total,
			 "cpu_total_us": e.cpu_time_total} for e in prof.key_averages()]
		import json
		with open(keyavg, "w") as f:
			json.dump(rows, f)
		print("KEYAVG %d" % len(rows), flush=True)
	print("DONE", flush=True)


main(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
