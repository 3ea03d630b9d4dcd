# Tier-1 unit tests (no root). Each test links only the modules it tests and takes no
# arguments: the paths of its data and fixtures are compiled in, absolute, so it runs from any
# directory. Exit status 0 and "ok <n> checks" on success.
UNIT_DIR    := $(OUTPUT)/unit
UNIT_DATA   := tests/unit/data
UNIT_CFLAGS := $(ALL_CFLAGS) -Itests/unit \
	       -DUNIT_DATA_DIR='"$(abspath $(UNIT_DATA))"' \
	       -DUNIT_OUT_DIR='"$(abspath $(UNIT_DIR))"' \
	       -DCUDART_PATH='"$(CUDA_HOME)/lib/libcudart.so.13"'
UNIT_LIBS   := -lelf -lstdc++
NVCC        ?= $(CUDA_HOME)/bin/nvcc

UNIT_TESTS := test_procmaps test_elfsym test_demangle test_fr_trigger
UNIT_BINS  := $(addprefix $(UNIT_DIR)/,$(UNIT_TESTS))
# the fixture test_elfsym reads; the nvcc one only where CUDA is installed (the test skips it
# otherwise and says so)
UNIT_FIXTURES := $(UNIT_DIR)/symfix $(UNIT_DIR)/libsymfix.so $(UNIT_DIR)/symfix2.o
ifneq ($(wildcard $(NVCC)),)
UNIT_FIXTURES += $(UNIT_DIR)/stubfix
endif

TEST_BINS += $(UNIT_BINS) $(UNIT_FIXTURES)

$(UNIT_DIR):
	$(Q)mkdir -p $@

$(UNIT_DIR)/test_procmaps: tests/unit/test_procmaps.c tests/unit/check.h \
			   $(OUTPUT)/user/base/procmaps.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) $(UNIT_LIBS) -o $@

# the fixtures are prerequisites so that building the test builds what it reads
$(UNIT_DIR)/test_elfsym: tests/unit/test_elfsym.c tests/unit/check.h \
			 $(OUTPUT)/user/base/elfsym.o $(OUTPUT)/user/base/demangle.o $(UNIT_FIXTURES) | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) $(UNIT_LIBS) -o $@

$(UNIT_DIR)/test_demangle: tests/unit/test_demangle.c tests/unit/check.h \
			   $(OUTPUT)/user/base/demangle.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) $(UNIT_LIBS) -o $@

# the offline readers' JSON lexer (tptrace-fr, tptrace report)
$(UNIT_DIR)/test_jsonlex: tests/unit/test_jsonlex.c tests/unit/check.h user/base/jsonlex.h \
			  $(OUTPUT)/user/base/jsonlex.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) -o $@

TEST_BINS += $(UNIT_DIR)/test_jsonlex

# symfix2.c first: its locals must sit below symfix.c's; -no-pie makes symfix ET_EXEC
SYMFIX_SRCS := $(UNIT_DATA)/symfix2.c $(UNIT_DATA)/symfix.c
$(UNIT_DIR)/symfix: $(SYMFIX_SRCS) | $(UNIT_DIR)
	$(call msg,CC-FIX,$@)
	$(Q)$(CC) -g -O1 -no-pie $(SYMFIX_SRCS) -o $@

$(UNIT_DIR)/libsymfix.so: $(SYMFIX_SRCS) $(UNIT_DATA)/symfix.map | $(UNIT_DIR)
	$(call msg,CC-FIX,$@)
	$(Q)$(CC) -g -O1 -fPIC -shared -DSYMFIX_SHARED \
		-Wl,--version-script=$(UNIT_DATA)/symfix.map $(SYMFIX_SRCS) -o $@

# a relocatable object: not something elfsym opens
$(UNIT_DIR)/symfix2.o: $(UNIT_DATA)/symfix2.c | $(UNIT_DIR)
	$(call msg,CC-FIX,$@)
	$(Q)$(CC) -g -O1 -c $< -o $@

$(UNIT_DIR)/stubfix: $(UNIT_DATA)/stubfix.cu | $(UNIT_DIR)
	$(call msg,NVCC,$@)
	$(Q)$(NVCC) -g -o $@ $<

.PHONY: unit-test
unit-test: $(UNIT_BINS)
	$(Q)set -e; for t in $(UNIT_BINS); do printf '%s: ' $$t; $$t; done

# modules over the whole user-side library (no BPF needed: records are synthetic)
UNIT_LIB_LIBS := -lbpf -ldw -lelf -lz -lcjson -lprotobuf-c -lstdc++ -lpthread
$(UNIT_DIR)/test_flightrec: tests/unit/test_flightrec.c tests/unit/check.h \
			    $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_flightrec

# --py-stacks: entries' frames through a fake ustack_lookup_fn
$(UNIT_DIR)/test_fr_pystacks: tests/unit/test_fr_pystacks.c tests/unit/check.h \
			      $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_fr_pystacks

