# Workloads the e2e tests attach to (included from tests/tests.mk). Each prints "READY <pid>",
# waits for "GO" on stdin, works, prints "DONE" (tests/workloads/handshake.h).
NVCC        ?= $(CUDA_HOME)/bin/nvcc
WL_CFLAGS   := -O2 -g -Wall -Wextra -Wno-unused-parameter -pthread -D_GNU_SOURCE \
	       -I$(CUDA_HOME)/include -Itests/workloads -Itests/sim/cudart -MMD -MP
# Host code only matters; one small arch keeps nvcc fast.
WL_NVFLAGS  := -g -arch=sm_75 -Itests/workloads
SIM_RPATH   := $(abspath $(SIM_LIB_DIR))
WL_BINS     := $(addprefix $(WL_DIR)/,sim_train sim_job nvcc_shared nvcc_static nvcc_shared_pt \
	       nvcc_static_pt dlopen_app nocuda)

$(WL_DIR):
	$(Q)mkdir -p $@

# Linked against the simulated runtime; the rpath makes it load the sim, not the real one.
$(WL_DIR)/sim_train: tests/workloads/sim_train.c tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -L$(SIM_LIB_DIR) -lcudart -Wl,-rpath,$(SIM_RPATH) -o $@

# tptrace report's fault-to-order training loop
$(WL_DIR)/sim_job: tests/workloads/sim_job.c tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -L$(SIM_LIB_DIR) -lcudart -Wl,-rpath,$(SIM_RPATH) -o $@

# Links against the real libcudart.so.13 at build time; the rpath picks the sim at run time.
$(WL_DIR)/nvcc_shared: tests/workloads/nvcc_app.cu tests/workloads/handshake.h $(SIM_CUDART) | $(WL_DIR)
	$(call msg,NVCC,$@)
	$(Q)$(NVCC) $(WL_NVFLAGS) -cudart shared -Xlinker -rpath -Xlinker $(SIM_RPATH) $< -o $@

$(WL_DIR)/nvcc_static: tests/workloads/nvcc_app.cu tests/workloads/handshake.h | $(WL_DIR)
	$(call msg,NVCC,$@)
	$(Q)$(NVCC) $(WL_NVFLAGS) $< -o $@

# The same two, as `nvcc --default-stream per-thread` compiles them: <<<>>> goes to
# __cudaLaunchKernel_ptsz, the runtime calls to their _ptsz entry points.
$(WL_DIR)/nvcc_shared_pt: tests/workloads/nvcc_app.cu tests/workloads/handshake.h $(SIM_CUDART) | $(WL_DIR)
	$(call msg,NVCC,$@)
	$(Q)$(NVCC) $(WL_NVFLAGS) --default-stream per-thread -cudart shared -Xlinker -rpath \
		-Xlinker $(SIM_RPATH) $< -o $@

$(WL_DIR)/nvcc_static_pt: tests/workloads/nvcc_app.cu tests/workloads/handshake.h | $(WL_DIR)
	$(call msg,NVCC,$@)
	$(Q)$(NVCC) $(WL_NVFLAGS) --default-stream per-thread $< -o $@

$(WL_DIR)/dlopen_app: tests/workloads/dlopen_app.c tests/workloads/workloads.mk | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -ldl -o $@

$(WL_DIR)/nocuda: tests/workloads/nocuda.c | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) $< -o $@

TEST_BINS += $(WL_BINS)

-include $(patsubst %,%.d,$(filter-out %nvcc_shared %nvcc_static %_pt,$(WL_BINS)))

# One rank of a simulated NCCL job: sim libnccl.so.2 + sim libcudart.so.13 through the rpath.
$(WL_DIR)/nccl_rank: tests/workloads/nccl_rank.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_NCCL) $(SIM_LIB_DIR)/libnccl.so $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -Itests/sim/nccl -rdynamic $< -L$(SIM_LIB_DIR) -lnccl -lcudart \
		-Wl,-rpath,$(SIM_RPATH) -o $@

# The REAL libnccl.so.2 and libcudart.so.13 from $(CUDA_HOME)/lib (rpath), for argument decoding;
# libcudart is NEEDED although unused, so the process maps it like a real job does.
$(WL_DIR)/nccl_real_args: tests/workloads/nccl_real_args.c tests/workloads/handshake.h tests/workloads/workloads.mk | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -L$(CUDA_HOME)/lib -l:libnccl.so.2 \
		-Wl,--no-as-needed -l:libcudart.so.13 -Wl,--as-needed \
		-Wl,-rpath,$(CUDA_HOME)/lib -o $@

# Compute beside NCCL with an overlap known by construction (two ranks in one process).
$(WL_DIR)/nccl_overlap: tests/workloads/nccl_overlap.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_NCCL) $(SIM_LIB_DIR)/libnccl.so $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -L$(SIM_LIB_DIR) -lnccl -lcudart \
		-Wl,-rpath,$(SIM_RPATH) -o $@

TEST_BINS += $(WL_DIR)/nccl_rank $(WL_DIR)/nccl_real_args $(WL_DIR)/nccl_overlap

