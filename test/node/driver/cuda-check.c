// cuda-check calls CUDA's cuDriverGetVersion from libcuda.so.1, to which it
// is linked, and prints the version and the file the dynamic loader loaded
// libcuda from: "12080 /usr/lib/x86_64-linux-gnu/libcuda.so.1". gpu-check
// runs it in GPU workloads of the real node (make test-node), where the
// library is the fake driver root's (test/node/driver/libcuda.c), mounted
// by the claim's CDI spec; without it the loader fails before main.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int cuDriverGetVersion(int *version);

int main(void) {
	int version = 0;
	if (cuDriverGetVersion(&version) != 0) {
		fprintf(stderr, "cuDriverGetVersion failed\n");
		return 1;
	}
	// The symbol's address in the library, not a stub in this program.
	void *sym = dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
	Dl_info info;
	if (sym == NULL || dladdr(sym, &info) == 0 || info.dli_fname == NULL) {
		fprintf(stderr, "cannot tell where cuDriverGetVersion comes from\n");
		return 1;
	}
	printf("%d %s\n", version, info.dli_fname);
	return 0;
}
