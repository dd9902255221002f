#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>
static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
#define N 20000000
static uint64_t x[64] __attribute__((aligned(64)));
int main() {
  double a, b;
  uint64_t s = 0;
  a = now();
  for (long i = 0; i < N; i++) {
    s += __rdtsc();
  }
  b = now();
  printf("rdtsc %.2f ns\n", (b - a) / N);
  a = now();
  for (long i = 0; i < N; i++) {
    s += __atomic_fetch_add(&x[0], 1, __ATOMIC_RELAXED);
  }
  b = now();
  printf("lock xadd %.2f ns\n", (b - a) / N);
  a = now();
  for (long i = 0; i < N; i++) {
    uint64_t e = x[8];
    __atomic_compare_exchange_n(&x[8], &e, e + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
  }
  b = now();
  printf("cas %.2f ns\n", (b - a) / N);
  a = now();
  for (long i = 0; i < N; i++) {
    s += __atomic_exchange_n((char*)&x[16], 1, __ATOMIC_ACQUIRE);
    __atomic_store_n((char*)&x[16], 0, __ATOMIC_RELEASE);
  }
  b = now();
  printf("xchg+store %.2f ns\n", (b - a) / N);
  a = now();
  for (long i = 0; i < N; i++) {
    for (int k = 0; k < 8; k++)
      __atomic_store_n(&x[24 + k], i, __ATOMIC_RELEASE);
    asm volatile("");
  }
  b = now();
  printf("8 release stores %.2f ns\n", (b - a) / N);
  a = now();
  for (long i = 0; i < N; i++) {
    asm volatile("mfence" ::: "memory");
  }
  b = now();
  printf("mfence %.2f ns\n", (b - a) / N);
  printf("%lu\n", s);
}
