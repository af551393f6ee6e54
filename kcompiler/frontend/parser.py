"""Source text to AST: lark's LALR(1) parser with the AST built in its reduce actions.

The parser keeps its own stack, so no input makes Python recurse; the depth of every node is bounded
by :data:`MAX_DEPTH` here so that the checker and the lowering, which do recurse, stay bounded too.
Syntax errors become :class:`~kcompiler.diagnostics.CompileError` s; after one, parsing resumes at the
next top-level declaration so that one run reports the syntax errors of every declaration.
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..cachedir import default_cache_dir
from ..diagnostics import Diagnostics, SourceFile, SourceSpan
from ..limits import MAX_DEPTH  # deepest nesting accepted (kcompiler/limits.py)
from . import ast as A

KEYWORDS = frozenset({"kernel", "fn", "import", "as", "let", "var", "shared", "if", "else", "for", "in",
                      "while", "break", "continue", "return", "comptime", "true", "false", "ptr", "vec",
                      "const", "struct"})

_OPS = {"OROR": "||", "ANDAND": "&&", "BOR": "|", "BXOR": "^", "BAND": "&", "EQ": "==", "NE": "!=",
        "LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "SHL": "<<", "SHR": ">>", "PLUS": "+",
        "MINUS": "-", "STAR": "*", "SLASH": "/", "PERCENT": "%", "BANG": "!", "TILDE": "~"}


class NestingTooDeep(Exception):
    def __init__(self, span: SourceSpan):
        self.span = span


def _tok_span(file: SourceFile, t: Token) -> SourceSpan:
    return SourceSpan(file, t.line, t.column, t.end_line or t.line, t.end_column or t.column + 1)


class _Builder:
    """The reduce actions: one method per grammar rule, each given the rule's children (tokens that
    are not filtered out, and the AST nodes of sub-rules)."""

    def __init__(self, file: SourceFile):
        self.file = file

    # helpers
    def span(self, *items) -> SourceSpan:
        spans = []
        for it in items:
            if isinstance(it, Token):
                if it.line is not None:
                    spans.append(_tok_span(self.file, it))
            elif isinstance(it, A.Node):
                spans.append(it.span)
            elif isinstance(it, list):
                if it:
                    spans.append(self.span(*it))
        if not spans:
            return SourceSpan(self.file, 1, 1, 1, 1)
        s = spans[0]
        for o in spans[1:]:
            s = s.merge(o)
        return s

    def node(self, cls, *args, span: SourceSpan, **kw):
        d = 0
        for a in list(args) + list(kw.values()):
            if isinstance(a, A.Node):
                d = max(d, a.depth)
            elif isinstance(a, list):
                for x in a:
                    if isinstance(x, A.Node):
                        d = max(d, x.depth)
        n = cls(*args, span=span, depth=d + 1, **kw)
        if n.depth > MAX_DEPTH:
            raise NestingTooDeep(span)
        return n

    @staticmethod
    def toks(children, *types):
        return [c for c in children if isinstance(c, Token) and c.type in types]

    @staticmethod
    def nodes(children):
        return [c for c in children if isinstance(c, A.Node)]

    # --- declarations
    def start(self, c):
        imports = [x for x in c if isinstance(x, A.Import)]
        decls = [x for x in c if isinstance(x, A.FnDecl)]
        consts = [x for x in c if isinstance(x, A.Const)]
        structs = [x for x in c if isinstance(x, A.StructDecl)]
        span = SourceSpan(self.file, 1, 1, 1, 1)
        return A.Module(imports, decls, consts, structs, span=span,
                        depth=1 + max([x.depth for x in decls + consts + structs], default=0))

    def struct_decl(self, c):
        name = c[1]
        cparams = next((x[1] for x in c if isinstance(x, tuple) and x[0] == "cparams"), [])
        fields = [x for x in c if isinstance(x, A.StructField)]
        return self.node(A.StructDecl, str(name), cparams, fields, span=self.span(c[0], name),
                         name_span=_tok_span(self.file, name))

    def struct_field(self, c):
        return self.node(A.StructField, str(c[0]), c[1], span=_tok_span(self.file, c[0]))

    def struct_lit(self, c):
        name = c[0]
        targs = next((x for x in c if isinstance(x, list)), None)
        inits = [x for x in c if isinstance(x, A.FieldInit)]
        return self.node(A.StructLit, str(name), targs, inits, span=self.span(name, c[-1]),
                         name_span=_tok_span(self.file, name))

    def field_init(self, c):
        return self.node(A.FieldInit, str(c[0]), c[-1], span=self.span(c[0], c[-1]))

    def generic_type(self, c):
        a, k = self._split_args(c[2])
        return self.node(A.GenericTypeExpr, str(c[0]), a + k, span=self.span(c[0], c[-1]))

    def dotted(self, c):
        return [t for t in c if t.type == "NAME"]

    def import_decl(self, c):
        path = c[1]
        alias_tok = [t for t in c[2:] if isinstance(t, Token) and t.type == "NAME"]
        alias = str(alias_tok[0]) if alias_tok else str(path[-1])
        return A.Import([str(t) for t in path], alias, span=self.span(c[0], path[-1], *alias_tok))

    def fn_decl(self, c):
        kind_tok, name_tok = c[0], c[1]
        cparams, params, ret, body = [], [], None, None
        for x in c[2:]:
            if isinstance(x, tuple) and x[0] == "cparams":
                cparams = x[1]
            elif isinstance(x, tuple) and x[0] == "params":
                params = x[1]
            elif isinstance(x, tuple) and x[0] == "ret":
                ret = x[1]
            elif isinstance(x, A.Block):
                body = x
        return self.node(A.FnDecl, str(kind_tok), str(name_tok), cparams, params, ret, body,
                         span=self.span(kind_tok, name_tok), name_span=_tok_span(self.file, name_tok))

    def ret_type(self, c):
        return ("ret", c[-1])

    def cparams(self, c):
        return ("cparams", [x for x in c if isinstance(x, A.ComptimeParamDecl)])

    def cparam(self, c):
        name, ty = c[0], c[1]
        default = c[3] if len(c) > 3 else None
        return self.node(A.ComptimeParamDecl, str(name), ty, default, span=_tok_span(self.file, name))

    def fn_type(self, c):
        if len(c) == 1:
            return A.FnTypeExpr(span=_tok_span(self.file, c[0]))
        ps = [x for x in c if isinstance(x, tuple) and x[0] == "fn_type_param"]
        ret = c[-1] if isinstance(c[-1], A.Node) else None
        return self.node(A.FnTypeExpr, [p[2] for p in ps], [p[1] for p in ps], ret, span=self.span(c[0], c[-1]))

    def fn_type_param(self, c):
        return ("fn_type_param", str(c[0]) if len(c) > 1 else None, c[-1])

    def params(self, c):
        return ("params", [x for x in c if isinstance(x, A.Param)])

    def param(self, c):
        return self.node(A.Param, str(c[0]), c[1], span=_tok_span(self.file, c[0]))

    # --- types
    def type_name(self, c):
        return A.TypeName(str(c[0]), span=_tok_span(self.file, c[0]))

    def ptr_type(self, c):
        inner = c[2]
        space = [t for t in c[3:] if isinstance(t, Token) and t.type in ("NAME", "CONST")]
        return self.node(A.PtrTypeExpr, inner, str(space[0]) if space else None,
                         space_span=_tok_span(self.file, space[0]) if space else None,
                         span=self.span(c[0], c[-1]))

    def vec_type(self, c):
        return self.node(A.VecTypeExpr, c[2], c[3], span=self.span(c[0], c[-1]))

    def array_type(self, c):
        elem = c[1]
        # The element is parsed as an expression (`[f32; 4]`, `[Acc[f32]; 4]`), so that `[a[0], b]`
        # stays an array literal for LALR(1); here it becomes the type it spells.
        if isinstance(elem, A.Name):
            elem = A.TypeName(elem.id, span=elem.span)
        elif isinstance(elem, A.Index) and isinstance(elem.base, A.Name):
            elem = self.node(A.GenericTypeExpr, elem.base.id, list(elem.args) + list(elem.kwargs), span=elem.span)
        elif not isinstance(elem, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
            raise _BadLiteral(elem.span, "expected the element type of an array type")
        return self.node(A.ArrayTypeExpr, elem, c[3], span=self.span(c[0], c[-1]))

    # --- statements
    def block(self, c):
        return self.node(A.Block, self.nodes(c), span=self.span(c[0], c[-1]))

    def let_stmt(self, c):
        name = c[1]
        ty = c[2] if isinstance(c[2], A.Node) else None
        value = [x for x in c[2:] if isinstance(x, A.Node)][-1]
        return self.node(A.Let, str(name), ty, value, span=self.span(c[0], c[-1]),
                         name_span=_tok_span(self.file, name))

    def var_stmt(self, c):
        name = c[1]
        rest = c[2:]
        ty, value = None, None
        if rest and isinstance(rest[0], A.Node):
            ty = rest[0]
            rest = rest[1:]
        if rest and isinstance(rest[0], Token) and rest[0].type == "ASSIGN":
            value = rest[1]
        return self.node(A.Var, str(name), ty, value, span=self.span(c[0], c[-1]),
                         name_span=_tok_span(self.file, name))

    def const_decl(self, c):
        name = c[1]
        ty = c[2] if isinstance(c[2], A.Node) else None
        return self.node(A.Const, str(name), ty, c[-2], span=self.span(c[0], c[-1]),
                         name_span=_tok_span(self.file, name))

    def shared_stmt(self, c):
        return self.node(A.Shared, str(c[1]), c[2], span=self.span(c[0], c[-1]),
                         name_span=_tok_span(self.file, c[1]))

    def assign_stmt(self, c):
        target, op, value = c[0], c[1], c[2]
        opname = "" if op.type == "ASSIGN" else str(op)[:-1]
        return self.node(A.Assign, target, opname, value, span=self.span(target, c[-1]),
                         op_span=_tok_span(self.file, op))

    def expr_stmt(self, c):
        return self.node(A.ExprStmt, c[0], span=self.span(c[0], c[-1]))

    def _if(self, c, comptime: bool):
        kw = c[0]
        i = 2 if comptime else 1
        arms = [self.node(A.IfArm, c[i], c[i + 1], span=self.span(c[i]))]
        orelse = None
        for x in c[i + 2:]:
            if isinstance(x, A.IfArm):
                arms.append(x)
            elif isinstance(x, A.Block):
                orelse = x
        n = self.node(A.If, arms, orelse, comptime, span=self.span(kw, c[i]))
        # Arm k lowers into the else of arm k-1, k levels deeper than the first: count it so.
        for k, x in enumerate(arms[1:] + ([orelse] if orelse is not None else []), start=1):
            k = min(k, len(arms) - 1)
            if x.depth + k + 1 > n.depth:
                n.depth = x.depth + k + 1
                if n.depth > MAX_DEPTH:
                    raise NestingTooDeep(x.span)
        return n

    def if_stmt(self, c):
        return self._if(c, False)

    def comptime_if(self, c):
        return self._if(c, True)

    def elif_clause(self, c):
        return self.node(A.IfArm, c[2], c[3], span=self.span(c[2]))

    def else_clause(self, c):
        return c[1]

    def for_stmt(self, c):
        mutable = any(isinstance(t, Token) and t.type == "VAR" for t in c)
        comptime = any(isinstance(t, Token) and t.type == "COMPTIME" for t in c)
        name = [t for t in c if isinstance(t, Token) and t.type == "NAME"][0]
        it, body = self.nodes(c)
        return self.node(A.For, str(name), mutable, it, comptime, body, span=self.span(c[0], it),
                         var_span=_tok_span(self.file, name))

    def while_stmt(self, c):
        return self.node(A.While, c[1], c[2], span=self.span(c[0], c[1]))

    def break_stmt(self, c):
        return A.Break(span=self.span(c[0]))

    def continue_stmt(self, c):
        return A.Continue(span=self.span(c[0]))

    def return_stmt(self, c):
        value = c[1] if isinstance(c[1], A.Node) else None
        return self.node(A.Return, value, span=self.span(c[0], value if value is not None else c[0]))

    # --- expressions
    def binop(self, c):
        lhs, op, rhs = c
        return self.node(A.Binary, _OPS[op.type], lhs, rhs, span=self.span(lhs, rhs),
                         op_span=_tok_span(self.file, op))

    def unop(self, c):
        op, x = c
        return self.node(A.Unary, _OPS[op.type], x, span=self.span(op, x))

    def _split_args(self, items):
        args = [x for x in items if isinstance(x, A.Node) and not isinstance(x, A.KwArg)]
        kwargs = [x for x in items if isinstance(x, A.KwArg)]
        return args, kwargs

    def call(self, c):
        func, args, rpar = c
        a, k = self._split_args(args)
        return self.node(A.Call, func, a, k, span=self.span(func, rpar))

    def index(self, c):
        base, _, targs, rsqb = c
        a, k = self._split_args(targs)
        return self.node(A.Index, base, a, k, span=self.span(base, rsqb))

    def field(self, c):
        base, _, name = c
        return self.node(A.Field, base, str(name), span=self.span(base, name),
                         name_span=_tok_span(self.file, name))

    def type_call(self, c):
        ty, args, rpar = c
        a, k = self._split_args(args)
        return self.node(A.TypeCall, ty, a, k, span=self.span(ty, rpar))

    def array_lit(self, c):
        lsqb, items, rsqb = c
        span = self.span(lsqb, rsqb)
        for x in items:
            if isinstance(x, A.KwArg):
                raise _BadLiteral(x.span, "an array literal holds values, not 'name = value'")
        if not items:
            raise _BadLiteral(span, "an array literal needs at least one element")
        return self.node(A.ArrayLit, list(items), span=span)

    def if_expr(self, c):
        nodes = self.nodes(c)
        return self.node(A.IfExpr, nodes[0], nodes[1], nodes[2], span=self.span(c[0], c[-1]))

    def args(self, c):
        return list(c)

    def targs(self, c):
        return list(c)

    def kwarg(self, c):
        return self.node(A.KwArg, str(c[0]), c[2], span=self.span(c[0], c[2]))

    def vcount_int(self, c):
        return self.int_lit(c)

    def vcount_name(self, c):
        return self.name(c)

    def name(self, c):
        return A.Name(str(c[0]), span=_tok_span(self.file, c[0]))

    def int_lit(self, c):
        t = c[0]
        text = str(t).replace("_", "")
        m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|0[bB][01]+|[0-9]+)([iu](?:8|16|32|64)|f16|bf16|f32|f64)?", text)
        span = _tok_span(self.file, t)
        if m is None:  # e.g. `0x_` : digits were all underscores
            raise _BadLiteral(span, f"malformed number '{t}'")
        digits, suffix = m.group(1), m.group(2)
        value = int(digits, 0) if digits[:2].lower() in ("0x", "0b") else int(digits, 10)
        if suffix and suffix[0] in "fb":
            return A.FloatLit(float(value), suffix, span=span)
        return A.IntLit(value, suffix, span=span)

    def float_lit(self, c):
        t = c[0]
        text = str(t).replace("_", "")
        m = re.fullmatch(r"(.*?)(f16|bf16|f32|f64)?", text)
        return A.FloatLit(float(m.group(1)), m.group(2), span=_tok_span(self.file, t))

    def str_lit(self, c):
        t = c[0]
        raw = str(t)[1:-1]
        try:
            value = raw.encode("latin-1", "backslashreplace").decode("unicode_escape")
        except (UnicodeDecodeError, UnicodeEncodeError):
            value = raw
        return A.StrLit(value, span=_tok_span(self.file, t))

    def true_lit(self, c):
        return A.BoolLit(True, span=_tok_span(self.file, c[0]))

    def false_lit(self, c):
        return A.BoolLit(False, span=_tok_span(self.file, c[0]))


class _BadLiteral(Exception):
    def __init__(self, span: SourceSpan, message: str):
        self.span = span
        self.message = message


class _Callbacks:
    """Adapts _Builder to lark's transformer protocol (one callable per rule name)."""

    def __init__(self):
        self.builder: _Builder | None = None

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        b = _Builder.__dict__.get(name)
        if b is None:
            raise AttributeError(name)
        return lambda children: b(self.builder, children)


