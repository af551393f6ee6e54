"""NVPTX target tests: lowering to LLVM IR and PTX (FileCheck, ptxas), NVIDIA-only builtins (warp matrix, Hopper wgmma / TMA / mbarrier)."""
