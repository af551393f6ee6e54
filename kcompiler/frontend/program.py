"""A parsed, checked program: the main file, the modules it imports, and the signatures of its kernels
(with inference of compile-time parameters from the argument types a launch passes)."""
from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..diagnostics import CompileError, Diagnostics, SourceFile, SourceSpan
from ..gcscope import fewer_collections
from ..limits import deep_recursion
from ..ir.types import (AddressSpace, ArrayType, PointerType, ScalarType, SCALARS, Type, VectorType, type_from_str)
from . import ast as A
from .builtins import ACCURATE_MATH
from .checker import Checker, comptime_kind, texpr_str
from .parser import parse
from .semantic import CV, SemanticError, convert_cv, fold_binary, fold_unary
from .semantic import fits


def stdlib_dir() -> Path | None:
    """The folder of the kernel-language standard library that belongs to this copy of kcompiler:
    the checkout's top-level ``stdlib/`` when this package sits in one (an editable install, or
    the source tree on sys.path), else the installed package data of ``kcompiler.stdlib``."""
    here = Path(__file__).resolve().parents[2] / "stdlib"
    if (here / "hostcall.kc").is_file():
        return here
    try:
        import importlib.resources as res

        p = res.files("kcompiler.stdlib")
        if p.is_dir():
            return Path(str(p))
    except (ModuleNotFoundError, TypeError, ValueError, OSError):
        pass
    return None


@dataclass(eq=False)
class SourceModule:
    """One parsed .kc file. ``key`` identifies it (its resolved path, or '<string>'); ``prefix`` is
    prepended to the symbols of its functions ('' for the main file, 'std_math__' for std.math)."""

    name: str
    key: str
    file: SourceFile
    ast: A.Module
    prefix: str = ""
    fns: dict[str, A.FnDecl] = field(default_factory=dict)
    consts: dict[str, A.Const] = field(default_factory=dict)
    structs: dict[str, A.StructDecl] = field(default_factory=dict)
    imports: dict[str, "SourceModule"] = field(default_factory=dict)


@dataclass(frozen=True)
class ComptimeParam:
    """A compile-time parameter: ``kind`` 'type', 'int', 'bool' or 'fn'; ``type`` the declared integer
    type (or bool); ``default`` its value with the earlier parameters at their defaults (an ir Type
    for types; for a fn, its name as the declaring module spells it, 'relu' or 'epilogue.bias') or
    None. A specialisation evaluates the default again with its own earlier values
    (comptime_defaults.bind_defaults)."""

    name: str
    kind: str
    default: Any = None
    type: ScalarType | None = None
    span: SourceSpan | None = None
    #: the declaration (its ``default`` expression is evaluated per specialisation: comptime_defaults)
    node: Any = field(default=None, compare=False, repr=False)

    @property
    def has_default(self) -> bool:
        """Whether the declaration gives a default (``default`` is its value with the earlier
        parameters' defaults, None where it uses a parameter that has none)."""
        return self.node is not None and self.node.default is not None


