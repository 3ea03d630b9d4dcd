# In-process CUPTI agent (included by the top Makefile; `all` builds it).
#   $(OUTPUT)/libtptrace_agent.so  dlopen'ed into the target by `tptrace --gpu`, or loaded by the
#                                  driver via CUDA_INJECTION64_PATH. Needs only libc; CUPTI is
#                                  dlopen'ed at run time, cupti.h only supplies types.
AGENT_SO     := $(OUTPUT)/libtptrace_agent.so
# No __CUDA_API_VERSION_INTERNAL: cupti.h and cuda.h disagree under it.
AGENT_CFLAGS := -O2 -g -Wall -Wextra -Wno-unused-parameter -fPIC -fvisibility=hidden -pthread \
		-D_GNU_SOURCE -I$(CUDA_HOME)/include -Iuser/agent -MMD -MP

$(OUTPUT)/agent:
	$(Q)mkdir -p $@

$(OUTPUT)/agent/agent.o: user/agent/agent.c user/agent/agent_shm.h | $(OUTPUT)/agent
	$(call msg,CC,$@)
	$(Q)test -r $(CUDA_HOME)/include/cupti.h || { echo "the --gpu agent needs CUPTI's headers:" \
		"no $(CUDA_HOME)/include/cupti.h (set CUDA_HOME to a CUDA toolkit)"; exit 1; }
	$(Q)$(CC) $(AGENT_CFLAGS) -c $< -o $@

$(AGENT_SO): $(OUTPUT)/agent/agent.o
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libtptrace_agent.so -Wl,-z,defs $< -ldl -o $@

-include $(OUTPUT)/agent/agent.d
