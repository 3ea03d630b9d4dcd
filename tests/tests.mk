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

# the same under load: one busy loop per CPU beside it (tests/busy.sh); a test that fails only
# here depends on timing. `make test-loaded RUN_ARGS="--repeat 3 -k test_pyrun"`
.PHONY: test-loaded
test-loaded: deps
	$(Q)$(MAKE) --no-print-directory all test-bins
	$(Q)tests/busy.sh $(RUN_ARGS)
