"""The ``kc`` command.

    kc compile FILE [--target nvptx|amdgcn|cpu|cuda|hip] [--arch ARCH]
                    [--emit ast|ir|llvm|asm|obj] [-o OUT] [-P NAME=VALUE]... [--kernel NAME]
                    [-O 0-3] [--fast-math] [--check-bounds]
    kc check FILE [--target ...] [--arch ...]
    kc devices

Exit status: 0 success, 1 the program was rejected (the located messages on stderr) or an output
could not be written, 2 bad usage. Outputs are written atomically: a failed compile leaves no file.
Without ``--emit``, ``-o``'s suffix picks the stage (``.cubin``/``.hsaco``/``.o`` a binary, ``.ll`` LLVM
IR, anything else assembly). Text stages go to stdout unless ``-o`` is given; ``--emit obj`` writes
``FILE.cubin`` (nvptx), ``FILE.hsaco`` (amdgcn) or ``FILE.o`` (cpu) beside the source unless ``-o`` is
given.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from . import __version__
from .diagnostics import CompileError

_TARGETS = ("nvptx", "amdgcn", "cpu", "cuda", "hip")
_STAGES = ("ast", "ir", "llvm", "asm", "obj")
_BINARY_SUFFIX = {"nvptx": ".cubin", "amdgcn": ".hsaco", "cpu": ".o"}
#: The stage an output file's suffix asks for when --emit is not given.
_STAGE_OF_SUFFIX = {".cubin": "obj", ".hsaco": "obj", ".co": "obj", ".o": "obj", ".ll": "llvm",
                    ".ptx": "asm", ".s": "asm", ".kcir": "ir"}


def _param(text: str) -> tuple[str, Any]:
    from .pipeline import parse_param_value

    name, eq, value = text.partition("=")
    if not eq or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name.strip(), parse_param_value(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{name.strip()}: {e}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kc", description="kcompiler: a GPU kernel compiler.")
    p.add_argument("--version", action="version", version=f"kc {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def target_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("file", metavar="FILE", help="a .kc source file")
        sp.add_argument("--target", "-t", default="nvptx", choices=_TARGETS,
                        help="what to compile for (default nvptx; cuda = nvptx, hip = amdgcn)")
        sp.add_argument("--arch", "-a", default=None,
                        help="chip: sm_80, sm_86, sm_89, sm_90, sm_90a (default: the GPU present, "
                             "else sm_90); amdgcn: gfx90a, gfx942, gfx950, gfx1100, gfx1201 (default: "
                             "the GPU present, else gfx942); cpu: an LLVM CPU name, native or host-w64")

    c = sub.add_parser("compile", help="compile a file and print or write one stage",
                       description="Compile FILE and print or write one stage of the pipeline.")
    target_args(c)
    c.add_argument("--emit", "-e", default=None, choices=_STAGES,
                   help="stage to output (default: what -o's suffix names, .cubin/.hsaco/.o → obj, "
                        ".ll → llvm; else asm: PTX for nvptx, AMDGCN assembly for amdgcn)")
    c.add_argument("-o", "--output", default=None,
                   help="output file ('-' for stdout; default: stdout for text, FILE.cubin/.o for obj)")
    c.add_argument("-P", "--param", dest="params", action="append", type=_param, default=[],
                   metavar="NAME=VALUE",
                   help="compile-time parameter (int, true/false or a type such as f16); repeatable")
    c.add_argument("--kernel", "-k", default=None, help="compile only this kernel")
    c.add_argument("-O", dest="opt_level", type=int, default=3, choices=range(4), metavar="{0-3}",
                   help="LLVM optimisation level (default 3)")
    c.add_argument("--fast-math", action="store_true", help="approximate f32 division and sqrt, "
                   "allow reassociation")
    c.add_argument("--check-bounds", action="store_true",
                   help="check every access to host-passed memory (cpu target)")

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
    r.add_argument("--target", "-t", default="auto", choices=_TARGETS + ("auto",),
                   help="where to run (default auto: a GPU if present, else cpu)")
    r.add_argument("--arch", "-a", default=None, help="chip (as for compile)")
    r.add_argument("--shared", type=int, default=0, help="bytes of dynamic shared memory")
    r.add_argument("--printf", choices=("vprintf", "hostcall"), default=None,
                   help="nvptx: how printf reaches the host (default vprintf; hostcall runs the "
                        "protocol AMD kernels use)")
    r.add_argument("-P", "--param", dest="params", action="append", type=_param, default=[],
                   metavar="NAME=VALUE", help="compile-time parameter; repeatable")
    r.add_argument("--out", "-o", default="kc-out", help="folder for the arrays after the run "
                   "(default kc-out; '-' saves nothing)")
    r.add_argument("args", nargs="*", metavar="ARG", help="NAME=VALUE for each kernel parameter")

    sub.add_parser("devices", help="list the devices kernels can run on here (CUDA and AMD GPUs, the "
                                   "CPU emulator)")
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
    from . import compile_file
    from .runtime.device import LaunchError
    from .runtime.runargs import ArgError, parse_run_args, save_arrays

    try:
        if args.printf and args.target not in ("nvptx", "cuda", "auto"):
            parser.error("--printf chooses between vprintf and hostcall on nvptx; amdgcn and cpu "
                         "always print through hostcall")
        opts = {"printf": args.printf} if args.printf else None
        module = compile_file(args.file, target=args.target, arch=args.arch, target_options=opts)
        kernel = getattr(module, args.kernel)
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {args.file}: {getattr(e, 'strerror', None) or e}")
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except AttributeError as e:
        return _fail(str(e))
    except ValueError as e:
        parser.error(str(e))
    try:
        values = parse_run_args(kernel.params, args.args)
    except ArgError as e:
        parser.error(str(e))
    try:
        kernel[args.grid, args.block](*values, shared=args.shared, **dict(args.params))
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except (TypeError, ValueError, LaunchError) as e:
        return _fail(str(e))
    sys.stdout.flush()
    if args.out != "-":
        for line in save_arrays(args.out, kernel.params, values):
            print(line, file=sys.stderr)
    return 0


def _fail(msg: str) -> int:
    print(f"kc: error: {msg}", file=sys.stderr)
    return 1


def _read(path: str) -> Any:
    from .pipeline import Source

    return Source.from_file(path)


def _write(out: str, data: str | bytes) -> None:
    from .runtime.cache import atomic_write

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
    from .backends import canonical_target
    from .backends.target import CompileOptions
    from .pipeline import emit

    target = canonical_target(args.target)
    params = dict(args.params)
    options = CompileOptions(opt_level=args.opt_level, check_bounds=args.check_bounds,
                             fast_math=args.fast_math)
    try:
        source = _read(args.file)
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {args.file}: {getattr(e, 'strerror', None) or e}")
    try:
        tgt = _target(target, args.arch, parser)
        if tgt is None:
            return 1
        stage = args.emit or _STAGE_OF_SUFFIX.get(Path(args.output or "").suffix, "asm")
        out = emit(source, stage, tgt, kernel=args.kernel, params=params, options=options)
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except ValueError as e:  # -P names no kernel declares
        parser.error(str(e))
    except RuntimeError as e:
        if type(e).__name__ == "CubinUnavailable":  # no nvJitLink and no ptxas here
            return _fail(f"cannot write a cubin: {e}; --emit asm writes PTX, which the CUDA driver "
                         f"loads as it is")
        if type(e).__name__ in ("LinkerUnavailable", "LinkError"):  # the AMD code object's ld.lld
            return _fail(f"cannot write the code object: {e}")
        raise
    if args.output is not None:
        dest = args.output
    elif isinstance(out, bytes):
        dest = str(Path(args.file).with_suffix(_BINARY_SUFFIX.get(target, ".o")))
    else:
        dest = "-"
    try:
        _write(dest, out)
    except OSError as e:
        return _fail(f"cannot write {dest}: {e.strerror or e}")
    return 0


def _target(target: str, arch: str | None, parser: argparse.ArgumentParser) -> Any:
    from .pipeline import resolve_target

    try:
        return resolve_target(target, arch)
    except ValueError as e:  # unknown arch
        parser.error(str(e))


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .backends import canonical_target
    from .frontend import check
    from .pipeline import load

    try:
        source = _read(args.file)
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {args.file}: {getattr(e, 'strerror', None) or e}")
    try:
        tgt = _target(canonical_target(args.target), args.arch, parser)
        if tgt is None:
            return 1
        check(load(source, keep_going=True), tgt)
    except CompileError as e:
        print(e.render(), file=sys.stderr)
        return 1
    return 0


def _devices() -> int:
    from . import devices

    for d in devices():
        print(f"{d.target:6} {d.arch:10} {getattr(d, 'name', type(d).__name__)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kc`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    # kc run's NAME=VALUE arguments may follow options: argparse leaves those for us.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command != "run" or any(x.startswith("-") for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.args += extra
    try:
        if args.command == "compile":
            return _compile(args, parser)
        if args.command == "check":
            return _check(args, parser)
        if args.command == "run":
            return _run(args, parser)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
