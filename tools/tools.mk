# Offline tools that read what tptrace wrote (included by the top-level Makefile; `all` builds
# tptrace-fr).
#   tptrace-fr                 flight-recorder dump analyzer (repo top level, next to ./tptrace)
#   $(OUTPUT)/tptrace-fr-gen   synthetic dump directories for tests and benchmarks
#   $(OUTPUT)/fr_fuzz          libFuzzer target for the dump parser (clang; only where the
#                              compiler ships libFuzzer)
# Tools read files only; of user/ they link only self-contained helpers (hashmap.c, textwrap.c,
# atomic_file.c for --export-torch, jsonlex.c: the JSON lexer, cli_output.c: --json), built
# here into their own object.
TOOLS_OUT   := $(OUTPUT)/tools
TOOLS_CFLAGS = $(filter-out -MMD -MP,$(ALL_CFLAGS)) -Itools -Itools/fr -Itools/report -MMD -MP \
	       -DTPTRACE_VERSION='"$(VERSION)"'
# the analyzer, one module per seam (see tools/fr/fr_analyze_int.h)
FR_ANALYZE_SRCS := $(addprefix tools/fr/,fr_tables.c fr_fold.c fr_infer.c fr_rules.c fr_finding.c \
		     fr_stacks.c fr_text.c fr_text_stacks.c fr_report.c fr_timing.c fr_partition.c \
		     fr_text_net.c) user/base/hashmap.c \
		     user/base/textwrap.c
FR_LIB_OBJS := $(TOOLS_OUT)/fr_parse.o $(TOOLS_OUT)/fr_pickle.o $(TOOLS_OUT)/fr_torch.o \
	       $(TOOLS_OUT)/atomic_file.o $(TOOLS_OUT)/jsonlex.o $(addprefix $(TOOLS_OUT)/,$(notdir $(FR_ANALYZE_SRCS:.c=.o)))
FR_LIBS     := -lcjson -lz -lpthread

$(TOOLS_OUT):
	$(Q)mkdir -p $@

