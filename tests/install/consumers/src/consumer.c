/* A C program using gmem's client API: prints whether the shim answers and how much device
 * memory may be allocated (tests/install/install_test.sh checks the line). */
#include <gmem/gmem.h>
#include <stdio.h>

int main(void) {
  uint64_t bytes = 0;
  gmem_status s = gmem_allocatable_bytes(0, &bytes);
  printf("consumer: lang=c available=%d allocatable=%s:%llu\n", gmem_available(),
         gmem_status_name(s), (unsigned long long)bytes);
  return s == GMEM_OK ? 0 : 1;
}
