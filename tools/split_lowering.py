#!/usr/bin/env python3
"""Split the flat lowering/ into folders that show the compiler's stages and paths (issue 11).

Run from the root of any checkout of main: `python tools/split_lowering.py`. It

1. refuses, listing them, if lowering/ holds a top-level module MOVES does not place
   (one added on main since the table was written: give it a place, run again);
2. says so and exits if the tree is already split;
3. moves every module with `git mv` and writes each folder's `__init__.py`;
4. rewrites the references in every tracked text file but itself: imports (relative,
   absolute, function-local), dotted names ("plait.lowering.kernels.X", monkeypatch
   targets), paths ("lowering/kernels.py") in code, docs and comments, and, for modules
   whose name changes, bare mentions in comments, docstrings and markdown prose
   ("`gemm_tiles.warp_grid`" becomes "`gemm.tiles.warp_grid`");
5. lists the new sub-packages in pyproject.toml, so that a wheel carries them;
6. checks that no old name survives and that every import of plait.lowering resolves.

Nothing is committed. Only git and Python's standard library are used. `--rewrite-only`
fixes stale references on a split tree (a branch rebased onto it) and moves nothing.
"""
from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

PKG = "plait.lowering"
SELF = "tools/split_lowering.py"   # holds the old names on purpose: never rewritten

# Each folder's __init__.py docstring: the stage or path it holds.
FOLDERS = {
    "graph": "Stage 2: the kernel graph and the rewrites that cut and shape its kernels.",
    "tileir": "Stages 3-4: tile programs, and the thread programs a layout makes of them.",
    "cpu": "The CPU executors and the op formulas they run: the spec of every emitter.",
    "nvptx": "The LLVM/PTX layer all emitters share, and the generic thread-program emitter.",
    "gemm": "The tensor-core contraction path: plan and tiles, sm_80 and sm_90a emitters.",
    "stream": "The streamed-kernel path (online softmax, streamed sums): plan, sm_80 emitter.",
}

# Every module of the flat lowering/ -> its place, dotted below plait.lowering.
MOVES = {
    # the top: the stage table, what the runtime receives, the target facts every stage reads
    "__init__": "__init__", "pipeline": "pipeline", "artifact": "artifact",
    "target": "target", "llvm_limits": "limits",   # the target table's limits, no LLVM
    # stage 2: the kernel graph
    "kernels": "graph.kernels", "contraction": "graph.contraction",
    "contraction_staging": "graph.contraction_staging",
    "invariant_staging": "graph.invariant_staging", "rotary_staging": "graph.rotary_staging",
    "stream_staging": "graph.stream_staging", "streaming": "graph.streaming",
    "streaming_sums": "graph.streaming_sums", "sums_merge": "graph.sums_merge",
    "policy": "graph.policy",
    "layout": "graph.layout",   # the kernel graph plans grids with it; stage 4 reads it too
    # stages 3-4: tile and thread programs
    "tile": "tileir.tile", "tile_stream": "tileir.tile_stream",
    "tile_stream_sums": "tileir.tile_stream_sums", "thread": "tileir.thread",
    "rotate_load": "tileir.rotate_load",
    # the CPU executors and the formulas they run
    "emulate": "cpu.emulate", "gemm_emulate": "cpu.gemm_emulate",
    "stream_emulate": "cpu.stream_emulate", "mathfns": "cpu.mathfns",
    # the shared LLVM/PTX layer and the generic emitter
    "llvm_backend": "nvptx.backend", "llvm_fragments": "nvptx.fragments",
    "llvm_reduce": "nvptx.reduce", "llvm_rotate": "nvptx.rotate", "ops_llvm": "nvptx.ops",
    "ptx_memory": "nvptx.ptx_memory", "ptx_mma": "nvptx.ptx_mma",
    "ptx_async": "nvptx.ptx_async",
    "gemm_common": "nvptx.kernel",   # the kernel frame: the gemm and stream emitters use it
    # the tensor-core contraction path
    "gemm_plan": "gemm.plan", "gemm_tiles": "gemm.tiles", "gemm_copy": "gemm.copy",
    "gemm_epilogue": "gemm.epilogue", "gemm_sm80": "gemm.sm80", "gemm_sm90": "gemm.sm90",
    # the streamed-kernel path
    "stream_plan": "stream.plan", "stream_copy": "stream.copy", "stream_mma": "stream.mma",
    "stream_masks": "stream.masks", "stream_sm80": "stream.sm80",
}
MOVED = {old: new for old, new in MOVES.items() if old != new}
# Renamed modules: their old names all hold "_", so no English word is ever taken for one.
RENAMED = {old: new for old, new in MOVED.items() if old != new.rpartition(".")[2]}
TEXT_SUFFIXES = {".py", ".md", ".txt", ".rst", ".toml", ".cfg", ".ini", ".yaml", ".yml",
                 ".sh", ".json", ""}


