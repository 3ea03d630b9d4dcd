# Programs used only by tests/e2e (workloads shared with demo/bench live in tests/workloads).
E2E_DIR := $(OUTPUT)/e2e

$(E2E_DIR):
	$(Q)mkdir -p $@

# Calls the real libcudart.so.13 with known arguments (entry observable without a driver).
$(E2E_DIR)/real_args: tests/e2e/progs/real_args.c | $(E2E_DIR)
	$(call msg,CXX,$@)
	$(Q)$(CXX) -x c++ -O1 -g -I$(CUDA_HOME)/include $< -L$(CUDA_HOME)/lib -lcudart \
		-Wl,-rpath,$(CUDA_HOME)/lib -o $@

TEST_BINS += $(E2E_DIR)/real_args

# Every probed runtime API once with known arguments (tests/e2e/test_trace_opts.py): on the
# real libcudart.so.13 and on the sim, with the legacy default stream and, as
# `nvcc --default-stream per-thread` compiles it, with the _ptsz/_ptds entry points.
API_CALLS_CFLAGS := -O1 -g -Wall -rdynamic -I$(CUDA_HOME)/include -Itests/workloads
API_CALLS_DEPS   := tests/e2e/progs/api_calls.c tests/workloads/handshake.h tests/e2e/e2e.mk
$(E2E_DIR)/api_calls_real: $(API_CALLS_DEPS) | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(API_CALLS_CFLAGS) $< -L$(CUDA_HOME)/lib -l:libcudart.so.13 \
		-Wl,-rpath,$(CUDA_HOME)/lib -o $@

$(E2E_DIR)/api_calls_real_pt: $(API_CALLS_DEPS) | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(API_CALLS_CFLAGS) -DCUDA_API_PER_THREAD_DEFAULT_STREAM $< \
		-L$(CUDA_HOME)/lib -l:libcudart.so.13 -Wl,-rpath,$(CUDA_HOME)/lib -o $@

$(E2E_DIR)/api_calls_sim: $(API_CALLS_DEPS) $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(API_CALLS_CFLAGS) $< -L$(SIM_LIB_DIR) -lcudart \
		-Wl,-rpath,$(abspath $(SIM_LIB_DIR)) -o $@

$(E2E_DIR)/api_calls_sim_pt: $(API_CALLS_DEPS) $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(API_CALLS_CFLAGS) -DCUDA_API_PER_THREAD_DEFAULT_STREAM $< -L$(SIM_LIB_DIR) \
		-lcudart -Wl,-rpath,$(abspath $(SIM_LIB_DIR)) -o $@

TEST_BINS += $(addprefix $(E2E_DIR)/,api_calls_real api_calls_real_pt api_calls_sim api_calls_sim_pt)

# Python frames of every thread of a process, as JSON lines (tests/e2e/test_pyframes.py).
$(E2E_DIR)/pyframes_dump: tests/e2e/pyframes_dump.c $(OUTPUT)/libtptrace.a | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $< $(OUTPUT)/libtptrace.a $(LDLIBS) -o $@

TEST_BINS += $(E2E_DIR)/pyframes_dump

# The Python door (user/py/pyrun.c) alone: run a snippet in a process (tests/e2e/test_pyrun.py).
$(E2E_DIR)/pyrun_exec: tests/e2e/pyrun_exec.c $(OUTPUT)/libtptrace.a | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $< $(OUTPUT)/libtptrace.a $(LDLIBS) -o $@

TEST_BINS += $(E2E_DIR)/pyrun_exec

# C loops for the door's target processes, loaded with ctypes.
$(E2E_DIR)/libbusy_c.so: tests/workloads/busy_c.c | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) -O1 -g -shared -fPIC -Wall $< -o $@

TEST_BINS += $(E2E_DIR)/libbusy_c.so

# Snapshots of processes as JSON lines, the engine alone (tests/e2e/test_stacks.py, bench).
$(E2E_DIR)/stacks_dump: tests/e2e/stacks_dump.c $(OUTPUT)/libtptrace.a | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $< $(OUTPUT)/libtptrace.a $(LDLIBS) -o $@

TEST_BINS += $(E2E_DIR)/stacks_dump

# pyframes_line() against CPython's own line numbers (tests/workloads/py_linetables.py).
$(E2E_DIR)/pyframes_lines: tests/e2e/pyframes_lines.c $(OUTPUT)/libtptrace.a | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $< $(OUTPUT)/libtptrace.a $(LDLIBS) -o $@

TEST_BINS += $(E2E_DIR)/pyframes_lines

# The simulated stack on its own (tests/e2e/test_sim.py): sim CUPTI records of known calls.
# Links the sim runtime, CUPTI and driver (a driver-API program links libcuda.so.1 itself).
$(E2E_DIR)/sim_records: tests/e2e/progs/sim_records.c $(SIM_CUDART) $(SIM_CUPTI) $(SIM_DRIVER) | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) -O1 -g -Wall -rdynamic -pthread -I$(CUDA_HOME)/include $< -L$(SIM_LIB_DIR) \
		-l:libcupti.so.13 -l:libcudart.so.13 -L$(SIM_DRIVER_DIR) -l:libcuda.so.1 \
		-Wl,-rpath,$(abspath $(SIM_LIB_DIR)):$(abspath $(SIM_DRIVER_DIR)) -o $@

TEST_BINS += $(E2E_DIR)/sim_records

# The BPF stack walker and user/core/ustack.c alone: one JSON line per probed call with its
# resolved stack (tests/e2e/test_pystacks.py, bench).
$(E2E_DIR)/ustack_dump: tests/e2e/ustack_dump.c $(OUTPUT)/libtptrace.a | $(E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $< $(OUTPUT)/libtptrace.a $(LDLIBS) -o $@

TEST_BINS += $(E2E_DIR)/ustack_dump
