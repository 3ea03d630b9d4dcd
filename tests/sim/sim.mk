# Simulated CUDA stack for tests (included from tests/tests.mk).
#   $(SIM_LIB_DIR)/libcudart.so.13  simulated CUDA runtime: real soname, ABI and symbol versions
SIM_CUDART_SRCS := $(wildcard tests/sim/cudart/*.c)
SIM_CUDART_OBJS := $(patsubst tests/sim/cudart/%.c,$(OUTPUT)/sim/cudart/%.o,$(SIM_CUDART_SRCS))
SIM_CUDART      := $(SIM_LIB_DIR)/libcudart.so.13
# __CUDA_API_VERSION_INTERNAL: declare both cudaX and cudaX_ptds/_ptsz, as the real build does.
SIM_CFLAGS      := -O2 -g -Wall -Wextra -Wno-unused-parameter -fPIC -pthread -D_GNU_SOURCE \
		   -D__CUDA_API_VERSION_INTERNAL -I$(CUDA_HOME)/include -Itests/sim/cudart -MMD -MP

$(OUTPUT)/sim/cudart $(SIM_LIB_DIR):
	$(Q)mkdir -p $@

$(OUTPUT)/sim/cudart/%.o: tests/sim/cudart/%.c | $(OUTPUT)/sim/cudart
	$(call msg,CC,$@)
	$(Q)$(CC) $(SIM_CFLAGS) -c $< -o $@

$(SIM_CUDART): $(SIM_CUDART_OBJS) tests/sim/cudart/libcudart.map | $(SIM_LIB_DIR)
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libcudart.so.13 \
		-Wl,--version-script=tests/sim/cudart/libcudart.map -Wl,-z,defs \
		$(SIM_CUDART_OBJS) -ldl -o $@

$(SIM_LIB_DIR)/libcudart.so: $(SIM_CUDART)
	$(call msg,LN,$@)
	$(Q)ln -sf libcudart.so.13 $@

TEST_BINS += $(SIM_CUDART) $(SIM_LIB_DIR)/libcudart.so

-include $(SIM_CUDART_OBJS:.o=.d)
