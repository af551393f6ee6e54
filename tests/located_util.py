"""``assert_located``: a compile error's text names the place (``file:line:``), gives the message and
points its caret at the right column (the tests of the builtins' located errors share it)."""
from __future__ import annotations


def assert_located(text: str, message: str, caret: str, at: str = "bad.kc:2:") -> None:
    """Check that ``text`` (str of a CompileError) contains ``message`` and ``at``, and that the
    source line above its caret line has ``caret`` starting at the caret's column."""
    assert message in text, text
    assert at in text and "^" in text, text
    lines = text.splitlines()
    caret_line = next(i for i, line in enumerate(lines) if set(line.strip()) <= {"^", "|", " "} and "^" in line)
    col = lines[caret_line].index("^")
    assert lines[caret_line - 1][col:].startswith(caret), text
