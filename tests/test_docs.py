"""The front door and the pages behind it: the README stays a five-minute read that gives the two
commands CI runs, and the docs hold what it leaves out without going stale. Every link resolves
(to a file, and to a heading where it names one), every file a page names exists, every flag of
the command line is in the guide, and every folder of the repository is in the design's layout.

Headings get the ids GitHub gives them: lower case, punctuation but ``-`` and ``_`` dropped, each
space a hyphen, and a repeated id suffixed ``-1``, ``-2``, ...
"""
from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
README_LIMIT = 10 * 1024  # bytes: what a newcomer reads in five minutes, the headline table included

LINK = re.compile(r"\]\(([^)\s]+)\)")
NAMED_FILE = re.compile(r"`((?:specdec|specdec_ui|tests|benchmarks|scripts|notebooks|docs|\.ci)/[^`\s]*)`")


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    return path.read_text()


def _ids(path: Path) -> set[str]:
    seen: Counter = Counter()
    ids = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", _prose(_markdown(path)), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        ids.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return ids


def test_the_readme_is_a_five_minute_read():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes: move detail to docs/ (at most {README_LIMIT})"


def test_the_readme_gives_the_two_front_door_commands_and_ci_runs_its_test_command():
    first_block = re.search(r"^```bash\n(.*?)^```", README.read_text(), flags=re.S | re.M).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()]
    assert commands == ["make app", "make test"]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert ci == ["make test"], "CI runs exactly the README's test command"


@pytest.mark.parametrize("page", PAGES + NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves_to_a_file_and_a_heading(page):
    for link in LINK.findall(_prose(_markdown(page))):
        if re.match(r"[a-z]+:", link):
            continue  # a web address
        target, _, fragment = link.partition("#")
        linked = (page.parent / target).resolve() if target else page
        assert linked.exists(), f"{page.name} links to {target}, which does not exist"
        if fragment:
            assert fragment in _ids(linked), f"{page.name} links to {link}, which has no such heading"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_file_a_page_names_exists(page):
    """A path in backquotes that names a file (a test as ``file::name``) is there; folders may be
    named before they hold anything."""
    for named in NAMED_FILE.findall(page.read_text()):
        path, _, test = named.partition("::")
        if "." not in Path(path).name:
            continue
        found = sorted(ROOT.glob(path))
        assert found, f"{page.name} names {path}, which does not exist"
        if test:
            assert f"def {test}(" in found[0].read_text(), f"{page.name} names {named}, which does not exist"


def test_every_command_line_flag_is_in_the_guide():
    from specdec.cli import build_parser
    guide = (ROOT / "docs" / "guide.md").read_text()
    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and a.dest != "help").choices.values()
    flags = {f for command in commands for f in command._option_string_actions if f.startswith("--")} - {"--help"}
    assert flags and not [f for f in sorted(flags) if f"`{f}`" not in guide]


def test_every_folder_of_the_repository_is_in_the_design_layout():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout (a scratch copy): which folders git tracks is unknown here")
    folders = {str(Path(name).parent) for name in tracked.stdout.splitlines()} - {"."}
    folders |= {str(p) for f in list(folders) for p in Path(f).parents} - {"."}
    design = (ROOT / "docs" / "design.md").read_text()
    assert not [f for f in sorted(folders) if f"| `{f}/` |" not in design], "name each folder in docs/design.md"
