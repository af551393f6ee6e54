"""The text a failed device ``assert`` prints, shared by the frontend (which builds the printf format)
and the runtimes (which find the printed message again to name it in the launch's exception).

One line, as CUDA's ``assert`` prints one (``file:line: kernel: block: [x,y,z], thread: [x,y,z]
Assertion `cond` failed.``), in kcompiler's own order::

    k.kc:7:5: kernel 'scale': block (1,0,0), thread (3,0,0): assertion `i < n` failed: i = 9

(``fn 'name'`` instead of ``kernel 'name'`` for an assert in a device function; ``: message`` only
when the assert has one).
"""
from __future__ import annotations

import re

from .printf import escape_text

#: Conversions of the block and thread coordinates (six i32 arguments, in x, y, z order).
WHO_FORMAT = "block (%d,%d,%d), thread (%d,%d,%d)"

_PATTERN = re.compile(r"(?P<loc>[^\n]*?:\d+:\d+): (?:kernel|fn) '[^']*': block \((?P<block>\d+,\d+,\d+)\), "
                      r"thread \((?P<thread>\d+,\d+,\d+)\): assertion `")


def lead_format(location: str, kind: str, name: str, condition: str) -> tuple[str, str]:
    """The format text before and after the block and thread conversions, escaped for printf: the
    assert at ``location`` (file:line:col) in ``kind`` ('kernel' or 'fn') ``name`` whose condition's
    source is ``condition``. The message the user wrote follows the second part."""
    before = escape_text(f"{location}: {kind} '{name}': ")
    after = escape_text(f": assertion `{condition}` failed")
    return before, after


def parse(text: str) -> tuple[str, tuple[int, int, int], tuple[int, int, int]] | None:
    """(location, block, thread) of a printed assertion message, or None if ``text`` is not one."""
    m = _PATTERN.match(text)
    if m is None:
        return None
    b = tuple(int(x) for x in m.group("block").split(","))
    t = tuple(int(x) for x in m.group("thread").split(","))
    return m.group("loc"), b, t  # type: ignore[return-value]


#: What each memory op does, in an out-of-range index's message.
ACCESS_WORDS = {"load": "load from", "store": "store to"}


def index_format(location: str, name: str, op_name: str, count: int) -> str:
    """The printf format a GPU prints for an array index out of range under ``check_bounds``: the
    who-conversions (:data:`WHO_FORMAT`: six i32) then the index (``%lld``: one i64), for the access
    by memory op ``op_name`` at ``location`` in function ``name`` of an array of ``count`` elements."""
    access = ACCESS_WORDS.get(op_name, "atomic on")
    return (escape_text(f"{location}: kernel '{name}': ") + WHO_FORMAT
            + escape_text(f": out-of-bounds {access} an array element: index ") + "%lld"
            + escape_text(f" is out of range for an array of {count} elements") + "\n")
