"""The parser's cache of trees (kcompiler/frontend/parser.py, ``_TREES``): a text parsed before under
the same path gives the same tree, which is only sound while no stage changes a tree after parsing;
a text with errors is parsed (and reported) every time."""
from __future__ import annotations

import pickle

import pytest

from kcompiler.diagnostics import CompileError, Diagnostics, SourceFile
from kcompiler.frontend import parser as P
from kcompiler.frontend.program import stdlib_dir
from kcompiler.pipeline import emit, emit_file, Source

# An import (std.mx), printf (std.hostcall, std.printf_buffer), an accurate math builtin (std.math),
# a generic fn with a compile-time parameter, a comptime loop and a struct: the frontend's paths that
# read a tree.
PROGRAM = """
import std.mx as mx
struct Pair { a: f32, b: i32 }
fn twice[N: i32](x: f32) -> f32 { var s = x; for i in comptime range(0, N) { s = s + x; } return s; }
kernel k[T: type](x: ptr<T>, n: i32) {
    let i = i32(thread_id.x);
    if i < n {
        let p = Pair { a: f32(x[i]), b: i };
        x[i] = T(twice[3](sin(p.a)) + f32(p.b) * mx.pow2(2));
        printf("%d %f\\n", i, p.a);
    }
}
"""


def _spy(monkeypatch) -> list[tuple[str, object, bytes]]:
    """Every tree the parser builds in this test, with its pickled form when it was built."""
    built = []
    parse = P._parse

    def spy(file, diag):
        tree = parse(file, diag)
        if tree is not None:
            built.append((file.path, tree, pickle.dumps(tree)))
        return tree

    monkeypatch.setattr(P, "_parse", spy)
    monkeypatch.setattr(P, "_TREES", type(P._TREES)())  # start empty, so every tree is built here
    return built


@pytest.mark.parametrize("target", ["nvptx", "cpu", "amdgcn"])
def test_compiles_leave_the_trees_as_they_were(monkeypatch, target):
    built = _spy(monkeypatch)
    emit(Source(PROGRAM, "<cache>", "."), "llvm", target, comptime={"T": "bf16"})
    # a standard-library kernel with compile-time parameters, through the same trees again
    emit_file(stdlib_dir() / "merge_states.kc", "llvm", target, kernel="merge_states",
              comptime=dict(T="f32", OUT="bf16"))
    paths = [p for p, _, _ in built]
    assert "<cache>" in paths and "<std>/math.kc" in paths and "<std>/hostcall.kc" in paths, paths
    assert len(paths) == len(set(paths)), "a text was parsed twice"
    changed = [p for p, tree, before in built if pickle.dumps(tree) != before]
    assert not changed, f"compiling changed the trees of {changed}"


def test_same_text_same_tree_new_text_new_tree():
    a = P.parse(SourceFile("<c1>", "kernel k(x: ptr<f32>) { x[0] = 1.0; }"), Diagnostics())
    assert P.parse(SourceFile("<c1>", "kernel k(x: ptr<f32>) { x[0] = 1.0; }"), Diagnostics()) is a
    b = P.parse(SourceFile("<c1>", "kernel k(x: ptr<f32>) { x[0] = 2.0; }"), Diagnostics())
    assert b is not a and b is not None


def test_errors_are_reported_at_every_compile():
    bad = "kernel k(x: ptr<f32>) { x[0] = ; }"
    messages = []
    for _ in range(2):
        with pytest.raises(CompileError) as e:
            emit(Source(bad, "<bad>", "."), "ir", "cpu")
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "<bad>:1:" in messages[0]
    assert ("<bad>", bad) not in P._TREES


def test_the_cache_is_bounded():
    for i in range(P._TREES_KEPT + 5):
        P.parse(SourceFile(f"<many{i}>", f"kernel k(x: ptr<f32>) {{ x[0] = {i}.0; }}"), Diagnostics())
    assert len(P._TREES) <= P._TREES_KEPT