# tools/fr: tptrace-fr; tools/report: tptrace report; tests/tools: the dump generator and the
# parser's fuzz target (test tooling)
$(TOOLS_OUT)/%.o: tools/fr/%.c | $(TOOLS_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(TOOLS_OUT)/%.o: tools/report/%.c | $(TOOLS_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(TOOLS_OUT)/%.o: tests/tools/%.c | $(TOOLS_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(TOOLS_OUT)/hashmap.o: user/base/hashmap.c | $(TOOLS_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(TOOLS_OUT)/textwrap.o: user/base/textwrap.c | $(TOOLS_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(TOOLS_OUT)/atomic_file.o: user/base/atomic_file.c | $(TOOLS_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(TOOLS_OUT)/jsonlex.o: user/base/jsonlex.c | $(TOOLS_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(TOOLS_OUT)/cli_output.o: user/base/cli_output.c | $(TOOLS_OUT)
	$(call msg,CC,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) -c $< -o $@

tptrace-fr: $(TOOLS_OUT)/fr.o $(TOOLS_OUT)/cli_output.o $(FR_LIB_OBJS)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) $^ $(FR_LIBS) -o $@

$(OUTPUT)/tptrace-fr-gen: $(TOOLS_OUT)/fr_gen.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) $^ -lpthread -o $@

-include $(wildcard $(TOOLS_OUT)/*.d)

# The fuzz target: `make fr-fuzz` builds it, `make fr-fuzz-smoke` runs 2000 inputs over the
# seed corpus (CI), `make fr-fuzz-run FUZZ_SECONDS=120` fuzzes for real into a scratch corpus.
FUZZ_CC      ?= $(CLANG)
FUZZ_LIBFUZZER := $(wildcard $(shell $(FUZZ_CC) -print-resource-dir 2>/dev/null)/lib/linux/libclang_rt.fuzzer-$(shell uname -m).a)
# `make deps` installs the libFuzzer runtime too (where the distribution packages it under
# this name), so CI runs the fuzz smoke test instead of skipping it
FUZZ_CLANG_MAJOR := $(shell $(FUZZ_CC) -dumpversion 2>/dev/null | cut -d. -f1)
FUZZ_DEB_PKG := $(if $(FUZZ_CLANG_MAJOR),$(shell apt-cache show libclang-rt-$(FUZZ_CLANG_MAJOR)-dev \
		>/dev/null 2>&1 && echo libclang-rt-$(FUZZ_CLANG_MAJOR)-dev))
DEB_PKGS += $(FUZZ_DEB_PKG)
FUZZ_CORPUS  := tests/tools/corpus
FUZZ_SECONDS ?= 120
FR_FUZZ_SRCS := tests/tools/fr_fuzz.c tools/fr/fr_parse.c tools/fr/fr_pickle.c tools/fr/fr_torch.c user/base/atomic_file.c \
		user/base/jsonlex.c $(FR_ANALYZE_SRCS)

$(OUTPUT)/fr_fuzz: $(FR_FUZZ_SRCS) tools/fr/fr_parse.h tools/fr/fr_pickle.h tools/fr/fr_torch.h tools/fr/fr_analyze.h tools/fr/fr_analyze_int.h \
		   user/base/hashmap.h user/base/jsonlex.h | $(OUTPUT)
	$(call msg,FUZZ-CC,$@)
	$(Q)$(FUZZ_CC) -g -O1 -D_GNU_SOURCE -Itools -Itools/fr $(USER_INC) -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $(FR_FUZZ_SRCS) -lcjson -o $@

.PHONY: fr-fuzz fr-fuzz-smoke fr-fuzz-run
fr-fuzz: $(OUTPUT)/fr_fuzz
# new inputs go to a scratch corpus (libFuzzer writes into the first directory), never into
# the committed seeds
fr-fuzz-smoke: $(OUTPUT)/fr_fuzz
	$(Q)rm -rf $(OUTPUT)/fuzz-smoke && mkdir -p $(OUTPUT)/fuzz-smoke
	$(Q)$(OUTPUT)/fr_fuzz -runs=2000 -max_len=65536 $(OUTPUT)/fuzz-smoke $(FUZZ_CORPUS)
fr-fuzz-run: $(OUTPUT)/fr_fuzz
	$(Q)mkdir -p $(OUTPUT)/fuzz-corpus
	$(Q)$(OUTPUT)/fr_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
		-artifact_prefix=$(OUTPUT)/ $(OUTPUT)/fuzz-corpus $(FUZZ_CORPUS)

TEST_BINS += tptrace-fr $(OUTPUT)/tptrace-fr-gen
ifneq ($(FUZZ_LIBFUZZER),)
TEST_BINS += $(OUTPUT)/fr_fuzz
endif

# `tptrace report -o report.html`: the page writer. Its script and style are compiled in as
# C string literals made from tools/report/report_html.{js,css}, so the page needs nothing but
# itself. The ./tptrace link takes $(REPORT_HTML_OBJ) (atomic_file.o is in libtptrace.a);
# another binary also needs $(TOOLS_OUT)/atomic_file.o and -lcjson.
REPORT_HTML_OBJ := $(TOOLS_OUT)/report_html.o
# a "</script" (or "</style", "<!--") in them would end their element in the page early
$(TOOLS_OUT)/report_html_%.h: tools/report/report_html.% | $(TOOLS_OUT)
	$(call msg,GEN,$@)
	$(Q)! grep -qiE '</script|</style|<!--' $< || { echo "$<: holds </script, </style or <!--"; exit 1; }
	$(Q)sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
$(REPORT_HTML_OBJ): $(TOOLS_OUT)/report_html_js.h $(TOOLS_OUT)/report_html_css.h

# renders a saved report JSON to HTML for tests/tools/test_report_html.py
$(OUTPUT)/report_html_render: tests/tools/report_html_render.c $(REPORT_HTML_OBJ) $(TOOLS_OUT)/atomic_file.o
	$(call msg,LINK,$@)
	$(Q)$(CC) $(TOOLS_CFLAGS) $^ -lcjson -o $@

TEST_BINS += $(OUTPUT)/report_html_render
# the browser tests/tools/test_report_html.py loads the page in (headless; it skips without)
DEB_PKGS += chromium
