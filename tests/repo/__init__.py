"""Checks of the repository as a whole: the docs' code blocks, the examples, packaging, the fuzzer and its corpus, the test suite's own sampling."""
