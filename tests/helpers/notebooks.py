"""scripts/render_notebooks.py loaded as a module (scripts/ is no package)."""
from __future__ import annotations

import importlib.util

from helpers import ROOT


def render_script():
    spec = importlib.util.spec_from_file_location("render_notebooks", ROOT / "scripts" / "render_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