class KernelSignature:
    """The interface of a (possibly generic) kernel: compile-time parameters, runtime parameters with
    their type expressions (``ptr<T>``), and inference of the former from the latter's types."""

    def __init__(self, name: str, comptime: list[ComptimeParam], params: list[tuple[str, A.TypeExpr]]):
        self.name = name
        self.comptime = comptime
        self.params = params

    def __repr__(self) -> str:
        cp = ", ".join(f"{c.name}: {c.kind}" + (f" = {c.default}" if c.default is not None else "")
                       for c in self.comptime)
        ps = ", ".join(f"{n}: {texpr_str(t)}" for n, t in self.params)
        return f"kernel {self.name}[{cp}]({ps})"

    def infer(self, arg_types: list[Type | None], given: dict[str, Any]) -> dict[str, Any]:
        """The value of every compile-time parameter for a launch with arguments of ``arg_types``
        (None: unknown, e.g. a Python scalar) and the values ``given`` by keyword.

        Type parameters are found by matching each parameter's type expression (``ptr<T>``,
        ``vec<T, N>``) with its argument's type; then ``given`` values apply (they must agree with what
        was inferred), then defaults. Returns {name: value} with ir Types for type parameters.
        Raises TypeError naming the kernel and the parameter when a value is missing, conflicts, or has
        the wrong kind."""
        by_name = {c.name: c for c in self.comptime}
        unknown = sorted(set(given) - set(by_name))
        if unknown:
            raise TypeError(f"kernel '{self.name}' has no compile-time parameter "
                            f"{', '.join(repr(u) for u in unknown)}; it has: "
                            f"{', '.join(by_name) or 'none'}")
        if len(arg_types) != len(self.params):
            raise TypeError(f"kernel '{self.name}' takes {len(self.params)} arguments "
                            f"({', '.join(n for n, _ in self.params)}), got {len(arg_types)}")
        found: dict[str, tuple[Any, str]] = {}
        for (pname, texpr), at in zip(self.params, arg_types):
            if at is None:
                continue
            for cname, value in _unify(texpr, at, by_name):
                prev = found.get(cname)
                if prev is not None and prev[0] != value:
                    raise TypeError(f"kernel '{self.name}': compile-time parameter {cname} is {prev[0]} "
                                    f"from argument '{prev[1]}' but {value} from argument '{pname}'")
                found[cname] = (value, pname)
        # a cycle: comptime_defaults imports this module
        from .comptime_defaults import MissingParam, bind_defaults
        out: dict[str, Any] = {}
        for c in self.comptime:
            if c.name in given:
                v = _check_given(self.name, c, given[c.name])
                if c.name in found and found[c.name][0] != v:
                    raise TypeError(f"kernel '{self.name}': {c.name}={v} was given but argument "
                                    f"'{found[c.name][1]}' has {c.name} = {found[c.name][0]}")
                out[c.name] = v
            elif c.name in found:
                out[c.name] = found[c.name][0]
        try:
            return bind_defaults(self.comptime, out)
        except MissingParam as e:
            c = e.param
            where = [n for n, t in self.params if _mentions(t, c.name)]
            how = (f"from the type of argument '{where[0]}'" if where else "from the arguments")
            raise TypeError(f"kernel '{self.name}': cannot infer compile-time parameter {c.name} "
                            f"{how}; pass it by keyword: {c.name}=...") from None
        except StaticEvalError as e:
            raise TypeError(f"kernel '{self.name}': {e.message} at {e.span}") from None


_FN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


def _given(v: Any) -> str:
    """A value given for a compile-time parameter, as the language spells it (``the type f16``,
    ``true``), else Python's repr with its Python type (``'8' (a str)``)."""
    if isinstance(v, Type):
        return f"the type {v}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, type):
        return f"the Python class {v.__module__}.{v.__qualname__}"
    return f"{v!r} (a {type(v).__name__})"


def _check_given(kernel: str, c: ComptimeParam, v: Any) -> Any:
    if c.kind == "fn":
        # a fn is given by name, as the kernel's file would write it; lowering resolves and checks it
        if isinstance(v, str) and _FN_NAME.fullmatch(v.strip()):
            return v.strip()
        raise TypeError(f"kernel '{kernel}': compile-time parameter {c.name} is a fn, given by its name "
                        f"('relu', 'epilogue.bias'); got {_given(v)}")
    if c.kind == "type":
        if isinstance(v, str):
            try:
                return type_from_str(v)
            except ValueError:
                pass
        if isinstance(v, Type):
            return v
        raise TypeError(f"kernel '{kernel}': compile-time parameter {c.name} is a type; got {_given(v)}")
    if hasattr(v, "item") and not isinstance(v, (bool, int, type)):  # a numpy or torch scalar
        v = v.item()
    if c.kind == "bool":
        if isinstance(v, bool):
            return v
        raise TypeError(f"kernel '{kernel}': compile-time parameter {c.name} is a bool; got {_given(v)}")
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"kernel '{kernel}': compile-time parameter {c.name} is an integer ({c.type}); "
                        f"got {_given(v)}")
    if c.type is not None and not fits(v, c.type):
        raise TypeError(f"kernel '{kernel}': {c.name}={v} does not fit in {c.type}")
    return v


