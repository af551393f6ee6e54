"""The AMD target (``amdgcn``, alias ``hip``): see target.py; link.py makes the code object."""
from .link import LinkerUnavailable, LinkError
from .target import ARCHS, CODE_OBJECT_VERSION, AmdgcnTarget

__all__ = ["AmdgcnTarget", "ARCHS", "CODE_OBJECT_VERSION", "LinkerUnavailable", "LinkError"]
