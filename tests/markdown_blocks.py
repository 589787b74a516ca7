"""The fenced code blocks of a Markdown file, for the tests that run the README and the
tutorials as written."""
import importlib.util
import re
from pathlib import Path

# An import of torch, or a use of a torch name a block before it imported.
_TORCH = re.compile(r"^\s*(import torch|from torch)\b|\btorch\.", re.M)

_FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.S | re.M)


def code_blocks(path: Path, lang: str) -> list[tuple[int, str]]:
    """(first line number, body with the fence's indent removed) of each ```lang block."""
    text = Path(path).read_text()
    out = []
    for m in _FENCE.finditer(text):
        if m.group(2) == lang:
            indent = len(m.group(1))
            body = "\n".join(line[indent:] for line in m.group(3).splitlines())
            out.append((text[:m.start()].count("\n") + 2, body + "\n"))
    return out


def needs_torch(blocks: list[tuple[int, str]]) -> bool:
    """Whether any block imports or uses torch (it can only run where torch is)."""
    return any(_TORCH.search(body) for _, body in blocks)


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None
