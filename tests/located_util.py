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


def assert_body_error(body: str, arch: str, message: str, caret: str, target: str = "nvptx",
                      params: str = "p: ptr<f32>, m: tensor_map") -> None:
    """Compile a kernel of ``params`` whose body is the one line ``body`` (file bad.kc, line 2) for
    ``target``/``arch`` and check that it fails with a located ``message`` whose caret points at
    ``caret`` (:func:`assert_located`)."""
    import pytest

    from kcompiler.diagnostics import CompileError
    from kcompiler.pipeline import compile_source_to
    src = f"kernel k({params}) {{\n    {body}\n}}\n"
    with pytest.raises(CompileError) as ei:
        compile_source_to(src, "bad.kc", "asm", target, arch)
    assert_located(str(ei.value), message, caret)
