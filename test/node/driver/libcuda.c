// libcuda.c is the NVIDIA driver's libcuda in the fake driver root of the
// real node (make test-node): hack/build-node.sh builds it as a shared
// library whose SONAME is libcuda.so.1, as the driver's is, and the tests
// install it as libcuda.so.<driver version>. It is a real library so that
// a container's dynamic loader has to find it: cuda-check
// (test/node/images/gpu-check runs it) is linked against it.

// cuDriverGetVersion answers as CUDA's does: the CUDA version the driver
// supports, 1000*major + 10*minor.
int cuDriverGetVersion(int *version) {
	*version = 12080;
	return 0;
}
