# GPU (CUPTI agent) e2e pieces (included from tests/sim/sim.mk). The agent itself,
# $(AGENT_SO), is part of the product: user/agent/agent.mk, included by the top Makefile.
#   $(E2E_DIR)/gpu_attach           drives user/gpu/gpu.c + user/trace/gpu_trace.c against a running pid
GPU_E2E_DIR := $(OUTPUT)/e2e

$(GPU_E2E_DIR)/gpu_attach: tests/e2e/progs/gpu_attach.c $(OUTPUT)/libtptrace.a $(AGENT_SO) | $(GPU_E2E_DIR)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) -Iuser/agent $< $(OUTPUT)/libtptrace.a $(LDLIBS) -o $@

TEST_BINS += $(AGENT_SO) $(GPU_E2E_DIR)/gpu_attach

# Tier-1 unit test of gpu_trace (runs from .output/unit like the others).
$(OUTPUT)/unit/test_gpu_trace: tests/unit/test_gpu_trace.c tests/unit/check.h $(OUTPUT)/libtptrace.a
	$(Q)mkdir -p $(@D)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(ALL_CFLAGS) -Itests/unit -DUNIT_OUT_DIR='"$(abspath $(OUTPUT)/unit)"' $< \
		$(OUTPUT)/libtptrace.a $(LDLIBS) -o $@

TEST_BINS += $(OUTPUT)/unit/test_gpu_trace
