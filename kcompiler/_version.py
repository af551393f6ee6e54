"""kcompiler's version, in a module of its own so that any stage (runtime/cache.py's compiler
fingerprint) can read it without importing the package's __init__."""
__version__ = "0.1.0"
