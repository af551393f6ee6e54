"""kcompiler: a multi-vendor GPU kernel compiler (see README.md)."""
__version__ = "0.1.0"
