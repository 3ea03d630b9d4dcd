# Benchmark build (make bench; not part of make test). Run as
#   make -f tests/bench/bench.mk bench-bins
# from the repository root: it includes the top Makefile for its variables and rules.
# bench-bins builds everything tests/bench/run.py measures: the product (tptrace, tptrace-fr,
# the agent), the workloads on the simulated stack, the dump generator and the probes below.
include Makefile
.DEFAULT_GOAL := bench-bins

BENCH_OUT := $(OUTPUT)/bench
BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Ivmlinux/$(ARCH) -Ibpf \
	      -I/usr/include/$(shell uname -m)-linux-gnu

$(BENCH_OUT):
	$(Q)mkdir -p $@

# the empty floor
$(BENCH_OUT)/bench_empty.bpf.o: tests/bench/bench_empty.bpf.c vmlinux/$(ARCH)/vmlinux.h | $(BENCH_OUT)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@
	$(Q)llvm-strip -g $@ 2>/dev/null || true

# the ladder: tptrace's own entry program (bpf/cuda.bpf.c) cut after step N (TP_BENCH_STOP);
# the full step is the product's $(OUTPUT)/cuda.bpf.o itself
BENCH_STOPS := 1 2
$(BENCH_OUT)/cuda_stop%.bpf.o: bpf/cuda.bpf.c bpf/cuda.h vmlinux/$(ARCH)/vmlinux.h | $(BENCH_OUT)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -DTP_BENCH_STOP=$* -c $< -o $@
	$(Q)llvm-strip -g $@ 2>/dev/null || true

BENCH_BPF_OBJS := $(BENCH_OUT)/bench_empty.bpf.o $(OUTPUT)/cuda.bpf.o \
		  $(patsubst %,$(BENCH_OUT)/cuda_stop%.bpf.o,$(BENCH_STOPS))

# links user/core/cuda_api.o for the attach cookie tptrace gives a symbol (--api)
$(BENCH_OUT)/bench_probe: tests/bench/bench_probe.c $(OUTPUT)/libtptrace.a | $(BENCH_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $< $(OUTPUT)/libtptrace.a $(LDLIBS) -o $@

$(BENCH_OUT)/bench_loop: tests/bench/bench_loop.c | $(BENCH_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -D_GNU_SOURCE $< -ldl -lpthread -o $@

# -rdynamic: the fabricated launches name fake_gemm/fake_relu from this binary's symbols
$(BENCH_OUT)/bench_pipeline: tests/bench/bench_pipeline.c $(OUTPUT)/libtptrace.a | $(BENCH_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) -rdynamic $< $(OUTPUT)/libtptrace.a $(LDLIBS) -ldl -o $@

BENCH_BINS := $(addprefix $(BENCH_OUT)/,bench_probe bench_loop bench_pipeline)

.PHONY: bench-bins
bench-bins: all $(WL_DIR)/sim_train $(WL_DIR)/nccl_rank $(SIM_CUDART) $(OUTPUT)/tptrace-fr-gen \
	    $(BENCH_BPF_OBJS) $(BENCH_BINS) $(WL_DIR)/stack_app $(OUTPUT)/e2e/stacks_dump \
	    $(OUTPUT)/e2e/ustack_dump
