"""The docs run: every fenced code block of README.md and docs/*.md is compiled, run or checked here,
so that a doc cannot drift from the code.

What each block's tag means:

- untagged or ``kc``: kernel-language source, compiled for nvptx (sm_90; no GPU needed). A block whose
  first line is ``// examples/NAME.kc`` must also show that file's lines (in order; "abridged" blocks
  may leave lines out).
- ``python``: run on the default target (the CPU here; CUDA where a GPU is), from the repository root;
  the Python blocks of one file share one namespace, in order, as a reader who pastes them would.
- ``sh``: needs a marker (below): the README's set-up commands are checked against ``.ci/run``, which
  runs them; any other shell block is a skip with its reason.
- ``text``: output or a diagram, never run (unless an ``output of`` marker checks it).

A marker is an HTML comment right before a block (a reader of the rendered page does not see it):

- ``<!-- doc-test: skip REASON -->``: not run (keep these few).
- ``<!-- doc-test: gpu -->``: a Python block that needs a CUDA GPU (and torch): a ``gpu`` test.
- ``<!-- doc-test: params T=f32 VEC=4 -->``: compile-time values for a kernel block.
- ``<!-- doc-test: setup`` + Python lines + ``-->``: run before a Python block (the arrays it uses).
- ``<!-- doc-test: ci -->``: a shell block whose every line ``.ci/run`` runs, verbatim (then
  ``|| fail ...`` at most).
- ``<!-- doc-test: output of kc ARGS`` + a .kc file's text + ``-->``: the block is (the start of) what
  ``kc ARGS`` prints on stderr, run in a folder holding that file under the name ARGS gives.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
from pathlib import Path

import pytest

from kcompiler import cli
from kcompiler.pipeline import Source, emit
from ..paths import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(?P<ind>[ \t]*)```(?P<tag>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=ind)```[ \t]*$", re.M | re.S)


@dataclasses.dataclass
class Block:
    """One fenced block: its file, the line of its opening fence (1-based), tag, text (the fence's
    indentation removed), and the directive and payload of the marker before it ('' when none)."""
    doc: Path
    line: int
    tag: str
    body: str
    directive: str = ""
    payload: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def _dedent(text: str, indent: str) -> str:
    return "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip()
                     for line in text.splitlines())


def blocks(doc: Path) -> list[Block]:
    """The fenced code blocks of ``doc``, each with the ``doc-test`` marker right before it."""
    text = doc.read_text()
    out = []
    for m in _FENCE.finditer(text):
        b = Block(doc, text.count("\n", 0, m.start()) + 1, m["tag"], _dedent(m["body"], m["ind"]))
        before = text[:m.start()].rstrip()
        start = before.rfind("<!--")
        if before.endswith("-->") and before[start + 4:].lstrip().startswith("doc-test:"):
            first, _, rest = before[start + 4:-3].lstrip()[len("doc-test:"):].partition("\n")
            b.directive, b.payload = first.strip(), _dedent(rest, m["ind"]).strip("\n")
        out.append(b)
    return out


ALL = [b for doc in DOCS for b in blocks(doc)]


def _ids(kind: set[str]) -> list:
    return [pytest.param(b, id=b.where) for b in ALL if b.tag in kind]


def _skip_if_marked(b: Block) -> None:
    if b.directive.startswith("skip"):
        pytest.skip(f"{b.where}: {b.directive[4:].strip() or 'marked skip'}")


def test_blocks_are_found_and_tagged():
    """Every block has a tag this test knows, and skips stay few."""
    assert len(ALL) >= 15, [b.where for b in ALL]
    unknown = [f"{b.where}: ```{b.tag}" for b in ALL if b.tag not in ("", "kc", "python", "sh", "text")]
    assert not unknown, f"blocks of a kind test_docs.py cannot run (tag them or teach it): {unknown}"
    skipped = [b.where for b in ALL if b.directive.startswith("skip")]
    assert len(skipped) <= 3, f"too many doc blocks skipped: {skipped}"
    bad = [b.where for b in ALL if b.directive and b.directive.split()[0] not in
           ("skip", "gpu", "params", "setup", "ci", "output")]
    assert not bad, f"unknown doc-test markers at {bad}"


@pytest.mark.parametrize("b", _ids({"", "kc"}))
def test_kernel_block_compiles(b: Block):
    """Each kernel-language block compiles for nvptx (every kernel and fn it has, with the marker's
    compile-time values); a block naming an examples/ file shows that file's lines."""
    _skip_if_marked(b)
    params = dict(cli._param(p) for p in b.directive.split()[1:]) if b.directive.startswith("params") else {}
    emit(Source(b.body, b.where, str(ROOT)), "asm", "nvptx", arch="sm_90", comptime=params)
    first = b.body.splitlines()[0]
    m = re.match(r"//\s*(examples/\S+\.kc)", first)
    if m:
        lines = [ln.rstrip() for ln in (ROOT / m[1]).read_text().splitlines()]
        at = 0
        for ln in b.body.splitlines()[1:]:
            assert ln.rstrip() in lines[at:], f"{b.where}: {ln!r} is not in {m[1]} (in this order)"
            at = lines.index(ln.rstrip(), at) + 1
        if "abridged" not in first:
            shown = [ln for ln in lines if ln and not ln.lstrip().startswith("//")]
            assert shown == [ln.rstrip() for ln in b.body.splitlines()[1:] if ln.strip()], \
                f"{b.where} differs from {m[1]}; write '(abridged)' if it leaves lines out on purpose"


