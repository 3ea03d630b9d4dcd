# tptrace's other PyTorch instruments (user/torchprof.c, torch_instr__*): run on the target's
# main thread by user/pyrun.c as `run(args, state)`, args {"what": "mem" | "fr" | "logs",
# "op": "start" | "stop", "path": output file tptrace made, "logs": [names]}. Each is refused
# with one line where this process's torch lacks the API. Never prints; imports only modules
# already loaded; stop undoes what start did and clears state.


def mem(torch, args, state):
	import sys

	rec = getattr(torch.cuda.memory, "_record_memory_history", None)
	if rec is None:
		return {"error": "torch.cuda.memory._record_memory_history is absent in PyTorch %s "
			"(it came with 1.13)" % torch.__version__}
	if not torch.cuda.is_available():
		return {"error": "CUDA is not available to this process's PyTorch %s "
			"(torch.cuda.is_available() is False): no CUDA memory history to record"
			% torch.__version__}
	if args["op"] == "start":
		# a bool selects the 1.13 signature, which 2.x keeps as its legacy form
		rec(True)
		state["mem"] = True
		return {"torch": torch.__version__}
	try:
		snap = torch.cuda.memory._snapshot()
	finally:
		rec(False)
		state.clear()
	with open(args["path"], "wb") as f:
		sys.modules["pickle"].dump(snap, f)
	return {"segments": len(snap.get("segments", ())) if isinstance(snap, dict) else None}


def fr(torch, args, state):
	c10d = getattr(torch._C, "_distributed_c10d", None)
	dump = getattr(c10d, "_dump_nccl_trace", None)
	if dump is None:
		return {"error": "torch._C._distributed_c10d._dump_nccl_trace is absent in PyTorch %s "
			"(the NCCL flight recorder's dump came with PyTorch 2.2, in builds with NCCL)"
			% torch.__version__}
	if args["op"] == "start":
		return {"torch": torch.__version__}
	data = dump()
	with open(args["path"], "wb") as f:
		f.write(data)
	return {"bytes": len(data)}


def logs(torch, args, state):
	import sys

	tlog = getattr(torch, "_logging", None) or sys.modules.get("torch._logging")
	if tlog is None or not hasattr(tlog, "set_logs"):
		return {"error": "torch._logging is absent in PyTorch %s (structured compile logs "
			"came with PyTorch 2.1)" % torch.__version__}
	logging = sys.modules["logging"]
	if args["op"] == "start":
		f = open(args["path"], "w")
		tlog.set_logs(**{name: True for name in args["logs"]})
		# set_logs writes through StreamHandlers on the "torch" logger (stderr): point
		# them at tptrace's file for the window, so nothing appears in the job's output
		moved = []
		for h in logging.getLogger("torch").handlers:
			if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
				moved.append((h, h.setStream(f)))
		state["logs"] = (f, moved)
		return {"torch": torch.__version__}
	f, moved = state.pop("logs")
	try:
		tlog.set_logs()
		for h, old in moved:
			if old is not None:
				h.setStream(old)
	finally:
		f.close()
		state.clear()
	return {}


def run(args, state):
	import sys

	torch = sys.modules.get("torch")
	if torch is None:
		return {"error": "torch is not imported in this process"}
	return {"mem": mem, "fr": fr, "logs": logs}[args["what"]](torch, args, state)
