"""The import rules that keep lowering's stages and paths apart, read from the source.

Every module under lowering/ is parsed with `ast`, never imported, and each of its
imports, function-local ones included, is resolved to a module of plait.lowering (named
below it: "graph.kernels") or to what it names outside ("llvmlite.ir"). A *code
generator* is any module of nvptx/, gemm/ and stream/ but the paths' plans (PLANS, plain
data the CPU executors read too). The rules:

- graph/ (stage 2), tileir/ (stages 3-4) and ir/ (the one IR, built from the paths' plans)
  import no code generator and not llvmlite;
  nor does cpu/, the executors that are the emitters' spec (graph/ may read a plan: the
  kernel graph asks gemm.tiles for split-K);
- llvmlite is imported only in nvptx/, gemm/ and stream/, and nowhere else in plait;
- stages come in order: graph/ imports nothing of tileir/, ir/, cpu/, nvptx/ or stream/;
  tileir/ nothing of ir/ or cpu/; ir/ (the one IR) nothing of cpu/; target, artifact and limits import no folder, and no module
  imports pipeline;
- nvptx/, shared by every emitter, imports nothing of one path (gemm/, stream/), and the
  paths import nothing of each other;
- an sm80 module imports no sm90 one nor Hopper's ptx_async, an sm90 module no sm80 one,
  and only pipeline picks an architecture's emitter;
- at import time (module-level imports, followed) no module but a code generator loads
  llvmlite, but for the debts in KNOWN_LEAKS, which must still be debts;
- every folder is a package listed in pyproject.toml, and every import of plait.lowering
  names a file that exists.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOWERING = ROOT / "lowering"
PKG = "plait.lowering"
FOLDERS = ("graph", "tileir", "ir", "cpu", "nvptx", "gemm", "stream")
TOP = {"__init__", "pipeline", "artifact", "target", "limits"}
EMITTING = {"nvptx", "gemm", "stream"}      # the folders where llvmlite may be imported
PLANS = {"gemm.plan", "gemm.tiles", "stream.plan"}   # what a path compiles: no code generated
# Modules whose module-level imports load llvmlite although they emit nothing. Each is
# a debt: when it is paid this test fails until the entry goes.
KNOWN_LEAKS: dict[str, str] = {}    # module -> why it still loads llvmlite on import


def _name(path: Path) -> str:
    parts = path.relative_to(LOWERING).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


@functools.cache
def modules() -> dict[str, Path]:
    """'graph.kernels' -> its file; a folder's __init__ is named by the folder."""
    return {_name(p): p for p in sorted(LOWERING.rglob("*.py")) if "__pycache__" not in p.parts}


class Import(NamedTuple):
    target: str      # below plait.lowering ("graph.kernels") when `inside`, else as written
    line: int
    local: bool      # inside a function
    inside: bool


def _walk(tree: ast.AST):
    """(import node, inside a function) for every import statement."""
    stack = [(tree, False)]
    while stack:
        node, local = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, local
            scope = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            stack.append((child, local or scope))


