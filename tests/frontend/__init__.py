"""Frontend tests: parsing, checking and lowering of the kernel language to IR, diagnostics, compile-time parameters, limits, builtins on every type."""
