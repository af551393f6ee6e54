"""Backend tests that span targets (the backend registry, float conversions, small floats, builtins lowered per target); each target's own tests are in its folder."""
