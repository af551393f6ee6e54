"""Runtime tests: modules, kernels and launches, the CUDA and HIP runtimes, the cache, code objects, printf and the hostcall protocol."""
