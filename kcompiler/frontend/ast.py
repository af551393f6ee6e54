"""The syntax tree of the kernel language, as the parser builds it (untyped; see lowering.py for types).

Every node carries the :class:`~kcompiler.diagnostics.SourceSpan` it was parsed from and its ``depth``
(1 + the deepest child), which the parser bounds so that no later stage recurses without limit.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Union

from ..diagnostics import SourceSpan


@dataclass(eq=False)
class Node:
    span: SourceSpan = field(kw_only=True, repr=False)
    depth: int = field(default=1, kw_only=True, repr=False)


# --- type expressions ---------------------------------------------------------------------------

@dataclass(eq=False)
class TypeName(Node):
    """``f32``, ``T``, ``type`` (the kind of a type parameter)."""
    name: str


@dataclass(eq=False)
class PtrTypeExpr(Node):
    """``ptr<T>`` or ``ptr<T, shared>``; ``space`` None means global."""
    pointee: "TypeExpr"
    space: str | None = None
    space_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class VecTypeExpr(Node):
    """``vec<T, N>``: N is a compile-time expression."""
    elem: "TypeExpr"
    count: "Expr"


@dataclass(eq=False)
class ArrayTypeExpr(Node):
    """``[T; N]``: N is a compile-time expression."""
    elem: "TypeExpr"
    count: "Expr"


@dataclass(eq=False)
class FnTypeExpr(Node):
    """The kind of a compile-time function parameter: ``fn`` (``params`` None: any fn, checked at each
    call) or ``fn(acc: f32, col: i32) -> f32`` (a signature every fn bound to it must have;
    ``names`` holds the optional parameter names, which only document; ``ret`` None: returns nothing).
    Only a compile-time parameter's declaration has one."""
    params: list["TypeExpr"] | None = None
    names: list[str | None] | None = None
    ret: "TypeExpr | None" = None


@dataclass(eq=False)
class GenericTypeExpr(Node):
    """``Acc[f32]``: an instance of a generic struct; ``args`` are types, expressions or KwArgs."""
    name: str
    args: list


TypeExpr = Union[TypeName, PtrTypeExpr, VecTypeExpr, ArrayTypeExpr, GenericTypeExpr]


# --- expressions --------------------------------------------------------------------------------

@dataclass(eq=False)
class Name(Node):
    id: str


@dataclass(eq=False)
class IntLit(Node):
    value: int
    suffix: str | None = None  # 'i32', 'u8', or a float type for `2f32`


@dataclass(eq=False)
class FloatLit(Node):
    value: float
    suffix: str | None = None


@dataclass(eq=False)
class BoolLit(Node):
    value: bool


@dataclass(eq=False)
class StrLit(Node):
    value: str


@dataclass(eq=False)
class Binary(Node):
    op: str  # '+', '&&', '<<', ...
    lhs: "Expr"
    rhs: "Expr"
    op_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class Unary(Node):
    op: str  # '-', '!', '~'
    operand: "Expr"


@dataclass(eq=False)
class KwArg(Node):
    name: str
    value: "Expr"


@dataclass(eq=False)
class Call(Node):
    """``func(args, name = value)``; ``func`` is any expression (a name, ``m.f``, ``load[T]``)."""
    func: "Expr"
    args: list["Expr"]
    kwargs: list[KwArg]


@dataclass(eq=False)
class Index(Node):
    """``base[a, b]``: indexing, or compile-time arguments (``load[vec<f16, 8>]``, ``f[T = f32]``).
    An argument is an expression or a type that only parses as a type (``vec<...>``, ``[T; N]``)."""
    base: "Expr"
    args: list[Union["Expr", TypeExpr]]
    kwargs: list[KwArg]


@dataclass(eq=False)
class Field(Node):
    base: "Expr"
    name: str
    name_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class TypeCall(Node):
    """A conversion written with a type that only parses as a type: ``vec<f32, 4>(v)``."""
    type: TypeExpr
    args: list["Expr"]
    kwargs: list[KwArg]


@dataclass(eq=False)
class FieldInit(Node):
    """``lo: a`` in a struct literal."""
    name: str
    value: "Expr"


@dataclass(eq=False)
class StructLit(Node):
    """``Pair { lo: a, hi: b }`` or ``Acc[f32] { sum: 0.0, n: 0 }`` (``targs`` the bracket arguments)."""
    name: str
    targs: list | None
    inits: list[FieldInit]
    name_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class ArrayLit(Node):
    """``[a, b, c]``: a fixed array ``[T; 3]`` of the elements' one type (lower_arrays.py)."""
    elems: list["Expr"]


@dataclass(eq=False)
class IfExpr(Node):
    """``if cond { then } else { orelse }`` as an expression: only the chosen side is evaluated."""
    cond: "Expr"
    then: "Expr"
    orelse: "Expr"


Expr = Union[Name, IntLit, FloatLit, BoolLit, StrLit, Binary, Unary, Call, Index, Field, TypeCall, ArrayLit, IfExpr,
             StructLit]


# --- statements ---------------------------------------------------------------------------------

@dataclass(eq=False)
class Block(Node):
    stmts: list["Stmt"]


