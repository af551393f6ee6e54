"""IR tests: the verifier, the passes, constant folding, the target-intrinsic registry."""
