"""kcompiler.ops tests: matmul (SIMT, tensor cores, Hopper, MFMA paths), attention, MLA decode, MX quantisation, the epilogue and autotuner."""