def _mentions(t: A.TypeExpr, name: str) -> bool:
    return any(isinstance(n, (A.TypeName, A.Name)) and getattr(n, "name", getattr(n, "id", None)) == name
               for n in A.walk(t))


def _unify(t: A.TypeExpr, at: Type, params: dict[str, ComptimeParam]) -> list[tuple[str, Any]]:
    """Bindings of compile-time parameters that make type expression ``t`` equal to ``at``."""
    out: list[tuple[str, Any]] = []
    stack: list[tuple[Any, Type]] = [(t, at)]
    while stack:
        t, at = stack.pop()
        if isinstance(t, A.TypeName):
            c = params.get(t.name)
            if c is not None and c.kind == "type":
                out.append((t.name, at))
        elif isinstance(t, A.PtrTypeExpr) and isinstance(at, PointerType):
            stack.append((t.pointee, at.pointee))
        elif isinstance(t, (A.VecTypeExpr, A.ArrayTypeExpr)) and isinstance(at, (VectorType, ArrayType)):
            stack.append((t.elem, at.elem))
            if isinstance(t.count, A.Name):
                c = params.get(t.count.id)
                if c is not None and c.kind == "int":
                    out.append((t.count.id, at.count))
    return out


# --- a small evaluator for defaults of compile-time parameters ------------------------------------

class StaticEvalError(Exception):
    """A default that cannot be evaluated: ``message`` and where (``span``)."""

    def __init__(self, message: str, span: SourceSpan | None):
        super().__init__(message)
        self.message, self.span = message, span


class DependsOnUnbound(StaticEvalError):
    """The expression uses an earlier compile-time parameter that has no value yet (UNBOUND): it is
    evaluated per specialisation, once that parameter is bound."""


#: The static environment's value of an earlier compile-time parameter that has no default.
UNBOUND = object()


def _bound(name: str, env: dict[str, Any], span: SourceSpan | None) -> Any:
    v = env[name]
    if v is UNBOUND:
        raise DependsOnUnbound(f"'{name}' has no value here", span)
    return v


def static_value(e: Any, env: dict[str, Any]) -> Any:
    """The compile-time value of a parameter default: a literal, an earlier parameter, a type, or
    arithmetic on those. Returns int/bool or an ir Type. Raises StaticEvalError."""
    if isinstance(e, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr, A.TypeName)):
        return static_type(e, env)
    r = _static(e, env)
    if isinstance(r, CV):
        return r.value
    return r


def _static(e: Any, env: dict[str, Any]) -> Any:
    if isinstance(e, A.IntLit):
        return CV(e.value, SCALARS[e.suffix] if e.suffix else None)
    if isinstance(e, A.FloatLit):
        return CV(e.value, SCALARS[e.suffix] if e.suffix else None)
    if isinstance(e, A.BoolLit):
        return CV(e.value, SCALARS["bool"])
    if isinstance(e, A.Name):
        if e.id in env:
            v = _bound(e.id, env, e.span)
            return v if isinstance(v, (Type, CV)) else CV(v, None)
        if e.id in SCALARS:
            return SCALARS[e.id]
        raise StaticEvalError(f"'{e.id}' is not known here: a default may use literals, types and earlier "
                              "compile-time parameters", e.span)
    try:
        if isinstance(e, A.Unary):
            v = _static(e.operand, env)
            if isinstance(v, CV):
                r = fold_unary(e.op, v)
                if r is not None:
                    return r
        elif isinstance(e, A.Binary):
            a, b = _static(e.lhs, env), _static(e.rhs, env)
            if isinstance(a, CV) and isinstance(b, CV):
                r = fold_binary(e.op, a, b)
                if r is not None:
                    return r
            if isinstance(a, Type) and isinstance(b, Type) and e.op in ("==", "!="):
                return CV((a == b) == (e.op == "=="), SCALARS["bool"])
        elif isinstance(e, A.Call) and isinstance(e.func, A.Name) and e.func.id in SCALARS \
                and len(e.args) == 1:
            v = _static(e.args[0], env)
            if isinstance(v, CV):
                return convert_cv(v, SCALARS[e.func.id])
    except SemanticError as err:
        raise StaticEvalError(err.message, e.span) from None
    raise StaticEvalError("a default value must be a compile-time constant", e.span)