-include $(WL_DIR)/nccl_rank.d $(WL_DIR)/nccl_real_args.d $(WL_DIR)/nccl_overlap.d

# Long kernel names for the CUPTI agent's name continuation records (tests/e2e/test_gpu.py).
$(WL_DIR)/gpu_names: tests/workloads/gpu_names.c tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) $< -L$(SIM_LIB_DIR) -lcudart -Wl,-rpath,$(SIM_RPATH) -o $@

TEST_BINS += $(WL_DIR)/gpu_names

# The simulated runtime loaded, CUDA not initialised until GO (tests/e2e/test_gpu.py refusals).
$(WL_DIR)/cudart_uninit: tests/workloads/cudart_uninit.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) $< -L$(SIM_LIB_DIR) -lcudart -Wl,-rpath,$(SIM_RPATH) -o $@

TEST_BINS += $(WL_DIR)/cudart_uninit

# Frame pointers through a pending return probe (tests/e2e/test_stacks_uret.py).
$(WL_DIR)/uret_fp_app: tests/workloads/uret_fp_app.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -fno-omit-frame-pointer $< -L$(SIM_LIB_DIR) -lcudart -Wl,-rpath,$(SIM_RPATH) -o $@

TEST_BINS += $(WL_DIR)/uret_fp_app
-include $(WL_DIR)/gpu_names.d

# GPU memory scenarios on the simulated caching allocator (tests/e2e/test_mem.py).
$(WL_DIR)/alloc_app: tests/workloads/alloc_app.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_ALLOC) $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -O1 -fno-omit-frame-pointer -Itests/sim/alloc $< -L$(SIM_LIB_DIR) \
		-ltpsim_alloc -lcudart -Wl,-rpath,$(SIM_RPATH) -o $@

TEST_BINS += $(WL_DIR)/alloc_app
-include $(WL_DIR)/alloc_app.d

# `tptrace mem` as its own binary (mem_main from libtptrace.a), for tests/e2e/test_mem.py.


# The REAL libcudart.so.13's allocation calls with known arguments (tests/e2e/test_mem.py).
$(OUTPUT)/e2e/mem_real_args: tests/e2e/progs/mem_real_args.c tests/workloads/handshake.h | $(OUTPUT)/e2e
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) $< -L$(CUDA_HOME)/lib -l:libcudart.so.13 -Wl,-rpath,$(CUDA_HOME)/lib -o $@

TEST_BINS += $(OUTPUT)/e2e/mem_real_args

# Driver memory calls on the simulated libcuda.so.1 (tests/e2e/test_mem.py).
$(WL_DIR)/vmm_app: tests/workloads/vmm_app.c tests/workloads/handshake.h $(SIM_DRIVER) | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) $< -L$(SIM_DRIVER_DIR) -l:libcuda.so.1 -Wl,-rpath,$(abspath $(SIM_DRIVER_DIR)) -o $@

TEST_BINS += $(WL_DIR)/vmm_app

# Driver memory calls nested in runtime calls: the simulated runtime on the simulated driver.
$(WL_DIR)/mem_nested_app: tests/workloads/mem_nested_app.c tests/workloads/handshake.h $(SIM_DRIVER) $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) $< -L$(SIM_LIB_DIR) -lcudart -L$(SIM_DRIVER_DIR) -l:libcuda.so.1 \
		-Wl,-rpath,$(SIM_RPATH):$(abspath $(SIM_DRIVER_DIR)) -o $@

TEST_BINS += $(WL_DIR)/mem_nested_app

# Known stacks for the snapshot engine (tests/e2e/test_stacks.py): -O2 without frame pointers,
# so only CFI unwinds it; and a stripped copy (no .symtab: offsets + build-id, no names).
$(WL_DIR)/stack_app: tests/workloads/stack_app.c tests/workloads/handshake.h tests/workloads/workloads.mk | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -fomit-frame-pointer $< -o $@

$(WL_DIR)/stack_app_stripped: $(WL_DIR)/stack_app
	$(call msg,STRIP,$@)
	$(Q)strip -s -o $@ $<

TEST_BINS += $(WL_DIR)/stack_app $(WL_DIR)/stack_app_stripped

$(WL_DIR)/blockcuda:
	$(Q)mkdir -p $@

$(WL_DIR)/blockcuda/libcuda.so.1: tests/workloads/blocking_libcuda.c | $(WL_DIR)/blockcuda
	$(call msg,CC,$@)
	$(Q)$(CC) -O2 -g -fPIC -shared -Wl,-soname,libcuda.so.1 $< -o $@

TEST_BINS += $(WL_DIR)/blockcuda/libcuda.so.1

# Driver-API workloads (tests/e2e/test_gpu_driver.py): a torch.compile-shaped process (Triton
# kernels through cuModuleGetFunction + cuLaunchKernelEx) and CUDA-graph replay. They reach the
# driver with dlopen("libcuda.so.1"), which the simulated runtime has mapped underneath.
$(WL_DIR)/triton_app: tests/workloads/triton_app.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) $< -L$(SIM_LIB_DIR) -lcudart -ldl -Wl,-rpath,$(SIM_RPATH) -o $@

