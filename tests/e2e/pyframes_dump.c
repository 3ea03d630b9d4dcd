// SPDX-License-Identifier: MIT
/* Test driver for user/py/pyframes.c: stops every thread of PID (PTRACE_SEIZE + INTERRUPT),
 * reads each thread's fs_base, prints the Python frames of each as one JSON line, detaches.
 *   pyframes_dump PID [--bench N | --nostop N]
 * First line: {"pid":P,"version":"3.11.7"} or {"pid":P,"version":null,"err":"..."}.
 * Then per thread: {"tid":T,"ret":N,"frames":[{"func","file","line","entry"}...]}; with
 * --bench N each thread is read N more times and "us" is the mean time of one call.
 * --nostop N: the robustness check. After the stop above (to learn fs_base), reads every
 * thread N times while the target RUNS (torn reads on purpose) and prints one line
 * {"calls","ok","efault","enoent","esrch","other","max_us","bad_frames"}. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <cjson/cJSON.h>

#include "pyframes.h"

#define MAX_THREADS 1024
#define MAX_FRAMES 512

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void print_json(cJSON *obj)
{
	char *s = cJSON_PrintUnformatted(obj);

	printf("%s\n", s);
	free(s);
	cJSON_Delete(obj);
}

int main(int argc, char **argv)
{
	static struct py_frame frames[MAX_FRAMES];
	int tids[MAX_THREADS], nr = 0, pid, bench = 0, nostop = 0, i, ret = 1;
	uint64_t fs_base[MAX_THREADS];
	bool seized[MAX_THREADS] = { 0 };
	char path[64], err[256];
	struct pyproc *py;
	struct dirent *de;
	cJSON *head;
	DIR *dir;

	if (argc < 2) {
		fprintf(stderr, "usage: pyframes_dump PID [--bench N]\n");
		return 2;
	}
	pid = atoi(argv[1]);
	if (argc >= 4 && !strcmp(argv[2], "--bench"))
		bench = atoi(argv[3]);
	if (argc >= 4 && !strcmp(argv[2], "--nostop"))
		nostop = atoi(argv[3]);
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir) {
		fprintf(stderr, "pyframes_dump: pid %d: %s\n", pid, strerror(errno));
		return 1;
	}
	while ((de = readdir(dir)) && nr < MAX_THREADS)
		if (de->d_name[0] != '.')
			tids[nr++] = atoi(de->d_name);
	closedir(dir);

	for (i = 0; i < nr; i++) {
		struct user_regs_struct regs;
		int status;

		fs_base[i] = 0;
		if (ptrace(PTRACE_SEIZE, tids[i], 0, 0) || ptrace(PTRACE_INTERRUPT, tids[i], 0, 0)) {
			fprintf(stderr, "pyframes_dump: seize %d: %s\n", tids[i], strerror(errno));
			continue;
		}
		seized[i] = true;
		if (waitpid(tids[i], &status, __WALL) < 0)
			continue;
		if (!ptrace(PTRACE_GETREGS, tids[i], 0, &regs))
			fs_base[i] = regs.fs_base;
	}

	if (nostop) {
		for (i = 0; i < nr; i++)
			if (seized[i])
				ptrace(PTRACE_DETACH, tids[i], 0, 0);
		memset(seized, 0, sizeof(seized));
	}
	py = pyframes__open(pid, err, sizeof(err));
	head = cJSON_CreateObject();
	cJSON_AddNumberToObject(head, "pid", pid);
	if (py) {
		cJSON_AddStringToObject(head, "version", pyframes__version(py));
	} else {
		cJSON_AddNullToObject(head, "version");
		cJSON_AddStringToObject(head, "err", err);
	}
	print_json(head);

	if (py && nostop) {
		long calls = 0, ok = 0, efault = 0, enoent = 0, esrch = 0, other = 0, bad = 0;
		double max_us = 0;
		cJSON *line = cJSON_CreateObject();

		for (int round = 0; round < nostop; round++) {
			for (i = 0; i < nr; i++) {
				double t0 = now_us(), us;
				int n = pyframes__thread(py, tids[i], fs_base[i], frames, MAX_FRAMES), k;

				us = now_us() - t0;
				max_us = us > max_us ? us : max_us;
				calls++;
				if (n >= 0)
					ok++;
				else if (n == -EFAULT)
					efault++;
				else if (n == -ENOENT)
					enoent++;
				else if (n == -ESRCH)
					esrch++;
				else if (++other <= 3)
					fprintf(stderr, "pyframes_dump: tid %d: %s\n", tids[i], strerror(-n));
				for (k = 0; k < n; k++)
					if (!frames[k].func || !frames[k].file || frames[k].line < 0)
						bad++;
			}
		}
		cJSON_AddNumberToObject(line, "calls", calls);
		cJSON_AddNumberToObject(line, "ok", ok);
		cJSON_AddNumberToObject(line, "efault", efault);
		cJSON_AddNumberToObject(line, "enoent", enoent);
		cJSON_AddNumberToObject(line, "esrch", esrch);
		cJSON_AddNumberToObject(line, "other", other);
		cJSON_AddNumberToObject(line, "max_us", max_us);
		cJSON_AddNumberToObject(line, "bad_frames", bad);
		print_json(line);
	}
	for (i = 0; py && !nostop && i < nr; i++) {
		cJSON *line = cJSON_CreateObject(), *arr;
		int n = pyframes__thread(py, tids[i], fs_base[i], frames, MAX_FRAMES), k;

		cJSON_AddNumberToObject(line, "tid", tids[i]);
		cJSON_AddNumberToObject(line, "ret", n);
		arr = cJSON_AddArrayToObject(line, "frames");
		for (k = 0; k < n; k++) {
			cJSON *f = cJSON_CreateObject();

			cJSON_AddStringToObject(f, "func", frames[k].func);
			cJSON_AddStringToObject(f, "file", frames[k].file);
			cJSON_AddNumberToObject(f, "line", frames[k].line);
			cJSON_AddBoolToObject(f, "entry", frames[k].entry);
			cJSON_AddItemToArray(arr, f);
		}
		if (bench > 0) {
			double t0 = now_us();

			for (k = 0; k < bench; k++)
				pyframes__thread(py, tids[i], fs_base[i], frames, MAX_FRAMES);
			cJSON_AddNumberToObject(line, "us", (now_us() - t0) / bench);
		}
		print_json(line);
	}
	ret = 0;
	pyframes__free(py);
	for (i = 0; i < nr; i++)
		if (seized[i])
			ptrace(PTRACE_DETACH, tids[i], 0, 0);
	return ret;
}
