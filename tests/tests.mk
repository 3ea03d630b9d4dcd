# Test build rules. Each part adds its binaries to TEST_BINS.
#   tests/sim/sim.mk            simulated libcudart.so.13 (and later NCCL, CUPTI, allocator)
#   tests/workloads/workloads.mk programs the e2e tests attach to
#   tests/unit/unit.mk           tier-1 unit tests (no root)
SIM_LIB_DIR := $(OUTPUT)/sim/lib
WL_DIR      := $(OUTPUT)/tests
-include tests/sim/sim.mk
-include tests/workloads/workloads.mk
-include tests/unit/unit.mk
include tests/e2e/e2e.mk

.PHONY: test-bins
test-bins: $(TEST_BINS)

# every tier; `make test RUN_ARGS="--tier unit -k decode"` passes a selection to tests/run.py
test: deps
	$(Q)$(MAKE) --no-print-directory all test-bins
	$(Q)python3 tests/run.py $(RUN_ARGS)