_GRAMMAR = Path(__file__).with_name("grammar.lark")


@lru_cache(maxsize=1)
def _parser() -> tuple[Lark, _Callbacks]:
    """The LALR parser. Building its tables takes ~0.3 s, so lark keeps them in the kernel cache folder
    (keyed by lark on the grammar's sha256, lark's version and Python's; a stale or damaged file is
    rebuilt, an unwritable folder only costs the time)."""
    cb = _Callbacks()
    try:
        folder = default_cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        cache: str | bool = str(folder / "grammar.lark-tables")
    except OSError:
        cache = False
    p = Lark(_GRAMMAR.read_text(), parser="lalr", lexer="contextual", transformer=cb,
             maybe_placeholders=False, cache=cache)
    return p, cb


# --- error messages ------------------------------------------------------------------------------

_TERMINAL_WORDS = {"NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
                   "$END": "end of input"}


def _describe_terminal(name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    p, _ = _parser()
    for t in p.terminals:
        if t.name == name:
            pat = t.pattern
            if pat.type == "str":
                return f"'{pat.value}'"
            if name.lower() in KEYWORDS:  # a keyword's whole-word pattern (grammar.lark)
                return f"'{name.lower()}'"
            if name == "AUGOP":
                return "a compound assignment ('+=', ...)"
            return name.lower()
    return name.lower()


def _describe_token(t: Token) -> str:
    if t.type == "$END":
        return "end of input"
    text = str(t)
    if t.type == "NAME":
        return f"name '{text}'"
    if t.type in ("INT", "FLOAT"):
        return f"number {text}"
    if t.type == "STRING":
        return f"string {text}"
    if text in KEYWORDS:
        return f"keyword '{text}'"
    return f"'{text}'"


def _linecol(text: str, pos: int) -> tuple[int, int]:
    pos = max(0, min(pos, len(text)))
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def _prev_token_end(text: str, pos: int) -> int:
    """The offset just past the last non-blank character before ``pos`` (skipping // comments)."""
    i = pos
    while i > 0:
        i -= 1
        c = text[i]
        if c in " \t\r\n\f":
            continue
        # inside a line comment? then jump to its start
        ls = text.rfind("\n", 0, i) + 1
        cpos = text.find("//", ls, i + 1)
        if cpos != -1:
            i = cpos
            continue
        return i + 1
    return 0


def _span_at(file: SourceFile, pos: int, length: int = 1) -> SourceSpan:
    line, col = _linecol(file.text, pos)
    return SourceSpan(file, line, col, line, col + max(length, 1))


def _report(file: SourceFile, text: str, e: UnexpectedInput, diag: Diagnostics) -> int:
    """Record a lark error; returns the offset where it happened."""
    if isinstance(e, UnexpectedCharacters):
        pos = e.pos_in_stream
        ch = text[pos] if pos < len(text) else ""
        shown = ch if ch.isprintable() and ch not in "'" else repr(ch)[1:-1]
        if text.startswith("/*", pos):
            diag.error("unterminated block comment: '/*' has no matching '*/'", _span_at(file, pos, 2))
        elif ch == '"':
            diag.error("unterminated string literal", _span_at(file, pos, 1),
                       hint='close the string with \'"\' on the same line')
        else:
            diag.error(f"unexpected character '{shown}'", _span_at(file, pos, 1),
                       hint="remove it" if not ch.isprintable() else None)
        return pos
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = sorted({_describe_terminal(n) for n in (e.accepts or e.expected)})
        if tok.type == "$END":
            pos = _prev_token_end(text, len(text))
            span = _span_at(file, pos, 1) if pos < len(text) else _span_at(file, max(pos - 1, 0), 1)
            if pos >= len(text) and len(text) > 0:
                line, col = _linecol(text, pos)
                span = SourceSpan(file, line, col, line, col + 1)
            msg = "unexpected end of input"
        else:
            pos = tok.start_pos if tok.start_pos is not None else 0
            span = _tok_span(file, tok)
            msg = f"unexpected {_describe_token(tok)}"
            if text.startswith("/*", pos):
                diag.error("unterminated block comment: '/*' has no matching '*/'", _span_at(file, pos, 2))
                return pos
        if len(expected) > 10:
            shown = ", ".join(expected[:10]) + ", ..."
        else:
            shown = ", ".join(expected)
        hint = None
        if "';'" in expected and tok.type != "$END":
            end = _prev_token_end(text, pos)
            if file.text.count("\n", end, pos) > 0:
                span = _span_at(file, end, 1)
                msg = f"expected ';' after this, found {_describe_token(tok)}"
                diag.error(msg, span, hint="add ';' at the end of the statement")
                return pos
        if expected:
            msg += f", expected {'one of ' if len(expected) > 1 else ''}{shown}"
        diag.error(msg, span, hint)
        return pos
    if isinstance(e, UnexpectedEOF):
        pos = len(text)
        diag.error("unexpected end of input", _span_at(file, max(pos - 1, 0), 1))
        return pos
    diag.error(f"syntax error: {e}", _span_at(file, 0, 1))
    return len(text)


_RESYNC = re.compile(r"^[ \t]*(kernel|fn|import|const|struct)\b", re.M)


_LOCK = threading.Lock()  # the parser's reduce actions share one builder


#: Trees of the texts parsed without a diagnostic, by (path, text), most recent last: a program's
#: imports (the standard library's modules, ~0.3 s each) parse once a process instead of once a
#: compile. Sharing is safe because no stage changes a tree after parsing (the checker and the
#: lowering keep what they learn beside it; tests/frontend/test_parse_cache.py checks that a compile
#: leaves every tree as it was).
_TREES: OrderedDict[tuple[str, str], A.Module] = OrderedDict()
_TREES_KEPT = 96  # twice the standard library's modules: room for a process's own files beside them


def parse(file: SourceFile, diag: Diagnostics) -> A.Module | None:
    """Parse ``file``; syntax errors are recorded in ``diag`` (and None returned). A text parsed before
    under the same path gives the same tree (:data:`_TREES`), which callers must not change."""
    key = (file.path, file.text)
    with _LOCK:
        tree = _TREES.get(key)
        if tree is not None:
            _TREES.move_to_end(key)
            return tree
        before = len(diag.items)
        tree = _parse(file, diag)
        if tree is not None and len(diag.items) == before:
            _TREES[key] = tree
            if len(_TREES) > _TREES_KEPT:
                _TREES.popitem(last=False)
        return tree


def _parse(file: SourceFile, diag: Diagnostics) -> A.Module | None:
    parser, cb = _parser()
    text = file.text
    start = 0
    result: A.Module | None = None
    failed = False
    while True:
        src = text if start == 0 else re.sub(r"[^\n]", " ", text[:start]) + text[start:]
        cb.builder = _Builder(file)
        try:
            module = parser.parse(src)
            if not failed:
                result = module
            break
        except UnexpectedInput as e:
            failed = True
            pos = _report(file, src, e, diag)
        except NestingTooDeep as e:
            failed = True
            diag.error(f"nesting too deep: expressions and blocks may nest at most {MAX_DEPTH} levels",
                       e.span, hint="split the expression or move nested code into a fn")
            pos = _offset(text, e.span.line, e.span.col)
        except _BadLiteral as e:
            failed = True
            diag.error(e.message, e.span)
            pos = _offset(text, e.span.line, e.span.col)
        except RecursionError:
            failed = True
            diag.error("nesting too deep", _span_at(file, start, 1))
            break
        if len(diag.items) >= diag.limit:
            break
        # Resume at the next top-level declaration that starts on a later line.
        nl = text.find("\n", pos)
        if nl == -1:
            break
        m = _RESYNC.search(text, nl + 1)
        if m is None:
            break
        start = m.start(1)
    return None if failed else result


def _offset(text: str, line: int, col: int) -> int:
    off = 0
    for _ in range(line - 1):
        nl = text.find("\n", off)
        if nl == -1:
            return len(text)
        off = nl + 1
    return off + col - 1
