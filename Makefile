# tptrace build. `make` builds ./tptrace; `make demo`, `make test`, `make bench`.
# Quiet by default; `make V=1` shows the commands.
OUTPUT    ?= .output
CUDA_HOME ?= /usr/local/cuda
ARCH      := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
CLANG     ?= clang
BPFTOOL   ?= bpftool
CC        ?= cc
CFLAGS    ?= -O2 -g -Wall -Wextra -Wno-unused-parameter
ALL_CFLAGS := $(CFLAGS) -I$(OUTPUT) -Iuser -Ibpf -D_GNU_SOURCE -MMD -MP
LDLIBS    := -lbpf -lelf -lz -lcjson -lstdc++ -lpthread
VERSION   := 0.1.0

ifeq ($(V),1)
Q =
msg =
else
Q = @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

# Debian packages the build, tests and demo need. Installed only when missing.
DEB_PKGS := clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev libcjson-dev systemtap-sdt-dev \
            libcap2-bin util-linux python3 pkg-config make gcc g++ bpftrace

BPF_SRCS  := $(wildcard bpf/*.bpf.c)
BPF_OBJS  := $(patsubst bpf/%.bpf.c,$(OUTPUT)/%.bpf.o,$(BPF_SRCS))
SKELS     := $(patsubst bpf/%.bpf.c,$(OUTPUT)/%.skel.h,$(BPF_SRCS))
USER_SRCS := $(wildcard user/*.c)
USER_OBJS := $(patsubst user/%.c,$(OUTPUT)/user/%.o,$(USER_SRCS))
LIB_OBJS  := $(filter-out $(OUTPUT)/user/tptrace.o,$(USER_OBJS))

.PHONY: all deps demo test bench clean
.SECONDARY:
all: tptrace

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
		-I/usr/include/$(shell uname -m)-linux-gnu -c $< -o $@
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

tptrace: $(OUTPUT)/user/tptrace.o $(OUTPUT)/libtptrace.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $^ $(LDLIBS) -o $@

-include $(USER_OBJS:.o=.d)

# Tests: simulated CUDA stack, workloads, unit tests (tests/*.mk add to these).
TEST_BINS :=
include tests/tests.mk
-include tools/tools.mk

demo: deps
	$(Q)$(MAKE) --no-print-directory all $(WL_DIR)/sim_train
	$(Q)tests/demo.sh
bench: deps ; $(Q)tests/bench/run.sh

clean:
	$(Q)rm -rf $(OUTPUT) tptrace tptrace-fr
