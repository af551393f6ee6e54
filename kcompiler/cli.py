"""The ``kc`` command.

    kc compile FILE [--target nvptx|amdgcn|cpu|cuda|hip] [--arch ARCH]
                    [--emit ast|ir|llvm|asm|obj] [-o OUT] [-P NAME=VALUE]... [--kernel NAME]
                    [-O 0-3] [--fast-math] [--check-bounds] [--release]
    kc check FILE [--target ...] [--arch ...]
    kc run FILE --kernel NAME --grid G --block B [--target ...] [--no-check-bounds] [--release] NAME=VALUE...
    kc devices
    kc targets

Exit status: 0 success, 1 the program was rejected (the located messages on stderr) or an output
could not be written, 2 bad usage. Outputs are written atomically: a failed compile leaves no file.
Without ``--emit``, ``-o``'s suffix picks the stage (a target's binary suffix, ``.cubin``/``.hsaco``/``.o``,
a binary; ``.ll`` LLVM IR; anything else assembly). Text stages go to stdout unless ``-o`` is given;
``--emit obj`` writes ``FILE.cubin`` (nvptx), ``FILE.hsaco`` (amdgcn) or ``FILE.o`` (cpu) beside the
source unless ``-o`` is given. The targets, their archs and suffixes come from the backend registry
(``kcompiler/backends/registry.py``; ``kc targets`` lists them).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from . import __version__
from .backends.registry import BUILTIN_BACKENDS, Backend, backends, find_backend, target_aliases
from .diagnostics import CompileError
from .pipeline import parse_param_value
from . import compile_file, resolve_target_name
from .pipeline import Source
from .runtime.cache import atomic_write
from .backends.target import CompileOptions
from .pipeline import resolve_target
from . import devices
from . import progress
from .pipeline import emit_cached
from .pipeline import load

_STAGES = ("ast", "ir", "llvm", "asm", "obj")
#: The stage an output file's suffix asks for when --emit is not given, besides the targets' own
#: binary and assembly suffixes (Backend.binary_suffixes, asm_suffixes).
_STAGE_OF_SUFFIX = {".ll": "llvm", ".kcir": "ir"}


def _target_name(text: str) -> str:
    """``--target``'s value: a target or alias of the backend registry, as its canonical name."""
    try:
        return find_backend(text).name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _run_target_name(text: str) -> str:
    return "auto" if text == "auto" else _target_name(text)


class _HelpFormatter(argparse.HelpFormatter):
    """Help texts given as functions are computed when help is shown: those that list the targets
    read the whole registry (plug-ins' entry points included), which a compile need not pay for."""

    def _format_action(self, action: argparse.Action) -> str:
        if callable(action.help):
            action = copy.copy(action)
            action.help = action.help()
        return super()._format_action(action)


def _arch_help() -> str:
    return "chip: " + "; ".join(b.describe_archs() for b in backends())


def _emit_help() -> str:
    kinds = ", ".join(f"{b.asm_kind} for {b.name}" for b in backends())
    suffixes = "/".join(s for b in backends() for s in b.binary_suffixes)
    return f"stage to output (default: what -o's suffix names, {suffixes} → obj, .ll → llvm; else asm: {kinds})"


def _stage_of_suffix(suffix: str, backend: Backend) -> str:
    """The stage ``-o``'s ``suffix`` asks for (``backend``'s own suffixes first, then any target's)."""
    if suffix in _STAGE_OF_SUFFIX:
        return _STAGE_OF_SUFFIX[suffix]
    for b in (backend, *backends()) if suffix else ():
        if suffix in b.binary_suffixes:
            return "obj"
        if suffix in b.asm_suffixes:
            return "asm"
    return "asm"


