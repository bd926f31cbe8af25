/*
 * hot_main.c: times N calls of one function of libhot.so (hot.c) and prints
 * the time per call; run once plain and once under the harness.
 *
 * usage: hot_main hot_lea|hot_call|hot_jump N
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

long	hot_lea(long);
long	hot_call(long);
long	hot_jump(long);

int
main(int argc, char **argv)
{
	struct timespec t0, t1;
	long (*volatile f)(long);
	long i, n, s;
	double ns;

	if (argc < 3)
		return (2);
	if (strcmp(argv[1], "hot_call") == 0)
		f = hot_call;
	else if (strcmp(argv[1], "hot_jump") == 0)
		f = hot_jump;
	else
		f = hot_lea;
	n = atol(argv[2]);
	s = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++)
		s += f(i);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
	printf("calls=%ld sum=%ld ns_per_call=%.1f\n", n, s, ns / n);
	return (0);
}