# cross-host trigger records and the watch (user/fr/fr_trigger.c)
$(UNIT_DIR)/test_fr_trigger: tests/unit/test_fr_trigger.c tests/unit/check.h \
			     $(OUTPUT)/user/fr/fr_trigger.o $(OUTPUT)/user/base/procmaps.o $(OUTPUT)/user/base/atomic_file.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) -lcjson -o $@

# the dump's "net": /proc/net/tcp parsing, and this process's own sockets through inet_diag
$(UNIT_DIR)/test_fr_net: tests/unit/test_fr_net.c tests/unit/check.h \
			 $(OUTPUT)/user/fr/fr_net.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) -lcjson -lpthread -o $@

TEST_BINS += $(UNIT_DIR)/test_fr_net

# memsnap (GPU memory state, memory_viz snapshot, pickle) on synthetic events
$(UNIT_DIR)/test_memsnap: tests/unit/test_memsnap.c tests/unit/check.h \
			  $(OUTPUT)/user/mem/memsnap.o $(OUTPUT)/user/mem/memlayout.o \
			  $(OUTPUT)/user/base/hashmap.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) -lcjson -o $@

TEST_BINS += $(UNIT_DIR)/test_memsnap

$(UNIT_DIR)/test_decode: tests/unit/test_decode.c tests/unit/check.h \
			 $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_decode

$(UNIT_DIR)/test_session: tests/unit/test_session.c tests/unit/check.h \
			  $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_session

# --py-stacks in the trace writer: python_function slices and stack args from a fake lookup
$(UNIT_DIR)/test_decode_pystacks: tests/unit/test_decode_pystacks.c tests/unit/check.h \
				  $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_decode_pystacks

# the Python door's rule of which threads it may borrow
$(UNIT_DIR)/test_pyrun: tests/unit/test_pyrun.c tests/unit/check.h \
			$(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_pyrun

# the driver API rows: decoding, nesting against a dlopen'ed libcudart, handle naming, the
# flight recorder's progress from driver calls; struct layouts checked against cuda.h
$(UNIT_DIR)/test_driver: tests/unit/test_driver.c tests/unit/check.h \
			 $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g -I$(CUDA_HOME)/include \
		-DCUDA_DRIVER_H='"$(CUDA_HOME)/include/cuda.h"' $(filter %.c %.a,$^) \
		$(UNIT_LIB_LIBS) -ldl -o $@

TEST_BINS += $(UNIT_DIR)/test_driver

# the ring consumer core, built from source with AddressSanitizer: the test hands every record
# over in a buffer of exactly its size, so reading a field before checking the size fails it
CALLS_SRCS := user/core/calls.c user/core/cuda_api.c user/core/nccl_api.c user/base/hashmap.c
$(UNIT_DIR)/test_calls: tests/unit/test_calls.c tests/unit/check.h $(CALLS_SRCS) | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all \
		$(filter %.c,$^) -o $@

TEST_BINS += $(UNIT_DIR)/test_calls

# the flight recorder's real dump writer read back by the analyzer's parser (tools/fr/fr_parse.c)
$(UNIT_DIR)/test_fr_writer: tests/unit/test_fr_writer.c tests/unit/check.h tools/fr/fr_parse.c \
			    tools/fr/fr_parse.h $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -Itools -Itools/fr $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_fr_writer

# the cross-rank merged view of a hang snapshot on synthetic snapshots (exact text)
$(UNIT_DIR)/test_stacktree: tests/unit/test_stacktree.c tests/unit/check.h \
			    $(OUTPUT)/user/stacks/stacktree.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) -o $@

TEST_BINS += $(UNIT_DIR)/test_stacktree

# the snapshot's classification, Python merge and JSON on synthetic frames (no ptrace)
$(UNIT_DIR)/test_stacks: tests/unit/test_stacks.c tests/unit/check.h \
			 $(OUTPUT)/user/stacks/stacks_class.o $(OUTPUT)/user/base/hashmap.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) -lcjson -o $@

TEST_BINS += $(UNIT_DIR)/test_stacks

# the --gpu join on hand-made CUPTI record streams, built from source with AddressSanitizer
GPU_JOIN_SRCS := user/gpu/gpu_join.c user/core/cuda_api.c user/base/hashmap.c
$(UNIT_DIR)/test_gpu_join: tests/unit/test_gpu_join.c tests/unit/check.h $(GPU_JOIN_SRCS) \
			   | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all \
		$(filter %.c,$^) -o $@

TEST_BINS += $(UNIT_DIR)/test_gpu_join

# the flight recorder's Prometheus text (fr_metrics.c) from synthetic records
$(UNIT_DIR)/test_fr_metrics: tests/unit/test_fr_metrics.c tests/unit/check.h \
			     $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -lmicrohttpd -o $@

TEST_BINS += $(UNIT_DIR)/test_fr_metrics

$(UNIT_DIR)/test_fr_retention: tests/unit/test_fr_retention.c tests/unit/check.h \
			     $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_fr_retention