def _param(text: str) -> tuple[str, Any]:

    name, eq, value = text.partition("=")
    if not eq or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name.strip(), parse_param_value(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{name.strip()}: {e}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kc", description="kcompiler: a GPU kernel compiler.",
                                formatter_class=_HelpFormatter)
    p.add_argument("--version", action="version", version=f"kc {__version__}")
    verbose = dict(action="store_true", help="show what takes long on stderr (each kernel compiled, autotuning's "
                   "candidates, with times), as KC_VERBOSE=1 does")
    p.add_argument("-v", "--verbose", **verbose)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def target_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("file", metavar="FILE", help="a .kc source file")
        sp.add_argument("-v", "--verbose", default=argparse.SUPPRESS, **verbose)
        sp.add_argument("--target", "-t", default=BUILTIN_BACKENDS[0], type=_target_name, metavar="TARGET",
                        help=lambda: f"what to compile for: {', '.join(sorted(target_aliases()))} "
                                     f"(default {BUILTIN_BACKENDS[0]}; kc targets lists them)")
        sp.add_argument("--arch", "-a", default=None, help=_arch_help)

    c = sub.add_parser("compile", help="compile a file and print or write one stage",
                       description="Compile FILE and print or write one stage of the pipeline.")
    target_args(c)
    c.add_argument("--emit", "-e", default=None, choices=_STAGES, help=_emit_help)
    c.add_argument("-o", "--output", default=None,
                   help="output file ('-' for stdout; default: stdout for text, FILE.cubin/.o for obj)")
    c.add_argument("-P", "--param", dest="comptime", action="append", type=_param, default=[],
                   metavar="NAME=VALUE",
                   help="compile-time parameter (int, true/false or a type such as f16); repeatable")
    c.add_argument("--kernel", "-k", default=None, help="compile only this kernel")
    c.add_argument("-O", dest="opt_level", type=int, default=3, choices=range(4), metavar="{0-3}",
                   help="LLVM optimisation level (default 3)")
    c.add_argument("--fast-math", action="store_true", help="approximate f32 division and sqrt, "
                   "allow reassociation")
    c.add_argument("--check-bounds", action="store_true",
                   help="check every access to host-passed memory (cpu target) and every index of a "
                        "local or shared array (cpu, nvptx, amdgcn)")
    c.add_argument("--release", action="store_true",
                   help="compile device asserts out (C's NDEBUG; they are still checked)")

    k = sub.add_parser("check", help="parse and type-check a file",
                       description="Parse and type-check FILE; print every error found.")
    target_args(k)

    r = sub.add_parser("run", help="run a kernel from the command line",
                       description="Compile FILE, launch one kernel with arguments given on the "
                                   "command line, show what it prints, and save its arrays as .npy.",
                       epilog="ARG is NAME=VALUE for each kernel parameter: NAME=@file.npy (an array "
                              "from a file), NAME=zeros:f32[1024], ones:, arange: or rand:DTYPE[N] "
                              "(a new array), or NAME=42 / NAME=0.5 (a scalar).")
    r.add_argument("file", metavar="FILE", help="a .kc source file")
    r.add_argument("--kernel", "-k", required=True, help="the kernel to launch")
    r.add_argument("--grid", "-g", required=True, type=_dims_arg, help="blocks: N or X,Y[,Z]")
    r.add_argument("--block", "-b", required=True, type=_dims_arg, help="threads per block: N or X,Y[,Z]")
    r.add_argument("--target", "-t", default="auto", type=_run_target_name, metavar="TARGET",
                   help="where to run (default auto: a GPU if present, else cpu)")
    r.add_argument("--arch", "-a", default=None, help="chip (as for compile)")
    r.add_argument("--shared", type=int, default=0, help="bytes of dynamic shared memory")
    r.add_argument("--printf", choices=("vprintf", "hostcall", "buffered"), default=None,
                   help="how printf reaches the host: vprintf (nvptx's default), hostcall (the "
                        "protocol AMD kernels use; amdgcn's and cpu's default) or buffered (records "
                        "in a buffer printed after the kernel, HIP's -mprintf-kind=buffered: no PCIe "
                        "atomics needed; KC_PRINTF_BUFFER sets its size)")
    r.add_argument("--check-bounds", action=argparse.BooleanOptionalAction, default=None,
                   help="check every memory access of the kernel (cpu target): an out-of-bounds or "
                        "misaligned one stops it with the array, index, kernel and file:line:col "
                        "(exit 1). On by default for the cpu target, as kc run is a debugging "
                        "command; --no-check-bounds runs unchecked and faster, where an overrun "
                        "can corrupt the process or end it with a segfault")
    r.add_argument("--release", action="store_true",
                   help="compile device asserts out (C's NDEBUG)")
    r.add_argument("-P", "--param", dest="comptime", action="append", type=_param, default=[],
                   metavar="NAME=VALUE", help="compile-time parameter; repeatable")
    r.add_argument("--out", "-o", default="kc-out", help="folder for the arrays after the run "
                   "(default kc-out; '-' saves nothing; checked before the launch)")
    r.add_argument("args", nargs="*", metavar="ARG", help="NAME=VALUE for each kernel parameter")

    sub.add_parser("devices", help="list the devices kernels can run on here (CUDA and AMD GPUs, the "
                                   "CPU emulator)")
    sub.add_parser("targets", help="list the targets: names, aliases, archs, binaries")
    for sp in sub.choices.values():  # a command's usage errors print that command's usage
        sp.set_defaults(command_parser=sp)
        sp.formatter_class = _HelpFormatter
    return p


