"""The kc command: compile, run, its cache, usage errors and progress output."""
