"""Standard-library tests: std.math and the libm modules (stdlib/*.kc) against float64 references."""