_namespaces: dict[Path, tuple[int, dict]] = {}


def _run_python(b: Block) -> None:
    """Runs the Python blocks of b's file up to b (the earlier ones once per session), each after
    its setup marker, in one namespace, from the repository root."""
    doc_blocks = [x for x in blocks(b.doc) if x.tag == "python"]
    upto, ns = _namespaces.get(b.doc, (0, {"__name__": "__doc_test__"}))
    if upto > doc_blocks.index(b):
        upto, ns = 0, {"__name__": "__doc_test__"}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for i in range(upto, doc_blocks.index(b) + 1):
            x = doc_blocks[i]
            if x.directive.startswith("skip") or (x.directive == "gpu" and x is not b):
                continue
            if x.directive == "setup":
                exec(compile(x.payload, f"{x.where} (setup)", "exec"), ns)  # noqa: S102
            # Padded so that a traceback's line numbers are the doc's own.
            exec(compile("\n" * x.line + x.body, str(x.doc.relative_to(ROOT)), "exec"), ns)  # noqa: S102
            _namespaces[b.doc] = (i + 1, ns)
    finally:
        os.chdir(cwd)


_PY = [b for b in ALL if b.tag == "python"]


@pytest.mark.parametrize("b", [pytest.param(b, id=b.where) for b in _PY if b.directive != "gpu"])
def test_python_block_runs(b: Block):
    """Each Python block runs without an error (on the CPU target here, on CUDA where a GPU is)."""
    _skip_if_marked(b)
    _run_python(b)


@pytest.mark.gpu
@pytest.mark.parametrize("b", [pytest.param(b, id=b.where) for b in _PY if b.directive == "gpu"])
def test_python_block_runs_on_gpu(b: Block):
    """The Python blocks that need a CUDA GPU, after the blocks before them."""
    pytest.importorskip("torch")
    _run_python(b)
    import torch

    torch.cuda.synchronize()


@pytest.mark.parametrize("b", _ids({"sh"}))
def test_shell_block_is_run_by_ci(b: Block):
    """A shell block is either run by .ci/run, every line verbatim, or a marked skip."""
    _skip_if_marked(b)
    assert b.directive == "ci", f"{b.where}: a shell block needs a doc-test marker (ci or skip REASON)"
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    for line in filter(None, map(str.strip, b.body.splitlines())):
        # verbatim, or verbatim followed by what .ci/run does when it fails
        assert any(ln == line or ln.startswith(line + " || ") for ln in ci), \
            f"{b.where}: .ci/run does not run {line!r}"


@pytest.mark.parametrize("b", [pytest.param(b, id=b.where) for b in ALL if b.directive.startswith("output of")])
def test_output_block_is_what_kc_prints(b: Block, tmp_path, capsys, monkeypatch):
    """A block marked ``output of kc ARGS`` is what kc prints for the marker's file."""
    args = shlex.split(b.directive[len("output of"):])
    assert args[0] == "kc", f"{b.where}: 'output of' takes a kc command"
    name = next(a for a in args if a.endswith(".kc"))
    (tmp_path / name).write_text(b.payload + "\n")
    monkeypatch.chdir(tmp_path)
    rc = cli.main(args[1:] + (["-o", os.devnull] if args[1] == "compile" else []))
    err = capsys.readouterr().err
    assert rc == 1
    assert b.body.strip("\n") in err, f"{b.where} shows what kc no longer prints:\n{err}"
