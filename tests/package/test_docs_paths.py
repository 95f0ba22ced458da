"""Every repository path the docs name exists, and every link lands.

The README is a front door into `docs/`: a moved or deleted file (a removed script
still named in `benchmarks/README.md`, a section moved out of the README that a page
still links to) must fail here, not on a reader. Paths are the words in code spans
and code blocks that start with one of the repository's top folders, and the targets
of relative Markdown links (with their `#anchor`, checked against the target's
headings as GitHub makes anchors).
"""

from __future__ import annotations

import re
from pathlib import Path

#: Words that start with one of these name a repository path.
PREFIXES = (
    ".ci/",
    "benchmarks/",
    "docs/",
    "examples/",
    "speculators_kimi/",
    "tests/",
    "tools/",
    "upstream_patches/",
)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)
#: Placeholders and globs, not paths.
NOT_A_PATH = re.compile(r"[<>*{}$]")
#: Files the build writes (into the wheel, not the tree), and who writes them.
GENERATED = {"speculators_kimi/_build_info.py": "setup.py"}


def docs(root: Path) -> list[Path]:
    return [
        root / "README.md",
        root / "benchmarks" / "README.md",
        *sorted((root / "docs").glob("*.md")),
    ]


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (code blocks left out)."""
    found = set()
    for title in HEADING.findall(FENCE.sub("", markdown)):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        found.add(slug)
    return found


def named_paths(text: str) -> set[str]:
    """The repository paths in a page's code spans and code blocks."""
    words: list[str] = []
    for block in FENCE.findall(text):
        words += block.split()
    for span in CODE_SPAN.findall(FENCE.sub("", text)):
        words += re.split(r"[\s'\"=,;()\[\]]+", span)
    paths = set()
    for word in words:
        word = word.split("::")[0].split("#")[0].rstrip(".,;:)")
        if word.startswith(PREFIXES) and not NOT_A_PATH.search(word):
            paths.add(word)
    return paths


def missing(doc: Path, root: Path) -> list[str]:
    """What `doc` names that is not there: paths, link targets, anchors."""
    text = doc.read_text()
    # Upstream's test layout (tests/unit/...) lives in the tree the build
    # materializes from the pin and the units.
    vendored = root / ".vendored"
    problems = [
        f"{doc.relative_to(root)}: `{path}` does not exist"
        for path in sorted(named_paths(text))
        if not (root / path).exists()
        and not (vendored / path).exists()
        and path not in GENERATED
    ]
    where = doc.relative_to(root)
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if dest.suffix != ".md":  # a folder or a script: no anchors to check
            anchor = ""
        if not dest.exists():
            problems.append(f"{where}: link {target}: no such file")
        elif anchor and anchor not in anchors(dest.read_text()):
            problems.append(f"{where}: link {target}: no such heading")
    return problems


def test_every_path_the_docs_name_exists(project_root: Path) -> None:
    for path, writer in GENERATED.items():
        assert path in (project_root / writer).read_text(), f"{writer}: no {path}"
    pages = docs(project_root)
    assert len(pages) > 5 and all(p.is_file() for p in pages)
    problems = [p for page in pages for p in missing(page, project_root)]
    assert problems == [], "\n".join(problems)


def test_a_made_up_path_fails(project_root: Path, tmp_path: Path) -> None:
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    (tmp_path / "README.md").write_text("# Title\n\n## What you get\n")
    page.write_text(
        "Real: `tools/vendor`, [the front](../README.md#what-you-get).\n"
        "Made up: `tools/vllm_nope.py --flag`, [gone](moved.md),\n"
        "[no heading](../README.md#no-such-section).\n\n"
        "```sh\npython benchmarks/not_a_benchmark.py --json OUT\n```\n"
    )
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "vendor").write_text("")
    assert missing(page, tmp_path) == [
        "docs/page.md: `benchmarks/not_a_benchmark.py` does not exist",
        "docs/page.md: `tools/vllm_nope.py` does not exist",
        "docs/page.md: link moved.md: no such file",
        "docs/page.md: link ../README.md#no-such-section: no such heading",
    ]
