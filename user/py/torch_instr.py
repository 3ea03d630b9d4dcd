# tptrace's other PyTorch instruments (user/trace/torchprof.c, torch_instr__*): run on the target's
# main thread by user/py/pyrun.c as `run(args, state)`, args {"what": "mem" | "fr" | "logs" | "trace",
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
	# _dump_fr_trace: the recorder of every backend (gloo's too) where this torch has it;
	# _dump_nccl_trace: NCCL's (2.2 on)
	api = "_dump_fr_trace"
	dump = getattr(c10d, api, None)
	if dump is None:
		api = "_dump_nccl_trace"
		dump = getattr(c10d, api, None)
	if dump is None:
		return {"error": "torch._C._distributed_c10d._dump_nccl_trace is absent in PyTorch %s "
			"(the NCCL flight recorder's dump came with PyTorch 2.2, in builds with NCCL; "
			"_dump_fr_trace, every backend's, later)" % torch.__version__}
	if args["op"] == "start":
		return {"torch": torch.__version__, "api": api}
	data = dump()
	with open(args["path"], "wb") as f:
		f.write(data)
	return {"bytes": len(data), "api": api}


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
		# set_logs writes through StreamHandlers (stderr) it puts on every logger torch
		# registered ("torch", "torch._dynamo", ...): point them at tptrace's file for the
		# window, so nothing appears in the job's output
		moved = []
		reg = getattr(getattr(tlog, "_internal", None), "log_registry", None)
		names = set(reg.get_log_qnames()) if hasattr(reg, "get_log_qnames") else set()
		for name in sorted(names | {"torch"}):
			for h in logging.getLogger(name).handlers:
				if isinstance(h, logging.StreamHandler) and \
				   not isinstance(h, logging.FileHandler):
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


def trace(torch, args, state):
	# torch's structured trace (trace_structured; what TORCH_TRACE=DIR turns on at start, for
	# tlparse): torch's own LazyTraceHandler with torch's formatter on torch.__trace for the
	# window, writing into tptrace's directory under torch's own file name; the entries are
	# then exactly TORCH_TRACE's. Untracked by torch._logging, so a set_logs() call of the
	# job's meanwhile leaves it in place.
	import sys
	import os

	internal = sys.modules.get("torch._logging._internal")
	if internal is None or not all(hasattr(internal, n) for n in
				       ("trace_log", "trace_structured", "LazyTraceHandler",
					"TorchLogsFormatter")):
		return {"error": "torch._logging's structured trace (trace_structured, TORCH_TRACE) is "
			"absent in PyTorch %s" % torch.__version__}
	logging = sys.modules["logging"]
	tl = internal.trace_log
	if args["op"] == "start":
		for h in tl.handlers:
			if getattr(h, "root_dir", None):
				return {"error": "torch's structured trace is already on in this process "
					"(TORCH_TRACE): its files are in %s" % h.root_dir}
		h = internal.LazyTraceHandler(os.path.dirname(args["path"]))
		h.setFormatter(internal.TorchLogsFormatter(trace=True))
		state["trace"] = (h, tl.level)
		tl.setLevel(logging.DEBUG)
		tl.addHandler(h)
		# strings torch interned before the window were written nowhere: the entries of
		# the window refer to them by id, so they come first, as "str" entries
		table = getattr(sys.modules.get("torch._logging.structured"), "INTERN_TABLE", None)
		for s, i in sorted((table or {}).items(), key=lambda kv: kv[1]):
			internal.trace_structured("str", lambda s=s, i=i: (s, i), suppress_context=True)
		return {"torch": torch.__version__, "interned": len(table or ())}
	h, level = state.pop("trace")
	try:
		tl.removeHandler(h)
		tl.setLevel(level)
		path = getattr(h, "_stream_path", None) or getattr(h.stream, "name", None)
		h.close()
	finally:
		state.clear()
	return {"file": os.path.basename(path) if isinstance(path, str) else None}


def run(args, state):
	import sys

	torch = sys.modules.get("torch")
	if torch is None:
		return {"error": "torch is not imported in this process"}
	return {"mem": mem, "fr": fr, "logs": logs, "trace": trace}[args["what"]](torch, args, state)