def static_type(t: Any, env: dict[str, Any]) -> Type:
    if isinstance(t, A.Name):
        t = A.TypeName(t.id, span=t.span)
    if isinstance(t, A.TypeName):
        if t.name in SCALARS:
            return SCALARS[t.name]
        v = _bound(t.name, env, t.span) if t.name in env else None
        if isinstance(v, Type):
            return v
        raise StaticEvalError(f"'{t.name}' is not a type", t.span)
    if isinstance(t, A.PtrTypeExpr):
        return PointerType(static_type(t.pointee, env), AddressSpace(t.space or "global"))
    if isinstance(t, (A.VecTypeExpr, A.ArrayTypeExpr)):
        elem = static_type(t.elem, env)
        n = static_value(t.count, env)
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise StaticEvalError("the length must be a positive integer", t.count.span)
        if isinstance(t, A.VecTypeExpr):
            if not isinstance(elem, ScalarType):
                raise StaticEvalError("vector lanes must be scalars", t.elem.span)
            return VectorType(elem, n)
        return ArrayType(elem, n)
    raise StaticEvalError("not a type", getattr(t, "span", None))


# --- programs -------------------------------------------------------------------------------------

class Program:
    """The AST of a file and of everything it imports, checked (names, scopes, loops, recursion).

    ``kernels``: the main file's kernels by name. ``modules``: every loaded module by key.
    ``imported_files``: {resolved path: text} of every file read besides the main source.
    ``errors``: the check errors kept by ``load_program(keep_going=True)`` (empty otherwise);
    ``recoverable``: the spans of those that name something undefined (the type rules give the
    expression there the error type and go on).
    """

    def __init__(self, main: SourceModule, modules: dict[str, SourceModule]):
        self.main = main
        self.modules = modules
        self.kernels: dict[str, A.FnDecl] = {n: d for n, d in main.fns.items() if d.is_kernel}
        self.imported_files: dict[str, str] = {m.key: m.file.text for m in modules.values()
                                               if m is not main and not m.key.startswith("<")}
        self._signatures: dict[str, KernelSignature] = {}
        self.errors: list = []
        self.recoverable: frozenset = frozenset()

    @property
    def path(self) -> str:
        return self.main.file.path

    def signature(self, kernel: str) -> KernelSignature:
        """The KernelSignature of kernel ``kernel``. Raises KeyError for an unknown kernel name."""
        if kernel not in self.kernels:
            raise KeyError(f"no kernel named '{kernel}'; the file defines: "
                           f"{', '.join(self.kernels) or 'no kernels'}")
        sig = self._signatures.get(kernel)
        if sig is None:
            decl = self.kernels[kernel]
            sig = KernelSignature(kernel, comptime_params(decl), [(p.name, p.type) for p in decl.params])
            self._signatures[kernel] = sig
        return sig


def comptime_params(decl: A.FnDecl) -> list[ComptimeParam]:
    """The compile-time parameters of ``decl``, each ``default`` evaluated with the earlier parameters
    at their defaults (errors were reported by the loader; a default that cannot be evaluated so, or
    uses a parameter without a default, is left None: ``has_default`` still says it has one)."""
    from .comptime_defaults import check_default, env_value  # a cycle: comptime_defaults imports this module
    out = []
    env: dict[str, Any] = {}
    for cp in decl.cparams:
        kind = comptime_kind(cp.type) or "int"
        st = SCALARS.get(cp.type.name) if isinstance(cp.type, A.TypeName) else None
        default = None
        if cp.default is not None:
            try:
                default = check_default(cp, kind, env)
                if kind == "int" and st is not None:
                    default = convert_cv(CV(default), st).value
            except (StaticEvalError, SemanticError):
                default = None
        out.append(ComptimeParam(cp.name, kind, default, st, cp.span, cp))
        env[cp.name] = UNBOUND if default is None else env_value(kind, default, st)
    return out