def _any(names) -> str:
    return "|".join(sorted(map(re.escape, names), key=len, reverse=True))


PATH_RE = re.compile(rf"(?<!tests/)(?<![\w.-])lowering/({_any(MOVED)})\.py\b")
DOTTED_RE = re.compile(rf"(?<![\w.])plait\.lowering\.({_any(MOVED)})\b")
_NAMES = r"\w+(?:\s+as\s+\w+)?(?:\s*,\s*\w+(?:\s+as\s+\w+)?)*"
PKG_IMPORT_RE = re.compile(rf"\bfrom\s+plait\.lowering\s+import\s+"
                           rf"(?:\((?P<p>[\w\s,]+)\)|(?P<n>{_NAMES}))")
BARE_RE = re.compile(rf"(?<![\w./])({_any(RENAMED)})(\.py)?\b")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                          text=True).stdout


def inside(name: str | None) -> bool:
    return name is not None and (name == PKG or name.startswith(PKG + "."))


# --- the tree before the move -------------------------------------------------------------

def check_state(root: Path) -> str:
    """'flat' when the split can run, 'split' when it is done; exits with the reason else."""
    low = root / "lowering"
    top = {p.stem for p in low.glob("*.py")}
    folders = [f for f in FOLDERS if (low / f / "__init__.py").exists()]
    waiting = sorted(set(MOVED) & top)
    if len(folders) == len(FOLDERS) and not waiting:
        return "split"
    if folders:
        sys.exit(f"lowering/ is partly split (folders {folders}, still on top: {waiting}); "
                 "restore it with `git reset --hard` and run again")
    unknown = sorted(top - set(MOVES))
    if unknown:
        sys.exit(f"lowering/ holds modules the table does not place; add them to MOVES in {SELF}:\n"
                 + "\n".join(f"  lowering/{m}.py" for m in unknown))
    if set(FOLDERS) & top:
        sys.exit(f"modules named like a new folder: {sorted(set(FOLDERS) & top)}")
    return "flat"


def package_dirs(root: Path) -> dict[str, str]:
    """pyproject's package-dir, package -> folder (read by regex: tomllib is 3.11+)."""
    text = (root / "pyproject.toml").read_text()
    line = re.search(r"^package-dir\s*=\s*\{(.*)\}", text, re.M).group(1)
    dirs = dict(re.findall(r'"([\w.]+)"\s*=\s*"([\w./-]+)"', line))
    if dirs.get(PKG) != "lowering":
        sys.exit(f'pyproject.toml does not map "{PKG}" to "lowering"')
    return dirs


