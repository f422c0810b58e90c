"""The docs stay true to the tree: every relative link in README.md and the Markdown under docs/ (and the folders'
own READMEs) points at a file that exists, with its #anchor among that file's headings, and every path they name
under configs/, scripts/, experiments/ or benchmarks/ exists."""

import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    {
        os.path.relpath(path, REPO)
        for pattern in ("README.md", "docs/**/*.md", "*/README.md", "model_cards/*.md")
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True)
    }
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:configs|scripts|experiments|benchmarks|src/linformer_hf)/[\w.*/-]*[\w*/])")
CODE_BLOCK = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def heading_anchors(page: str) -> set[str]:
    """GitHub's anchors: headings lower-cased, punctuation dropped, spaces turned into hyphens (duplicates -1, -2)."""
    with open(os.path.join(REPO, page), encoding="utf-8") as fh:
        text = CODE_BLOCK.sub("", fh.read())
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        anchors.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return anchors


def test_pages_are_found():
    assert "README.md" in PAGES and any(page.startswith("docs/") for page in PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    with open(os.path.join(REPO, page), encoding="utf-8") as fh:
        text = fh.read()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(REPO, resolved)):
            broken.append(f"{target} (no {resolved})")
        elif anchor and resolved.endswith(".md") and anchor not in heading_anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved})")
    assert not broken, f"{page}: broken links: {broken}"


@pytest.mark.parametrize("page", PAGES)
def test_named_paths_exist(page):
    with open(os.path.join(REPO, page), encoding="utf-8") as fh:
        text = fh.read()
    missing = sorted(
        {path for path in PATH.findall(text) if not glob.glob(os.path.join(REPO, path.rstrip("/")), recursive=True)}
    )
    assert not missing, f"{page} names paths that do not exist: {missing}"