def _check_defaults(decl: A.FnDecl, diag: Diagnostics) -> None:
    """Report each default of ``decl``'s compile-time parameters that cannot be evaluated with the
    earlier parameters at their defaults (one that uses a parameter without a default is checked per
    specialisation)."""
    from .comptime_defaults import check_default, env_value  # a cycle: comptime_defaults imports this module
    env: dict[str, Any] = {}
    for cp in decl.cparams:
        kind = comptime_kind(cp.type)
        st = SCALARS.get(cp.type.name) if isinstance(cp.type, A.TypeName) else None
        v = None
        if cp.default is not None and kind not in (None, "fn"):  # a fn's default: the Checker's
            try:
                v = check_default(cp, kind, env)
            except DependsOnUnbound:
                pass
            except StaticEvalError as e:
                diag.error(e.message, e.span or cp.span)
        env[cp.name] = UNBOUND if v is None else env_value(kind, v, st)


def _module_file(imp: A.Import, importer: SourceModule) -> tuple[Path | None, str]:
    """Where an import's source lives, and its module name."""
    name = ".".join(imp.path)
    if imp.path[0] == "std":
        d = stdlib_dir()
        if d is None or len(imp.path) < 2:
            return None, name
        return d.joinpath(*imp.path[1:]).with_suffix(".kc"), name
    base = Path(importer.key).parent if not importer.key.startswith("<") else Path(os.getcwd())
    return base.joinpath(*imp.path).with_suffix(".kc"), name


def std_module(program: Program, name: str) -> SourceModule:
    """Standard-library module ``std.<name>`` of ``program``, loaded now if the program has not
    imported it: for the lowering, which finds out only from the operand types that it needs one
    (float `%` is std.libm_rem's fmod: builtins_libm.float_rem), so that a program whose `%` are
    all integer ones parses nothing more. The module must import nothing itself. Raises
    CompileError if the standard library is missing or the module does not parse or check."""
    d = stdlib_dir()
    if d is None:
        raise CompileError(f"the standard library (std.{name}) is not installed")
    fpath = d / f"{name}.kc"
    key = str(fpath.resolve())
    m = program.modules.get(key)
    if m is not None:
        return m
    diag = Diagnostics()
    mfile = SourceFile(f"<std>/{name}.kc", fpath.read_text(encoding="utf-8"))
    tree = parse(mfile, diag)
    diag.check()
    assert tree is not None and not tree.imports, name
    m = SourceModule(f"std.{name}", key, mfile, tree, f"std_{name}__")
    for decl in tree.decls:
        m.fns.setdefault(decl.name, decl)
    for c in tree.consts:
        m.consts.setdefault(c.name, c)
    Checker(diag).check_module(m)
    for decl in tree.decls:
        _check_defaults(decl, diag)
    diag.check()
    program.modules[key] = m
    return m


def load_program(source: str, path: str = "<string>", keep_going: bool = False) -> Program:
    """Parse ``source`` (the text of file ``path``), load what it imports (``import std.math`` reads the
    stdlib's math.kc; ``import mylib`` reads mylib.kc beside ``path``), and check every declaration.

    Raises CompileError holding every error found, each located in its file. With ``keep_going``, errors
    of the name, scope and declaration checks are kept in ``Program.errors`` instead, so that
    :func:`~kcompiler.frontend.check` can add the type errors of the other declarations (syntax and
    import errors still raise: without a tree there is nothing to check)."""
    with deep_recursion(), fewer_collections():
        return _load(source, path, keep_going)


#: The module printf is built on where there is no vprintf (AMD, the CPU, NVIDIA in hostcall mode),
#: loaded for every file that calls printf and bound to a name no program can spell.
HOSTCALL_ALIAS = "<hostcall>"
#: The module of printf="buffered" (records in a buffer, printed after the kernel), likewise.
PRINTF_BUFFER_ALIAS = "<printf_buffer>"


#: std.math, which the accurate math builtins (sin, exp2, ...: builtins_libm.py) call, likewise.
MATH_ALIAS = "<math>"


#: _implicit_imports by module tree: a tree is the parser's, shared by every load of the same text and
#: never changed (parser.parse), and the imports are a function of it; a walk of every module on every
#: load was most of the time a load took.
_IMPLICIT: weakref.WeakKeyDictionary[A.Module, list[A.Import]] = weakref.WeakKeyDictionary()