def module_name(rel: str, dirs: dict[str, str]) -> tuple[str | None, bool]:
    """The dotted name of the file at repository path `rel`, and whether it is a package."""
    folder = max((d for d in dirs.values() if rel.startswith(d + "/")), key=len, default=None)
    if folder is None or not rel.endswith(".py"):
        return None, False
    parts = [next(p for p, d in dirs.items() if d == folder), *rel[len(folder) + 1:-3].split("/")]
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def move(root: Path) -> dict[str, str]:
    """git mv every module; returns its new repository path -> its old dotted name."""
    low = root / "lowering"
    for folder, doc in FOLDERS.items():
        (low / folder).mkdir(exist_ok=True)
        (low / folder / "__init__.py").write_text(f'"""{doc}"""\n')
        git(root, "add", f"lowering/{folder}/__init__.py")
    old_of = {}
    for old, new in MOVED.items():
        if not (low / f"{old}.py").exists():
            print(f"  not on this checkout, skipped: lowering/{old}.py")
            continue
        dst = "lowering/" + new.replace(".", "/") + ".py"
        git(root, "mv", f"lowering/{old}.py", dst)
        old_of[dst] = f"{PKG}.{old}"
    return old_of


def new_name(name: str) -> str:
    """plait.lowering.<old>[.rest] -> plait.lowering.<new>[.rest]; any other name as it is."""
    if not name.startswith(PKG + "."):
        return name
    head, dot, rest = name[len(PKG) + 1:].partition(".")
    return f"{PKG}.{MOVED[head]}{dot}{rest}" if head in MOVED else name


# --- imports in Python source -----------------------------------------------------------------

def absolute(node: ast.ImportFrom, me: str, is_pkg: bool) -> str:
    """The module a `from ... import` reads, written absolute, as module `me` sees it."""
    if not node.level:
        return node.module
    here = (me if is_pkg else me.rpartition(".")[0]).split(".")
    return ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))


def relative(me: str, is_pkg: bool, target: str) -> str:
    """`target` spelled relative to module `me` ('..nvptx')."""
    here, there = (me if is_pkg else me.rpartition(".")[0]).split("."), target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(there[common:])


def _line_starts(src: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer("\n", src)]


def _offsets(src: str):
    """(line, byte column), as ast counts them -> index into `src`."""
    starts = _line_starts(src)
    return lambda row, col: starts[row - 1] + len(src[starts[row - 1]:starts[row - 1] + col]
                                                  .encode()[:col].decode())


def _groups(base: str, names: list[ast.alias]) -> dict[str, list[tuple[str, str | None]]]:
    """New package -> (name, alias) for `from <base> import names`; a renamed module keeps
    its old name as its alias, so the code that uses it is unchanged."""
    if base != PKG:
        return {new_name(base): [(a.name, a.asname) for a in names]}
    groups: dict[str, list] = {}
    for a in names:
        parent, _, leaf = f"{PKG}.{MOVED.get(a.name, a.name)}".rpartition(".")
        alias = a.asname or (a.name if leaf != a.name else None)
        groups.setdefault(parent, []).append((leaf, alias))
    return groups


def _listed(names) -> str:
    return ", ".join(n + (f" as {a}" if a else "") for n, a in names)


def import_edits(src: str, tree: ast.AST, new: str | None, is_pkg: bool,
                 old: str | None, where: str) -> list[tuple[int, int, str]]:
    """(start, end, text) for each `from ... import` of a moved module, or relative in a
    moved file. Relative stays relative inside plait.lowering; absolute stays absolute."""
    at, edits = _offsets(src), []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or (node.level and old is None):
            continue
        base = absolute(node, old, is_pkg)
        if not (inside(base) or (node.level and old != new)):
            continue
        groups = _groups(base, node.names)
        spell = {b: relative(new, is_pkg, b) if node.level and inside(new) and inside(b) else b
                 for b in groups}
        start, end = at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)
        span = src[start:end]
        (first, names), = list(groups.items())[:1]
        if len(groups) == 1 and names == [(a.name, a.asname) for a in node.names]:
            head = re.match(r"from(.*?)\bimport\b", span, re.S)   # names unchanged: the base only
            if "".join(head.group(1).replace("\\\n", "").split()) != spell[first]:
                edits.append((start, start + head.end(), f"from {spell[first]} import"))
            continue
        if "#" in span:
            print(f"  {where}:{node.lineno}: comments inside this import were dropped")
        indent = src[src.rfind("\n", 0, start) + 1:start]
        sep = "\n" + indent if not indent.strip() else "; "
        edits.append((start, end, sep.join(f"from {spell[b]} import {_listed(ns)}"
                                           for b, ns in groups.items())))
    return edits


