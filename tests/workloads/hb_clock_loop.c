/*
 * Reads the clock in a loop for argv[1] seconds: nearly every CPU sample
 * lands in the kernel's vDSO (clock_gettime), called from libc, called
 * from hb_read_clock. Built -O2 -fomit-frame-pointer like the rest of
 * Debian. Prints its pid and CPU ticks as JSON.
 * Run by e2e stacks::samples_in_the_vdso_are_named_and_unwound_to_main, and
 * for 15 ms at a time by stacks::samples_of_processes_shorter_than_a_drain_are_named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long hb_read_clock(void)
{
	struct timespec ts;
	long sum = 0;
	for (int i = 0; i < 1000; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sum += ts.tv_nsec;
	}
	return sum;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2;
	struct timespec start, now;
	long sum = 0;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		sum += hb_read_clock();
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
	printf("{\"pid\":%d,\"sum\":%ld}\n", getpid(), sum & 0xffff);
	return 0;
}
