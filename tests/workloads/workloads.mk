# Workloads the e2e tests attach to (included from tests/tests.mk). Each prints "READY <pid>",
# waits for "GO" on stdin, works, prints "DONE" (tests/workloads/handshake.h).
NVCC        ?= $(CUDA_HOME)/bin/nvcc
WL_CFLAGS   := -O2 -g -Wall -Wextra -Wno-unused-parameter -pthread -D_GNU_SOURCE \
	       -I$(CUDA_HOME)/include -Itests/workloads -Itests/sim/cudart -MMD -MP
# Host code only matters; one small arch keeps nvcc fast.
WL_NVFLAGS  := -g -arch=sm_75 -Itests/workloads
SIM_RPATH   := $(abspath $(SIM_LIB_DIR))
WL_BINS     := $(addprefix $(WL_DIR)/,sim_train nvcc_shared nvcc_static dlopen_app nocuda)

$(WL_DIR):
	$(Q)mkdir -p $@

# Linked against the simulated runtime; the rpath makes it load the sim, not the real one.
$(WL_DIR)/sim_train: tests/workloads/sim_train.c tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -L$(SIM_LIB_DIR) -lcudart -Wl,-rpath,$(SIM_RPATH) -o $@

# Links against the real libcudart.so.13 at build time; the rpath picks the sim at run time.
$(WL_DIR)/nvcc_shared: tests/workloads/nvcc_app.cu tests/workloads/handshake.h $(SIM_CUDART) | $(WL_DIR)
	$(call msg,NVCC,$@)
	$(Q)$(NVCC) $(WL_NVFLAGS) -cudart shared -Xlinker -rpath -Xlinker $(SIM_RPATH) $< -o $@

$(WL_DIR)/nvcc_static: tests/workloads/nvcc_app.cu tests/workloads/handshake.h | $(WL_DIR)
	$(call msg,NVCC,$@)
	$(Q)$(NVCC) $(WL_NVFLAGS) $< -o $@

$(WL_DIR)/dlopen_app: tests/workloads/dlopen_app.c tests/workloads/workloads.mk | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -ldl -o $@

$(WL_DIR)/nocuda: tests/workloads/nocuda.c | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) $< -o $@

TEST_BINS += $(WL_BINS)

-include $(patsubst %,%.d,$(filter-out %nvcc_shared %nvcc_static,$(WL_BINS)))