$(WL_DIR)/graph_app: tests/workloads/graph_app.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -L$(SIM_LIB_DIR) -lcudart -ldl -Wl,-rpath,$(SIM_RPATH) -o $@

TEST_BINS += $(WL_DIR)/triton_app $(WL_DIR)/graph_app
-include $(WL_DIR)/triton_app.d $(WL_DIR)/graph_app.d

# Every probed driver entry point with known arguments, in the real driver ABI: linked against
# the toolkit's stub libcuda.so (tests/e2e/test_real_driver.py). It runs with stubdrv/ on
# LD_LIBRARY_PATH, where libcuda.so.1 links to that stub (test-only: never on the rpath).
STUB_LIBCUDA := $(CUDA_HOME)/lib/stubs/libcuda.so
$(WL_DIR)/stubdrv:
	$(Q)mkdir -p $@

$(WL_DIR)/stubdrv/libcuda.so.1: | $(WL_DIR)/stubdrv
	$(Q)ln -sf $(STUB_LIBCUDA) $@

$(WL_DIR)/real_driver_args: tests/workloads/real_driver_args.c tests/workloads/handshake.h \
			    $(WL_DIR)/stubdrv/libcuda.so.1 | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) -O1 -g -Wall -I$(CUDA_HOME)/include -Itests/workloads $< \
		-L$(CUDA_HOME)/lib/stubs -lcuda -o $@

TEST_BINS += $(WL_DIR)/real_driver_args $(WL_DIR)/stubdrv/libcuda.so.1

# Dense multi-threaded launches with cudaGetLastError after each (tests/e2e/test_sim.py, the
# CUPTI join): launches microseconds apart, as PyTorch eager issues them.
$(WL_DIR)/launch_storm: tests/workloads/launch_storm.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -L$(SIM_LIB_DIR) -lcudart -Wl,-rpath,$(SIM_RPATH) -o $@

TEST_BINS += $(WL_DIR)/launch_storm
-include $(WL_DIR)/launch_storm.d

# Native frames through frame pointers (tests/unit/test_ustack_native.c): an executable with
# frame pointers (and endbr64), libnfp_fp.so with, libnfp_nofp.so without, and libnfp_strip.so
# with frame pointers but no .symtab, libnfp_bare.so neither .symtab nor .eh_frame. The
# libraries call each other, resolved at run time.
NFP_DIR    := $(WL_DIR)/nfp
NFP_CFLAGS := -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -Itests/workloads -fno-optimize-sibling-calls
NFP_LIBS   := $(addprefix $(NFP_DIR)/,libnfp_fp.so libnfp_nofp.so libnfp_strip.so libnfp_bare.so)

$(NFP_DIR):
	$(Q)mkdir -p $@

$(NFP_DIR)/libnfp_fp.so: tests/workloads/native_fp_lib.c tests/workloads/native_fp.h | $(NFP_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(NFP_CFLAGS) -fPIC -shared -fno-omit-frame-pointer $< -o $@

$(NFP_DIR)/libnfp_nofp.so: tests/workloads/native_nofp_lib.c tests/workloads/native_fp.h | $(NFP_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(NFP_CFLAGS) -fPIC -shared -fomit-frame-pointer $< -o $@

$(NFP_DIR)/libnfp_strip.so: tests/workloads/native_strip_lib.c tests/workloads/native_fp.h | $(NFP_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(NFP_CFLAGS) -fPIC -shared -fno-omit-frame-pointer $< -o $@.full
	$(Q)strip -s -o $@ $@.full && rm -f $@.full

$(NFP_DIR)/libnfp_bare.so: tests/workloads/native_strip_lib.c tests/workloads/native_fp.h | $(NFP_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(NFP_CFLAGS) -fPIC -shared -fno-omit-frame-pointer -DNFP_BARE \
		-fno-asynchronous-unwind-tables -fno-unwind-tables $< -o $@.full
	$(Q)strip -s -o $@ $@.full && rm -f $@.full

$(NFP_DIR)/native_fp_app: tests/workloads/native_fp_app.c tests/workloads/native_fp.h \
			  tests/workloads/handshake.h $(NFP_LIBS)
	$(call msg,CC,$@)
	$(Q)$(CC) $(NFP_CFLAGS) -fno-omit-frame-pointer -fcf-protection $< -L$(NFP_DIR) \
		-l:libnfp_fp.so -l:libnfp_nofp.so -l:libnfp_strip.so -l:libnfp_bare.so -Wl,-rpath,'$$ORIGIN' -o $@

TEST_BINS += $(NFP_LIBS) $(NFP_DIR)/native_fp_app

# Several devices and contexts, or launches from before a tracer attaches (test_gpu_multi.py).
$(WL_DIR)/gpu_multi: tests/workloads/gpu_multi.c tests/workloads/handshake.h tests/workloads/workloads.mk $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so | $(WL_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -rdynamic $< -L$(SIM_LIB_DIR) -lcudart -ldl -Wl,-rpath,$(SIM_RPATH) -o $@

TEST_BINS += $(WL_DIR)/gpu_multi
