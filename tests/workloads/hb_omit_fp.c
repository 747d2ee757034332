/*
 * Workload for the unwinding test: C built the way distributions build it
 * (-O2 -fomit-frame-pointer), so no function keeps a frame pointer and a
 * frame-pointer walk loses every caller of the leaf. main() burns CPU in
 * hb_hot_alpha and hb_hot_beta for 3:1 of its CPU time, then exits,
 * printing its ground truth as JSON: pid, and the CPU ticks
 * /proc/self/stat charged it.
 *
 * Usage: hb-omit-fp BURN_MS
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

/* Equal work per unit: the ratio of calls is the ratio of CPU time. */
#define BURN(units)                                                   \
	do {                                                          \
		unsigned long x = sink;                               \
		for (unsigned long i = 0; i < (units) * 20000UL; i++) \
			x = x * 6364136223846793005UL + i;            \
		sink = x;                                             \
	} while (0)

__attribute__((noinline)) void hb_hot_alpha(void)
{
	BURN(3);
}

__attribute__((noinline)) void hb_hot_beta(void)
{
	BURN(1);
}

static long cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	long burn_ms = argc > 1 ? atol(argv[1]) : 2000;
	long start = cpu_ms();
	while (cpu_ms() - start < burn_ms) {
		for (int i = 0; i < 100; i++) {
			hb_hot_alpha();
			hb_hot_beta();
		}
	}
	unsigned long utime = 0, stime = 0;
	FILE *stat = fopen("/proc/self/stat", "r");
	/* Fields 14 and 15; comm (field 2) holds no space or parenthesis here. */
	if (!stat || fscanf(stat, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			    &utime, &stime) != 2)
		return 1;
	fclose(stat);
	printf("{\"pid\": %d, \"cpu_ticks\": %lu, \"ticks_per_second\": %ld}\n", getpid(),
	       utime + stime, sysconf(_SC_CLK_TCK));
	return 0;
}
