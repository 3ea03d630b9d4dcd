# tptrace build. `make` builds the product: ./tptrace, ./tptrace-fr and the CUPTI agent
# .output/libtptrace_agent.so (`tptrace --gpu` finds it there, next to ./tptrace).
# `make demo`, `make test`, `make bench`; `make install PREFIX=/usr DESTDIR=...`, `make uninstall`.
# Quiet by default; `make V=1` shows the commands.
OUTPUT    ?= .output
CUDA_HOME ?= /usr/local/cuda
ARCH      := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
CLANG     ?= clang
BPFTOOL   ?= bpftool
CC        ?= cc
CFLAGS    ?= -O2 -g -Wall -Wextra -Wno-unused-parameter
# -idirafter: the API table (user/cuda_api.c) takes CUPTI's callback ids from the toolkit's
# cupti_*_cbid.h (plain enums), searched last so "cuda.h" stays bpf/cuda.h
ALL_CFLAGS := $(CFLAGS) -I$(OUTPUT) -Iuser -Ibpf -D_GNU_SOURCE -MMD -MP -idirafter $(CUDA_HOME)/include
LDLIBS    := -lbpf -ldw -lelf -lz -lcjson -lstdc++ -lpthread -lmicrohttpd -lm
VERSION   := 0.1.0
# what `make test` builds besides `all` (tools/tools.mk and tests/*.mk add to it)
TEST_BINS :=

ifeq ($(V),1)
Q =
msg =
else
Q = @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

# Debian packages the build, tests and demo need. Installed only when missing.
DEB_PKGS := shellcheck clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev libcjson-dev systemtap-sdt-dev \
            libcap2-bin util-linux python3 pkg-config make gcc g++ bpftrace help2man \
            libdw-dev elfutils strace python3-yaml systemd
# tptrace fr --metrics (libmicrohttpd) and its tests (promtool, the Prometheus server)
DEB_PKGS  += libmicrohttpd-dev prometheus

