# Benchmark build (make bench; not part of make test). Run as
#   make -f tests/bench/bench.mk bench-bins
# from the repository root: it includes the top Makefile for its variables and rules.
include Makefile
.DEFAULT_GOAL := bench-bins

BENCH_OUT := $(OUTPUT)/bench

$(BENCH_OUT):
	$(Q)mkdir -p $@

$(BENCH_OUT)/bench_probes.bpf.o: tests/bench/bench_probes.bpf.c bpf/cuda.h vmlinux/$(ARCH)/vmlinux.h | $(BENCH_OUT)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Ivmlinux/$(ARCH) -Ibpf \
		-I/usr/include/$(shell uname -m)-linux-gnu -c $< -o $@
	$(Q)llvm-strip -g $@ 2>/dev/null || true

$(BENCH_OUT)/bench_probes.skel.h: $(BENCH_OUT)/bench_probes.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name bench_probes_bpf > $@

$(BENCH_OUT)/bench_probe: tests/bench/bench_probe.c $(BENCH_OUT)/bench_probes.skel.h
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -D_GNU_SOURCE -I$(BENCH_OUT) $< -lbpf -lelf -lz -o $@

$(BENCH_OUT)/bench_loop: tests/bench/bench_loop.c | $(BENCH_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(CFLAGS) -D_GNU_SOURCE $< -ldl -o $@

# -rdynamic: the fabricated launches name fake_gemm/fake_relu from this binary's symbols
$(BENCH_OUT)/bench_pipeline: tests/bench/bench_pipeline.c $(OUTPUT)/libtptrace.a | $(BENCH_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) -rdynamic $< $(OUTPUT)/libtptrace.a $(LDLIBS) -ldl -o $@

BENCH_BINS := $(addprefix $(BENCH_OUT)/,bench_probe bench_loop bench_pipeline)

.PHONY: bench-bins
bench-bins: tptrace $(WL_DIR)/sim_train $(SIM_CUDART) $(BENCH_BINS)
