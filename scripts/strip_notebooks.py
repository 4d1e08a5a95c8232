"""Clear outputs and execution counts of notebooks in place (``make strip-notebooks``)."""
from __future__ import annotations

import sys

import nbformat


def strip(path: str) -> bool:
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            cell.outputs, cell.execution_count, changed = [], None, True
        if cell.get("metadata", {}).pop("execution", None) is not None:
            changed = True
    if changed:
        nbformat.write(nb, path)
    return changed


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(("stripped " if strip(p) else "clean    ") + p)
