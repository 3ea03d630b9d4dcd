# tptrace --torch: torch.profiler inside the target for the trace window (user/trace/torchprof.c).
# Run on the target's main thread by user/py/pyrun.c: `run(args, state)` with args["op"] "start" or
# "stop"; `state` is the only storage between the two calls. Never prints, imports only modules
# torch itself has loaded, and leaves nothing behind: stop removes the hook and clears state.
# Tested on torch 1.13 (legacy profiler, no Kineto) and 2.13 (Kineto, CPU; tests/e2e/test_torch2_prof.py).


def marker(torch, time):
	# record_function spans bracketed by CLOCK_MONOTONIC reads: tptrace maps the profiler's
	# clock onto its own with them (a span starts inside [m0, ma] and ends inside [mb, m1]);
	# a few of them, as the first call of a cold path is slow and its bracket wide
	out = []
	for _ in range(4):
		rf = torch.autograd.profiler.record_function("tptrace#clock")
		m0 = time.monotonic_ns()
		rf.__enter__()
		ma = time.monotonic_ns()
		mb = time.monotonic_ns()
		rf.__exit__(None, None, None)
		m1 = time.monotonic_ns()
		out.append([m0, ma, mb, m1])
	return out


def start(torch, args, state):
	import sys
	import time
	import threading

	if state.get("prof") is not None:
		return {"error": "tptrace's profiler is already running in this process"}
	if torch._C._autograd._profiler_enabled():
		return {"error": "a torch profiler is already running in this process"}
	acts = [torch.profiler.ProfilerActivity.CPU]
	# CUDA activity means a CUPTI subscriber: only one at a time, and tptrace --gpu has one
	cuda = bool(args.get("cuda")) and torch.cuda.is_available()
	if cuda:
		acts.append(torch.profiler.ProfilerActivity.CUDA)
	optim = sys.modules.get("torch.optim.optimizer")
	hook_api = getattr(optim, "register_optimizer_step_post_hook", None)
	kw = {}
	if hook_api is not None:
		# 2.x: steps come from prof.step(), which records ProfilerStep#N only with a schedule
		kw["schedule"] = lambda step: torch.profiler.ProfilerAction.RECORD
	prof = torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True, **kw)
	# (2.x: Kineto writes "profiler_start"/"profiler_stop" lines on the job's stderr, as it
	# does for any user of torch.profiler; it reads KINETO_LOG_LEVEL at load, before we came)
	prof.start()
	state["prof"] = prof
	state["steps"] = 0
	# how deep the job's own stack is under this snippet (the door's frames and ours above
	# it): 2.x's Python tracer finds the whole stack open at its start, and by the stop our
	# frames' code is freed and their names unreliable; the depth tells them apart
	# (2.x's tracer reads the names of the frames open at its start from their code objects at
	# the stop: ours are kept alive until then, or it reads freed memory, and torch's own
	# conversion of a name fails, UnicodeDecodeError)
	f = sys._getframe()
	codes = []
	while f is not None and f.f_code.co_filename in ("<tptrace snippet>", "<tptrace>", "<string>"):
		codes.append(f.f_code)
		f = f.f_back
	state["codes"] = codes
	depth = 0
	while f is not None:
		depth += 1
		f = f.f_back
	state["job_depth"] = depth
	try:
		# a job that ends inside the window must not end with the profiler on: 1.13's
		# Python tracer then hangs the interpreter's exit. Stopped first thing at exit (its
		# events are lost with the process); tptrace's stop unregisters it.
		# (atexit is built into CPython: importing it reads no file; torch has it loaded)
		import atexit

		def at_exit():
			# a stop of tptrace's may still run after this, during finalization: it
			# must find the profile gone with the process, not a profiler to stop
			state["stopped_at_exit"] = True
			prof.stop()
		state["atexit"] = at_exit
		atexit.register(at_exit)
		if hook_api is not None:
			def on_step(opt, a, k):
				state["steps"] += 1
				prof.step()
			state["hook"] = hook_api(on_step)
		clock = marker(torch, time)
	except BaseException:
		# nothing of ours stays on when the start fails half-way
		if "hook" in state:
			state["hook"].remove()
		if "atexit" in state:
			sys.modules["atexit"].unregister(state["atexit"])
		state.clear()
		prof.stop()
		raise
	return {"clock": clock, "tid": threading.get_native_id(),
		"snippet_file": marker.__code__.co_filename,
		"torch": torch.__version__, "cuda": cuda,
		"kineto": bool(torch.autograd.kineto_available()),
		"steps": "optimizer_step_post_hook" if hook_api is not None else
			 "Optimizer.step spans"}