@dataclass(eq=False)
class Let(Node):
    name: str
    type: TypeExpr | None
    value: Expr
    name_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class Var(Node):
    name: str
    type: TypeExpr | None
    value: Expr | None
    name_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class Shared(Node):
    """``shared tile: [f32; 256];`` (kernels only)."""
    name: str
    type: TypeExpr
    name_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class Assign(Node):
    """``target = value`` or ``target op= value`` (``op`` is '' for plain assignment)."""
    target: Expr
    op: str
    value: Expr
    op_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class ExprStmt(Node):
    expr: Expr


@dataclass(eq=False)
class IfArm(Node):
    cond: Expr
    body: Block


@dataclass(eq=False)
class If(Node):
    """``if a {..} else if b {..} else {..}``; ``comptime`` when written ``comptime if``."""
    arms: list[IfArm]
    orelse: Block | None
    comptime: bool = False


@dataclass(eq=False)
class For(Node):
    """``for [var] i in [comptime] range(...) {..}``; ``iter`` is the expression after ``in``."""
    var: str
    mutable: bool
    iter: Expr
    comptime: bool
    body: Block
    var_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class While(Node):
    cond: Expr
    body: Block


@dataclass(eq=False)
class Break(Node):
    pass


@dataclass(eq=False)
class Continue(Node):
    pass


@dataclass(eq=False)
class Return(Node):
    value: Expr | None


@dataclass(eq=False)
class Const(Node):
    """``const NAME[: T] = value;``: a compile-time constant (a scalar or a table), at module level
    or in a block; its value is evaluated at compile time (lower_arrays.py)."""
    name: str
    type: TypeExpr | None
    value: Expr
    name_span: SourceSpan | None = field(default=None, repr=False)


Stmt = Union[Block, Let, Var, Shared, Assign, ExprStmt, If, For, While, Break, Continue, Return, Const]


# --- declarations -------------------------------------------------------------------------------

@dataclass(eq=False)
class Param(Node):
    name: str
    type: TypeExpr


@dataclass(eq=False)
class ComptimeParamDecl(Node):
    """``T: type``, ``VEC: i32 = 4``, ``FLAG: bool = false``."""
    name: str
    type: TypeExpr
    default: Expr | None


@dataclass(eq=False)
class FnDecl(Node):
    """A ``kernel`` (kind 'kernel') or a device function (kind 'fn')."""
    kind: str
    name: str
    cparams: list[ComptimeParamDecl]
    params: list[Param]
    ret: TypeExpr | None
    body: Block
    name_span: SourceSpan | None = field(default=None, repr=False)

    @property
    def is_kernel(self) -> bool:
        return self.kind == "kernel"


@dataclass(eq=False)
class Import(Node):
    """``import std.math [as m]``: ``path`` ['std', 'math'], ``alias`` the name it binds."""
    path: list[str]
    alias: str


@dataclass(eq=False)
class StructField(Node):
    name: str
    type: TypeExpr


@dataclass(eq=False)
class StructDecl(Node):
    """``struct Pair { lo: f32, hi: f32 }``, generic with ``cparams`` (``struct Acc[T: type] {...}``)."""
    name: str
    cparams: list[ComptimeParamDecl]
    fields: list[StructField]
    name_span: SourceSpan | None = field(default=None, repr=False)


@dataclass(eq=False)
class Module(Node):
    imports: list[Import]
    decls: list[FnDecl]
    consts: list[Const] = field(default_factory=list)
    structs: list[StructDecl] = field(default_factory=list)


#: Per node class, the names of its fields that may hold nodes (all but span and depth), worked out
#: once: dataclasses.fields() on every visit was most of a walk's time (and walks are most of load's).
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    names = _CHILD_FIELDS.get(cls)
    if names is None:
        names = _CHILD_FIELDS[cls] = tuple(f.name for f in fields(cls) if f.name not in ("span", "depth"))
    return names


def children(node: Node) -> list[Node]:
    """The nodes directly inside ``node`` (for walks and the AST dump)."""
    out: list[Node] = []
    for name in _child_fields(type(node)):
        v = getattr(node, name)
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, list):
            out.extend(x for x in v if isinstance(x, Node))
    return out


def walk(node: Node):
    """Every node under ``node`` (pre-order), iteratively."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def dump(node: Node) -> str:
    """An indented, readable dump of the tree (``kc compile --emit ast``)."""
    out: list[str] = []
    stack: list[tuple[object, int, str]] = [(node, 0, "")]
    while stack:
        n, ind, label = stack.pop()
        pad = "  " * ind + (f"{label}: " if label else "")
        if not isinstance(n, Node):
            out.append(f"{pad}{n!r}")
            continue
        scalars, kids = [], []
        for f in fields(n):
            if f.name in ("span", "depth") or f.name.endswith("_span"):
                continue
            v = getattr(n, f.name)
            if isinstance(v, Node):
                kids.append((f.name, v))
            elif isinstance(v, list) and any(isinstance(x, Node) for x in v):
                for k, x in enumerate(v):
                    kids.append((f"{f.name}[{k}]", x))
            elif isinstance(v, list) and not v:
                continue
            else:
                scalars.append(f"{f.name}={v!r}")
        s = n.span
        out.append(f"{pad}{type(n).__name__}({', '.join(scalars)}) @{s.line}:{s.col}")
        for lab, k in reversed(kids):
            stack.append((k, ind + 1, lab))
    return "\n".join(out)
