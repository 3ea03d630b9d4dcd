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