def apply(src: str, edits) -> str:
    for start, end, text in sorted(edits, reverse=True):
        src = src[:start] + text + src[end:]
    return src


# --- text rules -------------------------------------------------------------------------------

def _pkg_import(m: re.Match) -> str:
    """`from plait.lowering import kernels, mathfns` as text, one import per new package."""
    names = [ast.alias(*(re.split(r"\s+as\s+", n.strip()) + [None])[:2])
             for n in (m.group("p") or m.group("n")).split(",") if n.strip()]
    if not any(a.name in MOVED for a in names):
        return m.group(0)
    indent = m.string[m.string.rfind("\n", 0, m.start()) + 1:m.start()]
    sep = "\n" + indent if not indent.strip() else "; "   # a line of its own stays one per line
    return sep.join(f"from {p} import {_listed(ns)}" for p, ns in _groups(PKG, names).items())


def text_rules(text: str) -> str:
    """Paths, dotted names and package imports: right anywhere, in code or in prose."""
    text = PATH_RE.sub(lambda m: "lowering/" + MOVED[m.group(1)].replace(".", "/") + ".py", text)
    text = DOTTED_RE.sub(lambda m: f"{PKG}.{MOVED[m.group(1)]}", text)
    return PKG_IMPORT_RE.sub(_pkg_import, text)


def bare_rule(text: str) -> str:
    """A renamed module's bare name, for prose only: `gemm_tiles.x` -> `gemm.tiles.x`."""
    def one(m):
        new = RENAMED[m.group(1)]
        return new.replace(".", "/") + ".py" if m.group(2) else new
    return BARE_RE.sub(one, text)


def prose_spans(src: str, tree: ast.AST) -> list[tuple[int, int]]:
    """Index ranges of the comments and docstrings of Python source."""
    scopes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    doc_rows = {node.body[0].lineno for node in ast.walk(tree)
                if isinstance(node, scopes) and node.body and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)
                and isinstance(node.body[0].value.value, str)}
    starts, spans = _line_starts(src), []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT or tok.type == tokenize.STRING and tok.start[0] in doc_rows:
            (r0, c0), (r1, c1) = tok.start, tok.end
            spans.append((starts[r0 - 1] + c0, starts[r1 - 1] + c1))
    return spans


def rewrite_python(src: str, new: str | None, is_pkg: bool, old: str | None, where: str) -> str:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        print(f"  {where}: does not parse; paths and dotted names only")
        return text_rules(src)
    src = text_rules(apply(src, import_edits(src, tree, new, is_pkg, old, where)))
    return apply(src, [(s, e, bare_rule(src[s:e])) for s, e in prose_spans(src, ast.parse(src))])


_FENCE = re.compile(r"^ *(```|~~~).*?^ *\1[ \t]*$", re.S | re.M)


def rewrite_markdown(text: str) -> str:
    """Text rules everywhere; bare names outside fenced code only."""
    text, out, last = text_rules(text), [], 0
    for m in _FENCE.finditer(text):
        out += [bare_rule(text[last:m.start()]), m.group(0)]
        last = m.end()
    return "".join(out + [bare_rule(text[last:])])


def tracked_texts(root: Path):
    """(path, text) of every tracked UTF-8 text file but this script."""
    for rel in git(root, "ls-files").splitlines():
        path = root / rel
        if rel == SELF or path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        try:
            yield rel, path.read_bytes().decode("utf-8")   # bytes: line endings kept as they are
        except UnicodeDecodeError:
            continue


