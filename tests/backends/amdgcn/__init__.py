"""AMDGCN target tests: lowering to AMDGCN assembly and code objects, MFMA, comparison with AMD's clang."""
