"""Developer tools that ship with kcompiler: ``python -m kcompiler.tools.fuzz`` (a mutational fuzzer
of the compiler over the repository's own kernel sources)."""