# the trigger-record fuzz target: a seeded mutation loop always, libFuzzer where clang has it
# (FUZZ_CC, FUZZ_LIBFUZZER: tools/tools.mk)
TRIGGER_CORPUS := tests/unit/trigger_corpus
$(UNIT_DIR)/test_fr_trigger_fuzz: tests/unit/test_fr_trigger_fuzz.c tests/unit/fr_trigger_fuzz.c \
			     tests/unit/check.h $(OUTPUT)/user/fr/fr_trigger.o $(OUTPUT)/user/base/procmaps.o $(OUTPUT)/user/base/atomic_file.o \
			     | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -DTRIGGER_CORPUS='"$(abspath $(TRIGGER_CORPUS))"' \
		$(filter %test_fr_trigger_fuzz.c %.o,$^) -lcjson -o $@

$(UNIT_DIR)/fr_trigger_fuzz: tests/unit/fr_trigger_fuzz.c user/fr/fr_trigger.c user/base/procmaps.c user/base/atomic_file.c \
			     user/fr/fr_trigger.h | $(UNIT_DIR)
	$(call msg,FUZZ-CC,$@)
	$(Q)$(FUZZ_CC) -g -O1 -D_GNU_SOURCE $(USER_INC) -I$(OUTPUT) -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined -DTPTRACE_FUZZ_VERBOSITY $(filter %.c,$^) -lcjson -o $@

TEST_BINS += $(UNIT_DIR)/test_fr_trigger_fuzz
ifneq ($(FUZZ_LIBFUZZER),)
TEST_BINS += $(UNIT_DIR)/fr_trigger_fuzz
endif

# native frames through frame pointers (user/core/ustack_native.c) on the live fixture of
# tests/workloads/native_fp_*.c
$(UNIT_DIR)/test_ustack_native: tests/unit/test_ustack_native.c tests/unit/check.h \
				$(OUTPUT)/user/core/ustack_native.o $(OUTPUT)/user/base/elfsym.o \
				$(OUTPUT)/user/base/procmaps.o $(OUTPUT)/user/base/demangle.o \
				$(OUTPUT)/user/base/hashmap.o $(NFP_LIBS) $(NFP_DIR)/native_fp_app | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) -ldw $(UNIT_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_ustack_native

# -o FILE.pftrace: the Perfetto protobuf backend of trace_json, read back with protobuf-c
$(UNIT_DIR)/test_trace_pftrace: tests/unit/test_trace_pftrace.c tests/unit/check.h \
				$(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_trace_pftrace

# the trace writer's .gz (chunks compressed by worker threads) against its plain output
$(UNIT_DIR)/test_trace_json: tests/unit/test_trace_json.c tests/unit/check.h \
			     $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_trace_json

# the JSON backend against the bytes the writer wrote before the trace_writer interface
$(UNIT_DIR)/test_trace_golden: tests/unit/test_trace_golden.c tests/unit/check.h \
			       $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_trace_golden

# --torch's merge on saved snippet results and events (user/trace/torchprof.c): clock, threads,
# tptrace's own events, derived steps
$(UNIT_DIR)/test_torchprof: tests/unit/test_torchprof.c tests/unit/check.h \
			    $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_torchprof

# the pending-return substitution on saved iterator records (links the loader, never loads it)
$(UNIT_DIR)/test_uretinst: tests/unit/test_uretinst.c tests/unit/check.h \
			   $(OUTPUT)/user/stacks/uretinst.o | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.o,$^) -lbpf -lelf -lz -o $@

TEST_BINS += $(UNIT_DIR)/test_uretinst

# the fit of CUPTI's GPU-record clock to CLOCK_MONOTONIC on synthetic drifting samples
$(UNIT_DIR)/test_clock_fit: tests/unit/test_clock_fit.c tests/unit/check.h user/gpu/clock_fit.c \
			    user/gpu/clock_fit.h | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all \
		$(filter %.c,$^) -o $@

TEST_BINS += $(UNIT_DIR)/test_clock_fit

# the growable-array and clock helpers of user/base (header-only)
$(UNIT_DIR)/test_growbuf: tests/unit/test_growbuf.c tests/unit/check.h user/base/growbuf.h \
			  user/base/util.h | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all \
		$(filter %.c,$^) -o $@

TEST_BINS += $(UNIT_DIR)/test_growbuf

# --gpu: the join as a sink of the session (user/gpu/gpu_sink.c), with a consumer of its own and
# with the trace writer
$(UNIT_DIR)/test_gpu_sink: tests/unit/test_gpu_sink.c tests/unit/check.h \
			   $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) -O1 -g $(filter %.c %.a,$^) $(UNIT_LIB_LIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_gpu_sink

# attach.c's teardown: links of many owners moved together and all removed
$(UNIT_DIR)/test_attach_links: tests/unit/test_attach_links.c tests/unit/check.h \
			       $(OUTPUT)/libtptrace.a | $(UNIT_DIR)
	$(call msg,CC-TEST,$@)
	$(Q)$(CC) $(UNIT_CFLAGS) $(filter %.c %.a,$^) $(LDLIBS) -o $@

TEST_BINS += $(UNIT_DIR)/test_attach_links
