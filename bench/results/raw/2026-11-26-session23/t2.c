#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <x86intrin.h>
void* sl(void* a) {
  for (;;)
    sleep(100);
}
int main(int argc, char** argv) {
  size_t sz = (size_t)atoi(argv[2]) << 20;
  int shm = atoi(argv[1]);
  if (argc > 3) {
    pthread_t t;
    pthread_create(&t, 0, sl, 0);
  }
  char* p;
  if (shm) {
    int fd = shm_open("/pt_test", O_RDWR | O_CREAT, 0600);
    ftruncate(fd, sz);
    posix_fallocate(fd, 0, sz);
    p = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    shm_unlink("/pt_test");
  } else
    p = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  madvise(p, sz, 23 /*MADV_POPULATE_WRITE*/);
  for (int lap = 0; lap < 4; lap++) {
    unsigned long long slow = 0, tot = 0, t0 = __rdtsc();
    for (size_t off = 0; off < sz; off += 64) {
      unsigned long long a = __rdtsc();
      *(volatile long*)(p + off) = off;
      unsigned long long b = __rdtsc();
      if (b - a > 4000) slow++;
    }
    tot = __rdtsc() - t0;
    printf("lap %d: %.1f ns/line slow=%llu pages=%zu\n", lap, tot / 2.1 / (sz / 64), slow,
           sz / 4096);
  }
}
