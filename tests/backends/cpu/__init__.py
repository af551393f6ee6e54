"""CPU target tests: kernels run on host threads with GPU semantics (warps, barriers, shared memory, bounds checks, alignment, contraction as NVPTX does, interrupts)."""
