"""The one IR below the kernel graph: typed values with layouts, ops, `for` bodies (nodes.py)."""
