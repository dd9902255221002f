// ns per __rdtsc() on this host: back to back, and two per loop iteration around a store
// (as the recorder stamps an allocation and its free).
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(void) {
  enum { N = 20000000 };
  static volatile uint64_t sink[64];
  for (int round = 0; round < 3; ++round) {
    double a = now();
    uint64_t x = 0;
    for (int i = 0; i < N; ++i)
      x += __rdtsc();
    double b = now();
    for (int i = 0; i < N; ++i) {
      sink[i & 63] = i;
    }
    double c = now();
    for (int i = 0; i < N; ++i) {
      sink[i & 63] = __rdtsc();
      sink[(i + 7) & 63] = __rdtsc();
    }
    double d = now();
    printf("rdtsc back to back %.2f ns; store loop %.2f ns; two stamped stores %.2f ns (%.2f above "
           "the loop) %llu\n",
           (b - a) / N, (c - b) / N, (d - c) / N, (d - c - (c - b)) / N,
           (unsigned long long)(x & 1));
  }
  return 0;
}
