# Simulated CUDA stack for tests (included from tests/tests.mk).
#   $(SIM_DRIVER_DIR)/libcuda.so.1  simulated driver: the engine (streams, kernels, graphs) and
#                                   the cu* entry points, real soname and exported names. In a
#                                   directory of its own: a real libcudart that dlopens
#                                   libcuda.so.1 must never find it by accident.
#   $(SIM_LIB_DIR)/libcudart.so.13  simulated CUDA runtime: real soname, ABI and symbol versions;
#                                   dlopens libcuda.so.1 through its RUNPATH ($ORIGIN/../driver,
#                                   then the absolute path, for copies of the library)
SIM_DRIVER_DIR  := $(OUTPUT)/sim/driver
SIM_DRIVER      := $(SIM_DRIVER_DIR)/libcuda.so.1
SIM_DRIVER_SRCS := $(wildcard tests/sim/cuda_driver/*.c)
SIM_DRIVER_OBJS := $(patsubst tests/sim/cuda_driver/%.c,$(OUTPUT)/sim/cuda_driver/%.o,$(SIM_DRIVER_SRCS))
SIM_CUDART_SRCS := $(wildcard tests/sim/cudart/*.c)
SIM_CUDART_OBJS := $(patsubst tests/sim/cudart/%.c,$(OUTPUT)/sim/cudart/%.o,$(SIM_CUDART_SRCS))
SIM_CUDART      := $(SIM_LIB_DIR)/libcudart.so.13
# __CUDA_API_VERSION_INTERNAL: declare both cudaX and cudaX_ptds/_ptsz (cuX_v2 and its
# _ptds/_ptsz), as the real build does.
SIM_CFLAGS      := -O2 -g -Wall -Wextra -Wno-unused-parameter -fPIC -pthread -D_GNU_SOURCE \
		   -D__CUDA_API_VERSION_INTERNAL -I$(CUDA_HOME)/include -Itests/sim/cudart \
		   -Itests/sim/cuda_driver -MMD -MP

$(OUTPUT)/sim/cuda_driver $(SIM_DRIVER_DIR):
	$(Q)mkdir -p $@

$(OUTPUT)/sim/cuda_driver/%.o: tests/sim/cuda_driver/%.c | $(OUTPUT)/sim/cuda_driver
	$(call msg,CC,$@)
	$(Q)$(CC) $(SIM_CFLAGS) -c $< -o $@

$(SIM_DRIVER): $(SIM_DRIVER_OBJS) tests/sim/cuda_driver/libcuda.map | $(SIM_DRIVER_DIR)
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libcuda.so.1 \
		-Wl,--version-script=tests/sim/cuda_driver/libcuda.map -Wl,-z,defs \
		$(SIM_DRIVER_OBJS) -o $@

TEST_BINS += $(SIM_DRIVER)

-include $(SIM_DRIVER_OBJS:.o=.d)

$(OUTPUT)/sim/cudart $(SIM_LIB_DIR):
	$(Q)mkdir -p $@

$(OUTPUT)/sim/cudart/%.o: tests/sim/cudart/%.c | $(OUTPUT)/sim/cudart
	$(call msg,CC,$@)
	$(Q)$(CC) $(SIM_CFLAGS) -c $< -o $@

# The driver is a prerequisite, not a link input: the runtime dlopens it like the real one.
$(SIM_CUDART): $(SIM_CUDART_OBJS) tests/sim/cudart/libcudart.map $(SIM_DRIVER) | $(SIM_LIB_DIR)
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libcudart.so.13 \
		-Wl,--version-script=tests/sim/cudart/libcudart.map -Wl,-z,defs \
		-Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN/../driver:$(abspath $(SIM_DRIVER_DIR))' \
		$(SIM_CUDART_OBJS) -ldl -o $@

$(SIM_LIB_DIR)/libcudart.so: $(SIM_CUDART)
	$(call msg,LN,$@)
	$(Q)ln -sf libcudart.so.13 $@

TEST_BINS += $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so

-include $(SIM_CUDART_OBJS:.o=.d)

# The same runtime as a PIC archive, for libraries that carry their own copy (as real libnccl
# links cudart statically): its calls never reach the shared libcudart.so.13.
SIM_CUDART_STATIC := $(OUTPUT)/sim/cudart/libtpsim_cudart_static.a

$(SIM_CUDART_STATIC): $(SIM_CUDART_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

#   $(SIM_LIB_DIR)/libnccl.so.2  simulated NCCL 2.28.9: real soname and unversioned names, runs
#   collectives on the sim's streams, ranks rendezvous across processes in /dev/shm
SIM_NCCL_SRCS := $(wildcard tests/sim/nccl/*.c)
SIM_NCCL_OBJS := $(patsubst tests/sim/nccl/%.c,$(OUTPUT)/sim/nccl/%.o,$(SIM_NCCL_SRCS))
SIM_NCCL      := $(SIM_LIB_DIR)/libnccl.so.2

$(OUTPUT)/sim/nccl:
	$(Q)mkdir -p $@

$(OUTPUT)/sim/nccl/%.o: tests/sim/nccl/%.c | $(OUTPUT)/sim/nccl
	$(call msg,CC,$@)
	$(Q)$(CC) $(SIM_CFLAGS) -Itests/sim/nccl -c $< -o $@

# Carries the sim runtime statically, as real libnccl carries cudart: its cuda* functions are
# local (in .symtab only, as in the real library), and no DT_NEEDED names libcudart. It reaches
# the driver like the runtime does (dlopen through this RUNPATH).
$(SIM_NCCL): $(SIM_NCCL_OBJS) tests/sim/nccl/libnccl.map $(SIM_CUDART_STATIC) $(SIM_DRIVER) | $(SIM_LIB_DIR)
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libnccl.so.2 \
		-Wl,--version-script=tests/sim/nccl/libnccl.map -Wl,-z,defs -Wl,--exclude-libs,ALL \
		-Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN/../driver:$(abspath $(SIM_DRIVER_DIR))' \
		$(SIM_NCCL_OBJS) $(SIM_CUDART_STATIC) -ldl -lrt -o $@

$(SIM_LIB_DIR)/libnccl.so: $(SIM_NCCL)
	$(call msg,LN,$@)
	$(Q)ln -sf libnccl.so.2 $@

TEST_BINS += $(SIM_NCCL) $(SIM_LIB_DIR)/libnccl.so

-include $(SIM_NCCL_OBJS:.o=.d)

# Simulated CUPTI (tests/sim/cupti): $(SIM_LIB_DIR)/libcupti.so.13, next to the sim libcudart so
# tptrace's agent finds it the way it finds a real one (next to the libcudart in use).
SIM_CUPTI := $(SIM_LIB_DIR)/libcupti.so.13
# cupti.h redefines cuda.h's _v1 structs when __CUDA_API_VERSION_INTERNAL is set: leave it out.
SIM_CUPTI_CFLAGS := $(filter-out -D__CUDA_API_VERSION_INTERNAL,$(SIM_CFLAGS))

$(OUTPUT)/sim/cupti:
	$(Q)mkdir -p $@

$(OUTPUT)/sim/cupti/cupti.o: tests/sim/cupti/cupti.c | $(OUTPUT)/sim/cupti
	$(call msg,CC,$@)
	$(Q)$(CC) $(SIM_CUPTI_CFLAGS) -c $< -o $@

# Like the real one it needs no runtime: it dlopens libcuda.so.1 (RUNPATH as the runtime's).
$(SIM_CUPTI): $(OUTPUT)/sim/cupti/cupti.o tests/sim/cupti/libcupti.map $(SIM_DRIVER) | $(SIM_LIB_DIR)
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libcupti.so.13 \
		-Wl,--version-script=tests/sim/cupti/libcupti.map -Wl,-z,defs \
		-Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN/../driver:$(abspath $(SIM_DRIVER_DIR))' \
		$< -ldl -o $@

TEST_BINS += $(SIM_CUPTI)

-include $(OUTPUT)/sim/cupti/cupti.d

# The GPU e2e driver and the agent unit test (tests/e2e/gpu.mk; the agent is built by `all`).
-include tests/e2e/gpu.mk

# Simulated caching allocator (tests/sim/alloc): $(SIM_LIB_DIR)/libtpsim_alloc.so, PyTorch's
# USDT probes pytorch:malloc/free with semaphores, segments from the sim libcudart. Frame
# pointers so user stacks captured at its probes walk up to the callers.
SIM_ALLOC := $(SIM_LIB_DIR)/libtpsim_alloc.so

$(OUTPUT)/sim/alloc:
	$(Q)mkdir -p $@

$(OUTPUT)/sim/alloc/alloc.o: tests/sim/alloc/alloc.c | $(OUTPUT)/sim/alloc
	$(call msg,CC,$@)
	$(Q)$(CC) $(SIM_CFLAGS) -fno-omit-frame-pointer -Itests/sim/alloc -c $< -o $@

$(SIM_ALLOC): $(OUTPUT)/sim/alloc/alloc.o $(SIM_LIB_DIR)/libcudart.so | $(SIM_LIB_DIR)
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libtpsim_alloc.so -Wl,-z,defs \
		$< -L$(SIM_LIB_DIR) -lcudart -Wl,-rpath,'$$ORIGIN' -o $@

TEST_BINS += $(SIM_ALLOC)

-include $(OUTPUT)/sim/alloc/alloc.d