def resolve(module: str, path: Path, node: ast.AST) -> list[str]:
    """The absolute names one import statement of `module` reads: a name imported from a
    package of plait.lowering is that package's module when one exists, else the package."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    pkg = f"{PKG}.{module}" if path.name == "__init__.py" and module != "__init__" else \
        f"{PKG}.{module}".rpartition(".")[0]
    here = pkg.split(".")
    base = node.module if not node.level else \
        ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if _below(f"{base}.{a.name}") in modules() else base
            for a in node.names]


def _below(name: str) -> str | None:
    """'plait.lowering.graph.kernels' -> 'graph.kernels'; None outside plait.lowering."""
    if name == PKG:
        return "__init__"
    return name[len(PKG) + 1:] if name.startswith(PKG + ".") else None


@functools.cache
def imports() -> dict[str, list[Import]]:
    """module -> each import it makes, function-local ones included."""
    out = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        out[name] = [Import(_below(t) or t, node.lineno, local, _below(t) is not None)
                     for node, local in _walk(tree)
                     for t in dict.fromkeys(resolve(name, path, node))]
    return out


def folder(module: str) -> str:
    head = module.split(".")[0]
    return head if head in FOLDERS else ""


def is_llvmlite(imp: Import) -> bool:
    return not imp.inside and imp.target.split(".")[0] == "llvmlite"


def generator(module: str) -> bool:
    return folder(module) in EMITTING and module not in PLANS


def arch(module: str) -> str:
    return next((a for a in ("sm80", "sm90") if a in module.rpartition(".")[2]), "")


def check(rule) -> None:
    """Fails listing 'lowering/x.py:line imports y: why' for each import `rule(module, imp)`
    refuses (returns a reason for)."""
    out = []
    for m, found in imports().items():
        for imp in found:
            why = rule(m, imp)
            if why:
                where = modules()[m].relative_to(ROOT)
                local = " (in a function)" if imp.local else ""
                out.append(f"{where}:{imp.line} imports {imp.target}{local}: {why}")
    assert not out, "\n".join(out)


def test_lowering_is_the_folders_and_the_top():
    stray = [m for m in modules() if m not in TOP and folder(m) == ""]
    assert not stray, f"modules outside the stage and path folders: {stray}"
    for f in FOLDERS:
        init = LOWERING / f / "__init__.py"
        assert init.is_file(), f"lowering/{f}/ is not a package"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "\n" not in doc.strip(), f"lowering/{f}/__init__.py: one-line docstring"
    deeper = [m for m in modules() if m.count(".") > 1]
    assert not deeper, f"folders inside the folders: {deeper}"


def test_every_folder_is_a_listed_package():
    """An editable install finds an unlisted folder; a wheel silently leaves it out."""
    text = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r"^packages\s*=\s*\[[^\]]*\]", text, re.M).group(0)
    listed = set(re.findall(r'"([\w.]+)"', packages))
    assert re.search(rf'"{re.escape(PKG)}"\s*=\s*"lowering"', text), "package-dir: plait.lowering?"
    on_disk = {f"{PKG}.{p.parent.relative_to(LOWERING).as_posix().replace('/', '.')}"
               for p in LOWERING.rglob("__init__.py") if p.parent != LOWERING}
    assert on_disk - listed == set(), f"not in pyproject's packages: {sorted(on_disk - listed)}"
    assert {p for p in listed if p.startswith(PKG + ".")} - on_disk == set(), "listed, not on disk"


def test_imports_of_lowering_resolve():
    check(lambda m, imp: "no such module" if imp.inside and imp.target not in modules() else None)


def test_llvmlite_only_in_the_emitting_folders():
    check(lambda m, imp: "llvmlite outside nvptx/, gemm/ and stream/"
          if is_llvmlite(imp) and folder(m) not in EMITTING else None)
    others = [str(p.relative_to(ROOT)) for d in ("plait", "dsl", "schedule", "autodiff", "runtime")
              for p in (ROOT / d).rglob("*.py")
              if re.search(r"^\s*(import|from)\s+llvmlite\b", p.read_text(), re.M)]
    assert not others, f"llvmlite imported outside lowering/: {others}"


@pytest.mark.parametrize("stage", ["graph", "tileir", "ir", "cpu"])
def test_stages_and_executors_import_no_code_generator(stage):
    def rule(m, imp):
        if folder(m) != stage:
            return None
        if is_llvmlite(imp):
            return "llvmlite, in a stage that generates no code"
        return "a code generator" if imp.inside and generator(imp.target) else None
    check(rule)


def test_stages_come_in_order():
    later = {"graph": {"tileir", "ir", "cpu", "nvptx", "stream"}, "tileir": {"ir", "cpu"},
             "ir": {"cpu"}}

    def rule(m, imp):
        if not imp.inside:
            return None
        if imp.target == "pipeline":
            return "pipeline is the top: nothing imports it"
        if m in {"artifact", "target", "limits"} and folder(imp.target):
            return "every stage reads the base modules, so they read no stage"
        return "a later stage" if folder(imp.target) in later.get(folder(m), ()) else None
    check(rule)


def test_shared_layer_and_paths_stay_apart():
    apart = {"nvptx": {"gemm", "stream"}, "gemm": {"stream"}, "stream": {"gemm"}}
    check(lambda m, imp: f"{folder(m)}/ must not read {folder(imp.target)}/"
          if imp.inside and folder(imp.target) in apart.get(folder(m), ()) else None)


def test_architectures_stay_apart():
    def rule(m, imp):
        t = imp.target if imp.inside else ""
        if arch(m) == "sm80" and (arch(t) == "sm90" or t == "nvptx.ptx_async"):
            return "an sm_80 emitter reads sm_90 code"
        if arch(m) == "sm90" and arch(t) == "sm80":
            return "an sm_90a emitter reads sm_80 code"
        if arch(t) and not arch(m) and m != "pipeline":
            return "only pipeline picks an architecture's emitter"
        return None
    check(rule)


def _chain_to_llvmlite(module: str) -> list[str]:
    """Module-level imports from `module` to one that imports llvmlite there; [] if none."""
    seen, stack = {module}, [[module]]
    while stack:
        chain = stack.pop()
        found = [i for i in imports()[chain[-1]] if not i.local]
        if any(map(is_llvmlite, found)):
            return chain
        for i in found:
            if i.inside and i.target in modules() and i.target not in seen:
                seen.add(i.target)
                stack.append(chain + [i.target])
    return []


def test_no_llvmlite_at_import_time_outside_the_emitters():
    chains = {m: _chain_to_llvmlite(m) for m in modules() if not generator(m)}
    leaks = {m: " -> ".join(c) for m, c in chains.items() if c}
    new = {m: c for m, c in leaks.items() if m not in KNOWN_LEAKS}
    assert not new, f"load llvmlite on import, through these module-level imports: {new}"
    paid = sorted(set(KNOWN_LEAKS) - set(leaks))
    assert not paid, f"no longer load llvmlite on import: remove {paid} from KNOWN_LEAKS"
