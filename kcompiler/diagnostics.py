"""Source locations and compile errors, rendered the way rustc and clang render them.

Every error kcompiler reports about a program carries a :class:`SourceSpan`; rendering it gives::

    examples/bad.kc:4:18: error: cannot store f64 into ptr<f32>: write f32(x) to convert
        4 |         out[i] = x * 2.0;
          |                  ^^^^^^^

A compile collects errors in a :class:`Diagnostics` and raises one :class:`CompileError` that holds all
of them, so a user sees every mistake of a file at once, not only the first.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SourceFile:
    """A named source text. ``path`` is what messages print (as given by the user)."""

    path: str
    text: str

    def line(self, lineno: int) -> str:
        """Line ``lineno`` (1-based) without its newline; '' past the end."""
        lines = self.text.splitlines()
        return lines[lineno - 1] if 1 <= lineno <= len(lines) else ""


@dataclass(frozen=True)
class SourceSpan:
    """A range in a source file: 1-based line and column of the start, and of the end (exclusive)."""

    file: SourceFile
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file.path}:{self.line}:{self.col}"

    def __repr__(self) -> str:
        return f"SourceSpan({self})"

    def merge(self, other: "SourceSpan | None") -> "SourceSpan":
        """The smallest span covering ``self`` and ``other`` (same file)."""
        if other is None:
            return self
        start = min((self.line, self.col), (other.line, other.col))
        end = max((self.end_line, self.end_col), (other.end_line, other.end_col))
        return SourceSpan(self.file, start[0], start[1], end[0], end[1])


@dataclass(frozen=True)
class Diagnostic:
    """One message: ``severity`` is 'error', 'warning' or 'note'; ``hint`` is an optional fix."""

    severity: str
    message: str
    span: SourceSpan | None = None
    hint: str | None = None

    def render(self) -> str:
        """The message with its location, the source line and a caret under the span."""
        head = f"{self.severity}: {self.message}"
        if self.span is None:
            return head
        s = self.span
        out = [f"{s}: {head}"]
        text = s.file.line(s.line)
        if text or s.line >= 1:
            num = str(s.line)
            pad = " " * len(num)
            # Tabs are kept so the caret lines up under the same characters.
            prefix = "".join(c if c == "\t" else " " for c in text[: max(s.col - 1, 0)])
            if s.end_line == s.line and s.end_col > s.col:
                width = s.end_col - s.col
            else:
                width = max(len(text) - (s.col - 1), 1)
            width = max(1, min(width, max(len(text) - (s.col - 1), 1)))
            out.append(f"{pad} |")
            out.append(f"{num} | {text}")
            out.append(f"{pad} | {prefix}{'^' * width}")
        if self.hint:
            out.append(f"{' ' * len(str(s.line))} = help: {self.hint}")
        return "\n".join(out)


class CompileError(Exception):
    """A program was rejected. ``diagnostics`` holds every error found (at least one).

    ``str(err)`` is the rendered messages, ready for a terminal.
    """

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic | str, span: SourceSpan | None = None,
                 hint: str | None = None):
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic("error", diagnostics, span, hint)]
        elif isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__(self.render())

    @property
    def span(self) -> SourceSpan | None:
        """Where the first diagnostic points (file, line, column, length), or None when it has no location."""
        return self.diagnostics[0].span if self.diagnostics else None

    def render(self) -> str:
        """Every diagnostic rendered (location, source line, caret, help), blank-line separated, then
        "N errors" when there are several: what ``str(err)`` is."""
        n = sum(d.severity == "error" for d in self.diagnostics)
        body = "\n\n".join(d.render() for d in self.diagnostics)
        if n > 1:
            body += f"\n\n{n} errors"
        return body


@dataclass
class Diagnostics:
    """Collects errors during a stage; :meth:`check` raises them together as one CompileError."""

    items: list[Diagnostic] = field(default_factory=list)
    limit: int = 50

    def error(self, message: str, span: SourceSpan | None = None, hint: str | None = None) -> None:
        if len(self.items) < self.limit:
            self.items.append(Diagnostic("error", message, span, hint))

    def note(self, message: str, span: SourceSpan | None = None) -> None:
        self.items.append(Diagnostic("note", message, span))

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def check(self) -> None:
        """Raise CompileError if any error was recorded."""
        if self.has_errors:
            raise CompileError(self.items)
