"""The offline default corpus: English documentation of the installed Python packages.

It exists on any machine with this project's environment, needs no network, and puts no third-party text in the
repository: package descriptions (the long description in each distribution's metadata, usually its README) and the
docstrings of modules, classes and functions, read with ``ast`` (nothing is imported or executed). Distributions and
files are visited in sorted order and texts are de-duplicated, so the corpus is a deterministic function of the
installed package versions (recorded in a manifest beside it). It is small, technical and English-ish: good for a
smoke-scale demo, not a substitute for BookCorpus + Wikipedia.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from collections import deque
from importlib import metadata

_WORD = re.compile(r"[A-Za-z]{2,}")
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"<?https?://\S+>?")
_MARKUP = re.compile(r"(`+|\*\*|:[a-z]+:|\\)")
# the nodes that hold statements, and so may hold a module's, class's or function's docstring
_HOLDS_STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def _clean(text: str) -> list[str]:
    """Split a description/docstring into paragraphs of English prose (drop code, tables, doctest lines)."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in block.splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith((">>>", "...", "|", "```", "..", ":", "#", "$", "<"))]
        para = " ".join(lines)
        para = _MARKUP.sub("", _URL.sub("", _LINK.sub(r"\1", _IMAGE.sub("", para))))
        para = re.sub(r"\s+", " ", para).strip()
        if len(para) < 80 or not para.isascii():
            continue
        words = _WORD.findall(para)
        # mostly words, few symbols: prose rather than code or parameter tables
        if len(words) < 12 or sum(map(len, words)) < 0.65 * len(para):
            continue
        paragraphs.append(para)
    return paragraphs


def _docstrings(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError, RecursionError):
        return []
    # ast.walk's order (breadth first), over statements only: a module, class or function is never inside an
    # expression, and skipping the expressions (most of the tree) makes this several times faster
    out, queue = [], deque([tree])
    while queue:
        node = queue.popleft()
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                out.append(doc)
        queue.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, _HOLDS_STATEMENTS))
    return out


def build_docs_corpus(
    output_path: str, max_chars: int = 5_000_000, max_chars_per_package: int = 150_000, force: bool = False
) -> dict:
    """Write the corpus (one paragraph a line) to ``output_path`` unless it is cached; return its manifest."""
    manifest_path = output_path + ".manifest.json"
    if not force and os.path.isfile(output_path) and os.path.isfile(manifest_path):
        with open(manifest_path, encoding="utf-8") as fh:
            manifest = json.load(fh)
        if manifest.get("max_chars") == max_chars and manifest.get("max_chars_per_package") == max_chars_per_package:
            manifest["cached"] = True
            return manifest
    dists = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name and name not in dists:
            dists[name] = dist
    seen: set[str] = set()
    total = 0
    packages = []
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    tmp = output_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        for name in sorted(dists):
            if total >= max_chars:
                break
            dist = dists[name]
            texts = []
            description = dist.metadata.get_payload() or dist.metadata["Description"] or ""
            texts.append(description)
            files = sorted(str(f) for f in (dist.files or []) if str(f).endswith(".py"))
            budget = min(max_chars_per_package, max_chars - total)
            used = 0
            for item in [None] + files:
                if used >= budget:
                    break
                if item is not None:
                    texts = _docstrings(str(dist.locate_file(item)))
                for text in texts:
                    for para in _clean(text):
                        digest = hashlib.sha1(para.encode()).hexdigest()
                        if digest in seen:
                            continue
                        seen.add(digest)
                        out.write(para + "\n")
                        used += len(para) + 1
                texts = []
            if used:
                packages.append({"name": name, "version": dist.version, "chars": used})
                total += used
    os.replace(tmp, output_path)
    with open(output_path, "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    manifest = {
        "path": output_path,
        "chars": total,
        "paragraphs": len(seen),
        "sha256": sha,
        "max_chars": max_chars,
        "max_chars_per_package": max_chars_per_package,
        "packages": packages,
        "cached": False,
    }
    with open(manifest_path, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
    return manifest