def stop(torch, args, state):
	import sys
	import time
	import json

	prof = state.get("prof")
	if prof is None:
		return {"error": "tptrace's profiler is not running in this process"}
	if state.get("stopped_at_exit"):
		# the job is exiting: its own exit stopped the profiler and the events go with it
		state.clear()
		return {"exiting": True}
	# this snippet's frames are in the profile too (the marker's spans run inside them): their
	# code objects join the start's, kept alive as long as the list is (the profiler object
	# names them; a job holding both reads no freed memory)
	f = sys._getframe()
	codes = state.get("codes")
	while codes is not None and f is not None and \
			f.f_code.co_filename in ("<tptrace snippet>", "<tptrace>", "<string>"):
		codes.append(f.f_code)
		f = f.f_back
	clock = marker(torch, time)
	codes is not None and codes.append(marker.__code__)
	steps = state.get("steps")
	job_depth = state.get("job_depth")
	hook = state.pop("hook", None)
	if hook is not None:
		hook.remove()
	sys.modules["atexit"].unregister(state.pop("atexit"))
	try:
		prof.stop()
		rows = kineto_rows(prof, sys)
		if rows is None:
			rows = legacy_rows(prof.events())
	finally:
		state.clear()
	stacks = {}
	n = 0
	marks = []
	own = own_python(rows, marker.__code__.co_filename + "(", job_depth)
	with open(args["path"], "w") as f:
		for name, thread, start, end, user, stack, shapes, types, py in rows:
			sid = stacks.get(stack)
			if sid is None:
				sid = stacks[stack] = len(stacks)
				f.write(json.dumps(["s", sid, list(stack)]) + "\n")
			if name == "tptrace#clock":
				marks.append([start, end, thread])
			line = ["e", name, thread, start, end, bool(user), sid, shapes or []]
			if py is not None:
				# 2.x, with_stack: the Python tracer's frames (Kineto's python_function)
				line.append({"py": True, "id": py[0], "parent": py[1], "own": py[0] in own})
			elif types:
				line.append({"types": types})
			f.write(json.dumps(line) + "\n")
			n += 1
	marks.sort()
	return {"clock": clock, "events": n, "markers": marks, "steps": steps}


def kineto_rows(prof, sys):
	# 2.x: Kineto's own events as it recorded them (prof.events() would build torch's
	# FunctionEvent tree first: 140 s for 3 s of a training loop with stacks, against 0.3 s),
	# filtered as torch filters them; times in µs from the trace's start, as prof.events()
	res = getattr(getattr(prof, "profiler", None), "kineto_results", None)
	if res is None or not hasattr(res, "trace_start_ns") or not hasattr(res, "events"):
		return None
	util = sys.modules.get("torch.autograd.profiler_util")
	skip = getattr(util, "_filter_name", lambda name: False)
	t0 = res.trace_start_ns()
	rows = []
	for e in res.events():
		try:
			name = e.name()
		except UnicodeDecodeError:
			# a frame whose code was freed before the stop: torch reads its name there
			name = "<name unreadable: code freed before the profiler stopped>"
		if skip(name) or getattr(e, "is_hidden_event", lambda: False)():
			continue
		if e.device_type().name != "CPU":
			continue
		py = None
		if getattr(e, "is_python_function", lambda: False)():
			py = (e.python_id(), e.python_parent_id())
		rows.append((name, e.start_thread_id(), (e.start_ns() - t0) / 1000.0,
			     (e.end_ns() - t0) / 1000.0, e.is_user_annotation(), tuple(e.stack()),
			     [list(x) for x in e.shapes()], list(e.dtypes()), py))
	return rows


def legacy_rows(events):
	# 1.13: the legacy profiler's FunctionEvents, stacks per event
	rows = []
	for e in events:
		if getattr(e, "device_type", None) is not None and e.device_type.name != "CPU":
			continue
		user = getattr(e, "is_user_annotation", None)
		if user is None:
			user = e.scope == 7	# at::RecordScope::USER_SCOPE: record_function
		rows.append((e.name, e.thread, e.time_range.start, e.time_range.end, user,
			     tuple(e.stack or ()), e.input_shapes, None, None))
	return rows


def own_python(rows, prefix, job_depth):
	# the Python frames of tptrace's snippets (start, stop, the optimizer hook), all they
	# called, and above them the door's wrapper (PyRun_SimpleString's "<string>" module, the
	# "<tptrace>" code it compiles, their exec): their python_ids (2.x; none in 1.13)
	parent = {}
	names = {}
	mine = set()
	for row in rows:
		py = row[8]
		if py is not None:
			parent[py[0]] = py[1]
			names[py[0]] = row[0]
			if row[0].startswith(prefix):
				mine.add(py[0])
	# the frames open when the profiler started (on the main thread, before the start
	# markers' end): the one just below the job's stack is the door's, and all under it ours
	clock = sorted((r[2], r[3], r[1]) for r in rows if r[0] == "tptrace#clock")
	if job_depth and len(clock) >= 4:
		w0, main = clock[3][1], clock[3][2]
		for r in rows:
			if r[8] is None or r[1] != main or r[2] > w0:
				continue
			d = 0
			p = r[8][0]
			while p in parent and d <= job_depth + 1:
				d += 1
				p = parent[p]
			if d == job_depth + 1:
				mine.add(r[8][0])
	for pid in list(mine):
		p = parent.get(pid)
		while p in names and (names[p] == "<built-in function exec>" or
				      names[p].startswith("<string>(") or
				      names[p].startswith("<tptrace>(")):
			mine.add(p)
			p = parent.get(p)
	own = set(mine)
	not_own = set()
	for pid in parent:
		chain = []
		p = pid
		while p in parent and p not in own and p not in not_own and len(chain) < 10000:
			chain.append(p)
			p = parent[p]
		(own if p in own else not_own).update(chain)
	return own


def run(args, state):
	import sys

	torch = sys.modules.get("torch")
	if torch is None or not hasattr(torch, "profiler"):
		return {"error": "torch is not imported in this process"}
	if args.get("op") == "start":
		return start(torch, args, state)
	return stop(torch, args, state)