def _implicit_imports(mod: SourceModule) -> list[A.Import]:
    """``import std.hostcall`` and ``std.printf_buffer`` for a module that calls printf (whichever
    target it is lowered for; only the functions a printf lowering calls are instantiated), and
    ``import std.math`` for one that calls an accurate math builtin it does not define itself."""
    out = _IMPLICIT.get(mod.ast)
    if out is None:
        out = _IMPLICIT[mod.ast] = _find_implicit_imports(mod)
    return list(out)


def _find_implicit_imports(mod: SourceModule) -> list[A.Import]:
    out: list[A.Import] = []
    printf = math = False
    for n in A.walk(mod.ast):
        if not (isinstance(n, A.Call) and isinstance(n.func, A.Name)):
            continue
        if n.func.id in ("printf", "assert") and not printf:
            printf = True
            out += [A.Import(["std", "hostcall"], HOSTCALL_ALIAS, span=n.span),
                    A.Import(["std", "printf_buffer"], PRINTF_BUFFER_ALIAS, span=n.span)]
        elif n.func.id in ACCURATE_MATH and n.func.id not in mod.fns and not math:
            math = True
            out.append(A.Import(["std", "math"], MATH_ALIAS, span=n.span))
    return out


def _is_file(p: Path) -> bool:
    """Whether ``p`` is a file; False where the OS refuses the name itself (too long: ENAMETOOLONG,
    which Path.is_file raises rather than answers)."""
    try:
        return p.is_file()
    except OSError:
        return False


def _load(source: str, path: str, keep_going: bool = False) -> Program:
    diag = Diagnostics()
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, not {type(source).__name__}")
    file = SourceFile(path, source)
    tree = parse(file, diag)
    diag.check()
    assert tree is not None
    key = str(Path(path).resolve()) if not path.startswith("<") else path
    main = SourceModule("main", key, file, tree)
    modules: dict[str, SourceModule] = {key: main}
    queue = [main]
    while queue:
        mod = queue.pop(0)
        for d in mod.ast.decls:
            mod.fns.setdefault(d.name, d)
        for c in mod.ast.consts:
            mod.consts.setdefault(c.name, c)
        for sd in mod.ast.structs:
            mod.structs.setdefault(sd.name, sd)
        for imp in mod.ast.imports + _implicit_imports(mod):
            fpath, name = _module_file(imp, mod)
            if fpath is None or not _is_file(fpath):
                where = "the standard library" if imp.path[0] == "std" else \
                    f"{fpath.parent if fpath else '.'}"
                hint = None
                if imp.path[0] == "std":
                    d = stdlib_dir()
                    avail = sorted(p.stem for p in d.glob("*.kc")) if d else []
                    hint = f"the standard library has: {', '.join('std.' + a for a in avail)}" if avail else None
                diag.error(f"cannot find module '{name}' in {where}", imp.span,
                           hint=hint or f"expected a file {'/'.join(imp.path)}.kc beside this one")
                continue
            mkey = str(fpath.resolve())
            m = modules.get(mkey)
            if m is None:
                try:
                    text = fpath.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as e:
                    diag.error(f"cannot read module '{name}': {e}", imp.span)
                    continue
                shown = f"<std>/{'/'.join(imp.path[1:])}.kc" if imp.path[0] == "std" else str(fpath)
                mfile = SourceFile(shown, text)
                mtree = parse(mfile, diag)
                if mtree is None:
                    continue
                prefix = "_".join(imp.path) + "__"
                m = SourceModule(name, mkey, mfile, mtree, prefix)
                modules[mkey] = m
                queue.append(m)
            mod.imports[imp.alias] = m
    diag.check()
    checker = Checker(diag)
    for m in modules.values():
        checker.check_module(m)
        for d in m.ast.decls:
            _check_defaults(d, diag)
    names = {}
    for m in modules.values():
        for d in m.ast.decls:
            names[(m.key, d.name)] = (m.name + "." if m is not main else "") + d.name
    checker.check_recursion(names)
    if not keep_going:
        diag.check()
    program = Program(main, modules)
    program.errors = [d for d in diag.items if d.severity == "error"]
    program.recoverable = frozenset(checker.recoverable)
    return program