BPF_SRCS  := $(wildcard bpf/*.bpf.c)
BPF_OBJS  := $(patsubst bpf/%.bpf.c,$(OUTPUT)/%.bpf.o,$(BPF_SRCS))
SKELS     := $(patsubst bpf/%.bpf.c,$(OUTPUT)/%.skel.h,$(BPF_SRCS))
USER_SRCS := $(wildcard user/*.c)
USER_OBJS := $(patsubst user/%.c,$(OUTPUT)/user/%.o,$(USER_SRCS))
LIB_OBJS  := $(filter-out $(OUTPUT)/user/tptrace.o,$(USER_OBJS))

.PHONY: all deps demo test bench clean install uninstall man
.SECONDARY:
# the first rule, so the default goal; its prerequisites follow the includes below
all:

deps:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi

$(OUTPUT) $(OUTPUT)/user:
	$(Q)mkdir -p $@

$(OUTPUT)/%.bpf.o: bpf/%.bpf.c bpf/%.h vmlinux/$(ARCH)/vmlinux.h | $(OUTPUT)
	$(call msg,BPF,$@)
	$(Q)$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Ivmlinux/$(ARCH) -Ibpf \
		-I/usr/include/$(shell uname -m)-linux-gnu -MMD -MP -c $< -o $@
	$(Q)llvm-strip -g $@ 2>/dev/null || true

$(OUTPUT)/%.skel.h: $(OUTPUT)/%.bpf.o
	$(call msg,GEN-SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $*_bpf > $@

$(OUTPUT)/user/%.o: user/%.c | $(OUTPUT)/user $(SKELS)
	$(call msg,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) -DTPTRACE_VERSION='"$(VERSION)"' -c $< -o $@

$(OUTPUT)/libtptrace.a: $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)$(AR) rcs $@ $^

# objects first, then the library: tools/report.mk adds objects that use libtptrace.a
tptrace: $(OUTPUT)/user/tptrace.o $(OUTPUT)/libtptrace.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS) -o $@

-include $(USER_OBJS:.o=.d)
-include $(wildcard $(OUTPUT)/*.bpf.d)

# The in-process CUPTI agent behind --gpu (AGENT_SO), and the offline tools (tptrace-fr).
include user/agent/agent.mk
include tools/tools.mk
include tools/report.mk
all: tptrace tptrace-fr $(AGENT_SO)

# Tests: simulated CUDA stack, workloads, unit tests (tests/*.mk add to TEST_BINS).
include tests/tests.mk

# the job runs on the simulated runtime; the agent loads the simulated CUPTI next to it
demo: deps
	$(Q)$(MAKE) --no-print-directory all $(WL_DIR)/sim_train $(SIM_CUPTI)
	$(Q)tests/demo.sh
bench: deps ; $(Q)tests/bench/run.sh

# Install: tptrace needs root (BPF, ptrace), so sbin; the analyzer reads files, so bin. The
# agent goes where user/gpu.c's find_agent() looks from an installed binary:
# <dir of tptrace>/../lib/tptrace/. Man pages come from the --help texts (help2man).
PREFIX  ?= /usr/local
DESTDIR ?=
SBINDIR := $(PREFIX)/sbin
BINDIR  := $(PREFIX)/bin
AGENTDIR := $(PREFIX)/lib/tptrace
MAN1DIR := $(PREFIX)/share/man/man1
MAN8DIR := $(PREFIX)/share/man/man8
UNITDIR := $(PREFIX)/lib/systemd/system
MANS    := $(OUTPUT)/man/tptrace.8 $(OUTPUT)/man/tptrace-fr.1
HELP2MAN ?= help2man

$(OUTPUT)/man:
	$(Q)mkdir -p $@

# the subcommands' help goes in as sections of their own (help2man --include), verbatim:
# backslashes and leading dots/quotes escaped for roff
H2M_VERBATIM := sed -e 's/\\/\\e/g' -e "s/^[.']/\\\\\&&/"
$(OUTPUT)/man/tptrace.h2m: tptrace Makefile | $(OUTPUT)/man
	$(Q){ printf '[FLIGHT RECORDER: tptrace fr]\n.nf\n'; ./tptrace fr --help 2>&1 | $(H2M_VERBATIM); \
	  printf '.fi\n\n[GPU MEMORY: tptrace mem]\n.nf\n'; ./tptrace mem --help 2>&1 | $(H2M_VERBATIM); \
	  printf '.fi\n\n[HANG SNAPSHOT: tptrace stacks]\n.nf\n'; ./tptrace stacks --help 2>&1 | $(H2M_VERBATIM); \
	  printf '.fi\n\n[SEE ALSO]\n.BR tptrace-fr (1)\n'; } > $@

$(OUTPUT)/man/tptrace.8: tptrace $(OUTPUT)/man/tptrace.h2m Makefile
	$(call msg,MAN,$@)
	$(Q)command -v $(HELP2MAN) >/dev/null || { echo "help2man not found: make deps (Debian package help2man)"; exit 1; }
	$(Q)$(HELP2MAN) --no-info --no-discard-stderr --section 8 --version-string $(VERSION) \
		--name "trace CUDA and NCCL calls of a running process with eBPF" \
		--include $(OUTPUT)/man/tptrace.h2m --output $@ ./tptrace

$(OUTPUT)/man/tptrace-fr.1: tptrace-fr Makefile | $(OUTPUT)/man
	$(call msg,MAN,$@)
	$(Q)command -v $(HELP2MAN) >/dev/null || { echo "help2man not found: make deps (Debian package help2man)"; exit 1; }
	$(Q)$(HELP2MAN) --no-info --no-discard-stderr --section 1 --version-string $(VERSION) \
		--name "analyze tptrace flight-recorder dumps of all ranks" \
		--output $@ ./tptrace-fr

man: $(MANS)

install: all man
	$(Q)install -D -m 0755 tptrace $(DESTDIR)$(SBINDIR)/tptrace
	$(Q)install -D -m 0755 tptrace-fr $(DESTDIR)$(BINDIR)/tptrace-fr
	$(Q)install -D -m 0644 $(AGENT_SO) $(DESTDIR)$(AGENTDIR)/libtptrace_agent.so
	$(Q)install -D -m 0644 $(OUTPUT)/man/tptrace.8 $(DESTDIR)$(MAN8DIR)/tptrace.8
	$(Q)install -D -m 0644 $(OUTPUT)/man/tptrace-fr.1 $(DESTDIR)$(MAN1DIR)/tptrace-fr.1
	$(Q)install -d $(DESTDIR)$(UNITDIR)
	$(Q)sed 's#/usr/local/sbin/tptrace#$(SBINDIR)/tptrace#' deploy/tptrace-fr.service \
		> $(DESTDIR)$(UNITDIR)/tptrace-fr.service && chmod 0644 $(DESTDIR)$(UNITDIR)/tptrace-fr.service

uninstall:
	$(Q)rm -f $(DESTDIR)$(SBINDIR)/tptrace $(DESTDIR)$(BINDIR)/tptrace-fr \
		$(DESTDIR)$(AGENTDIR)/libtptrace_agent.so $(DESTDIR)$(MAN8DIR)/tptrace.8 \
		$(DESTDIR)$(MAN1DIR)/tptrace-fr.1 $(DESTDIR)$(UNITDIR)/tptrace-fr.service
	$(Q)rmdir $(DESTDIR)$(AGENTDIR) 2>/dev/null || true

clean:
	$(Q)rm -rf $(OUTPUT) tptrace tptrace-fr