def rewrite_tree(root: Path, old_of: dict[str, str], dirs: dict[str, str]) -> list[str]:
    """Rewrite every tracked text file; returns the paths changed."""
    changed = []
    for rel, text in tracked_texts(root):
        if rel.endswith(".py"):
            new, is_pkg = module_name(rel, dirs)
            result = rewrite_python(text, new, is_pkg, old_of.get(rel, new), rel)
        else:
            result = rewrite_markdown(text) if rel.endswith(".md") else text_rules(text)
        if result != text:
            (root / rel).write_bytes(result.encode("utf-8"))
            changed.append(rel)
    return changed


# --- pyproject.toml and the checks --------------------------------------------------------------

def add_packages(root: Path) -> bool:
    """List plait.lowering.<folder> just after plait.lowering in [tool.setuptools] packages."""
    path = root / "pyproject.toml"
    text = path.read_text()
    m = re.search(r"^packages\s*=\s*\[[^\]]*\]", text, re.M)
    missing = [f'"{PKG}.{f}"' for f in FOLDERS if f'"{PKG}.{f}"' not in m.group(0)]
    if not missing:
        return False
    listed = m.group(0).replace(f'"{PKG}"', ", ".join([f'"{PKG}"', *missing]), 1)
    path.write_text(text[:m.start()] + listed + text[m.end():])
    return True


def _exists(root: Path, name: str) -> bool:
    stem = root.joinpath("lowering", *name.split(".")[2:])
    return stem.with_suffix(".py").is_file() or (stem / "__init__.py").is_file()


def unresolved(root: Path, rel: str, text: str, dirs: dict[str, str]):
    """(line, name) of each plait.lowering module an import names that no file holds
    (a name imported from a package must be a module or be bound in its __init__)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    me, is_pkg = module_name(rel, dirs)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (me or not node.level):
            base = absolute(node, me, is_pkg)
            init = root.joinpath("lowering", *base.split(".")[2:], "__init__.py")
            bound = init.read_text() if inside(base) and init.is_file() else None
            wanted = [base] + [f"{base}.{a.name}" for a in node.names
                               if bound is not None and not re.search(rf"\b{a.name}\b", bound)]
        else:
            continue
        yield from ((node.lineno, n) for n in wanted if inside(n) and not _exists(root, n))


def survivors(root: Path, dirs: dict[str, str]) -> list[str]:
    """Old paths and names still written anywhere, and imports that resolve to no file."""
    found = []
    for rel, text in tracked_texts(root):
        found += [f"{rel}: {m.group(0)}" for rx in (PATH_RE, DOTTED_RE) for m in rx.finditer(text)]
        found += [f"{rel}: {m.group(0)}" for m in PKG_IMPORT_RE.finditer(text)
                  if _pkg_import(m) != m.group(0)]
        if rel.endswith(".py"):
            found += [f"{rel}:{n}: {name}" for n, name in unresolved(root, rel, text, dirs)]
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--allow-dirty", action="store_true", help="run on uncommitted changes")
    ap.add_argument("--rewrite-only", action="store_true",
                    help="on a split tree: rewrite stale references, move nothing")
    args = ap.parse_args()
    root = args.root.resolve()
    dirs = package_dirs(root)
    state = check_state(root)
    if state == "split" and not args.rewrite_only:
        print("lowering/ is already split; nothing to do (--rewrite-only fixes stale references)")
        return
    if state == "flat" and args.rewrite_only:
        sys.exit("--rewrite-only is for a split tree; this one is flat")
    if not args.allow_dirty and git(root, "status", "--porcelain", "--untracked-files=no").strip():
        sys.exit("the working tree has uncommitted changes; commit them or pass --allow-dirty")
    old_of = move(root) if state == "flat" else {}
    changed = rewrite_tree(root, old_of, dirs) + (["pyproject.toml"] if add_packages(root) else [])
    print(f"moved {len(old_of)} modules into {len(FOLDERS)} folders, rewrote {len(changed)} files")
    left = survivors(root, dirs)
    if left:
        sys.exit("old names survive (fix them, or undo with `git reset --hard`):\n  "
                 + "\n  ".join(left))
    print("no old path survives and every import of plait.lowering resolves; "
          "review `git status`, run the tests, commit")


if __name__ == "__main__":
    main()
