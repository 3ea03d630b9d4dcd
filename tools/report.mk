# `tptrace report` (tools/report*.c): a subcommand linked into ./tptrace (user/cli/tptrace.c
# dispatches "report" to report_main). The HTML writer tools/report/report_html.c is its own module
# (tools/tools.mk builds its generated headers); the analysis reads files only. hashmap and
# atomic_file come from libtptrace.a.
REPORT_SRCS := $(addprefix tools/report/,report.c report_read.c report_analyze.c report_rules.c \
				  report_tables.c report_ops.c report_compare.c \
				  report_text.c)
REPORT_OBJS := $(addprefix $(TOOLS_OUT)/,$(notdir $(REPORT_SRCS:.c=.o))) $(TOOLS_OUT)/report_html.o
tptrace: $(REPORT_OBJS)
