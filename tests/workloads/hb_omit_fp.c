/*
 * Workload for the unwinding test: C built the way distributions build it
 * (-O2 -fomit-frame-pointer), so no function keeps a frame pointer and a
 * frame-pointer walk loses every caller of the leaf. main() burns CPU in
 * hb_hot_alpha and hb_hot_beta for 3:1 of its CPU time, then sleeps NAPS
 * times NAP_MS in hb_nap_here through libc's nanosleep, then exits,
 * printing its ground truth as JSON: pid, the CPU ticks /proc/self/stat
 * charged it, and the nanoseconds it slept.
 *
 * Usage: hb-omit-fp BURN_MS [NAPS NAP_MS]
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

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Blocks in libc (built without frame pointers): a frame-pointer walk
 * from nanosleep skips this function. */
__attribute__((noinline)) void hb_nap_here(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000 };
	nanosleep(&t, NULL);
	__asm__ volatile("" ::: "memory"); /* not a tail call */
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
	long naps = argc > 2 ? atol(argv[2]) : 0;
	long nap_ms = argc > 3 ? atol(argv[3]) : 100;
	long start = cpu_ms();
	while (cpu_ms() - start < burn_ms) {
		for (int i = 0; i < 100; i++) {
			hb_hot_alpha();
			hb_hot_beta();
		}
	}
	long long slept = 0;
	for (long i = 0; i < naps; i++) {
		long long before = now_ns();
		hb_nap_here(nap_ms);
		slept += now_ns() - before;
	}
	unsigned long utime = 0, stime = 0;
	FILE *stat = fopen("/proc/self/stat", "r");
	/* Fields 14 and 15; comm (field 2) holds no space or parenthesis here. */
	if (!stat || fscanf(stat, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
			    &utime, &stime) != 2)
		return 1;
	fclose(stat);
	printf("{\"pid\": %d, \"cpu_ticks\": %lu, \"ticks_per_second\": %ld, \"slept_ns\": %lld}\n",
	       getpid(), utime + stime, sysconf(_SC_CLK_TCK), slept);
	return 0;
}