def _dims_arg(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not N or X,Y[,Z]") from None
    if not 1 <= len(dims) <= 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 to 3 positive sizes")
    return dims


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .runtime.device import LaunchError  # lazy: kc run's runtime (numpy); kc compile never loads it
    # lazy: kc run's runtime (numpy); kc compile never loads it
    from .runtime.runargs import ArgError, check_output_folder, parse_run_args, save_arrays

    target = resolve_target_name(args.target)
    check_bounds = args.check_bounds if args.check_bounds is not None else target == "cpu"
    if args.check_bounds and target != "cpu":
        print(f"kc: note: --check-bounds checks every access on the cpu target only; {target} checks "
              f"the indices of local and shared arrays", file=sys.stderr)
    try:
        opts = {"printf": args.printf} if args.printf else None
        module = compile_file(args.file, target=target, arch=args.arch, target_options=opts,
                              check_bounds=check_bounds, release=args.release)
        kernel = getattr(module, args.kernel)
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {args.file}: {getattr(e, 'strerror', None) or e}")
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except AttributeError as e:
        return _fail(str(e))
    except ValueError as e:  # an arch or a --printf the target does not take
        parser.error(str(e))
    try:
        values = parse_run_args(kernel.param_names, args.args)
        if args.out != "-":
            check_output_folder(args.out)
    except ArgError as e:
        parser.error(str(e))
    try:
        # The kernel's printf lines through sys.stdout, all of them before what kc prints next,
        # whichever runtime wrote them (C stdio for CUDA and HIP: runtime/stdio.py).
        with _printf_capture():
            kernel[args.grid, args.block](*values, shared=args.shared, **dict(args.comptime))
            module.device.synchronize()
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except (TypeError, ValueError, LaunchError) as e:
        return _fail(str(e))
    sys.stdout.flush()
    if args.out != "-":
        try:
            for line in save_arrays(args.out, kernel.param_names, values):
                print(line, file=sys.stderr)
        except OSError as e:
            return _fail(f"cannot save the arrays in {args.out}: {e.strerror or e}")
    return 0


def _printf_capture() -> Any:
    """kc.capture_printf (echoing), or, without wurlitzer, a context that only flushes C stdio."""
    import contextlib

    # lazy: kc run's runtime (numpy); kc compile never loads it
    from .runtime.stdio import capture_printf, flush_c_stdio
    try:
        import wurlitzer  # noqa: F401
    except ImportError:
        @contextlib.contextmanager
        def flushing() -> Any:
            try:
                yield
            finally:
                flush_c_stdio()
        return flushing()
    return capture_printf(echo=True)


def _fail(msg: str) -> int:
    print(f"kc: error: {msg}", file=sys.stderr)
    return 1


def _read(path: str) -> Any:

    return Source.from_file(path)


def _write(out: str, data: str | bytes) -> None:

    if out == "-":
        if isinstance(data, bytes):
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(data if data.endswith("\n") else data + "\n")
            sys.stdout.flush()
        return
    atomic_write(out, data)


def _compile(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:

    backend = find_backend(args.target)
    target = backend.name
    comptime = dict(args.comptime)
    options = CompileOptions(opt_level=args.opt_level, check_bounds=args.check_bounds,
                             fast_math=args.fast_math, release=args.release)
    try:
        source = _read(args.file)
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {args.file}: {getattr(e, 'strerror', None) or e}")
    try:
        stage = args.emit or _stage_of_suffix(Path(args.output or "").suffix, backend)
        # A cached output is written without importing the frontend or LLVM; a miss compiles.
        out = emit_cached(source, stage, target, args.arch, kernel=args.kernel, comptime=comptime,
                          options=options, resolve=lambda t, a: _target(t, a, parser))
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except ValueError as e:  # -P names no kernel declares
        parser.error(str(e))
    except RuntimeError as e:
        if type(e).__name__ == "CubinUnavailable":  # no ptxas here
            return _fail(f"cannot write a cubin: {e}; --emit asm writes PTX, which the CUDA driver "
                         f"loads as it is")
        if type(e).__name__ in ("LinkerUnavailable", "LinkError"):  # the AMD code object's ld.lld
            return _fail(f"cannot write the code object: {e}")
        raise
    if args.output is not None:
        dest = args.output
    elif isinstance(out, bytes):
        dest = str(Path(args.file).with_suffix(backend.binary_suffixes[0]))
    else:
        dest = "-"
    try:
        _write(dest, out)
    except OSError as e:
        return _fail(f"cannot write {dest}: {e.strerror or e}")
    return 0


def _target(target: str, arch: str | None, parser: argparse.ArgumentParser) -> Any:

    try:
        return resolve_target(target, arch)
    except ValueError as e:  # unknown arch
        parser.error(str(e))


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .frontend import check  # lazy: lark, for kc check only

    try:
        source = _read(args.file)
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {args.file}: {getattr(e, 'strerror', None) or e}")
    try:
        tgt = _target(args.target, args.arch, parser)
        if tgt is None:
            return 1
        check(load(source, keep_going=True), tgt)
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    return 0


def _devices() -> int:

    for d in devices():
        print(f"{d.target:6} {d.arch:10} {getattr(d, 'name', type(d).__name__)}")
    return 0


def _targets() -> int:
    for b in backends():
        archs = ", ".join(b.archs) if b.archs else b.arch_help or "any"
        aliases = f" (also {', '.join(b.aliases)})" if b.aliases else ""
        print(f"{b.name}{aliases}: {b.vendor}; --emit asm: {b.asm_kind}, obj: {b.binary_kind} "
              f"({'/'.join(b.binary_suffixes)}); arch: {archs}; default {b.default_arch}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kc`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    # kc run's NAME=VALUE arguments may follow options: argparse leaves those for us.
    args, extra = parser.parse_known_args(argv)
    command_parser = getattr(args, "command_parser", parser)
    if extra:
        if args.command != "run" or any(x.startswith("-") for x in extra):
            command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.args += extra

    progress.forced = True if args.verbose else None
    try:
        if args.command == "compile":
            return _compile(args, command_parser)
        if args.command == "check":
            return _check(args, command_parser)
        if args.command == "run":
            return _run(args, command_parser)
        if args.command == "targets":
            return _targets()
        return _devices()
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - a compiler bug: a short message, the traceback on demand
        if os.environ.get("KC_DEBUG"):
            raise
        if type(e).__name__ == "InternalCompilerError":  # already says so (backends/llvm)
            return _fail(f"{e}\n(set KC_DEBUG=1 for the traceback)")
        return _fail(f"internal compiler error: {type(e).__name__}: {e}\n"
                     f"(set KC_DEBUG=1 for the traceback; please report it)")
    finally:
        progress.forced = None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
