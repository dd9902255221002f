/* Loads each library named on the command line and calls its evil_alloc (hostile_lib.c);
   prints its pid first. */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char** argv) {
  printf("pid %d\n", (int)getpid());
  for (int i = 1; i < argc; ++i) {
    void* lib = dlopen(argv[i], RTLD_NOW);
    if (!lib) {
      fprintf(stderr, "loader: %s\n", dlerror());
      return 2;
    }
    int rc = ((int (*)(void))dlsym(lib, "evil_alloc"))();
    if (rc) return rc;
  }
  return 0;
}
