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

from linformer_hf.outputs import check_output_file, write_json_atomic

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


def split_paths(output_path: str) -> tuple[str, str]:
    """The train and validation splits written beside the corpus: ``<stem>.train.txt``, ``<stem>.valid.txt``."""
    stem = output_path[:-4] if output_path.endswith(".txt") else output_path
    return stem + ".train.txt", stem + ".valid.txt"


def check_corpus_output(output_path: str, overwrite: bool = False, flag: str = "--overwrite") -> None:
    """Before any work: the corpus and its splits may be written at ``output_path``. Files there are replaced only
    where they are a corpus this tool built (its manifest beside it), or with ``overwrite``; creates the folder."""
    paths = [output_path, *split_paths(output_path)]
    if os.path.isdir(output_path):  # --overwrite would not replace it either
        raise IsADirectoryError(f"{output_path} is a folder: give the corpus file's name, e.g. {output_path}/docs.txt.")
    if not overwrite and not os.path.isfile(output_path + ".manifest.json"):
        foreign = [path for path in paths if os.path.exists(path)]
        if foreign:
            it, is_ = ("it", "is") if len(foreign) == 1 else ("they", "are")
            raise FileExistsError(
                f"{', '.join(foreign)} {is_} not a corpus this tool built (no {os.path.basename(output_path)}"
                f".manifest.json beside {output_path}): {it} {is_} never overwritten silently. Give another --output, "
                f"or pass {flag} to replace {'them' if it == 'they' else 'it'}."
            )
    for path in paths:
        check_output_file(path, overwrite=True)  # a file, in a folder that can be written


def _paragraphs(dist):
    """A distribution's paragraphs of prose, in order: its description's, then each .py file's docstrings' (sorted
    by path; a file is read only when the paragraphs before it were taken)."""
    description = dist.metadata.get_payload() or dist.metadata["Description"] or ""
    yield from _clean(description)
    for item in sorted(str(f) for f in (dist.files or []) if str(f).endswith(".py")):
        for text in _docstrings(str(dist.locate_file(item))):
            yield from _clean(text)


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _cached(output_path: str, manifest_path: str, max_chars: int, max_chars_per_package: int) -> dict | None:
    """The manifest of a corpus built with these caps that is still whole (its sha256), within them, or None."""
    if not (os.path.isfile(output_path) and os.path.isfile(manifest_path)):
        return None
    with open(manifest_path, encoding="utf-8") as fh:
        manifest = json.load(fh)
    if (manifest.get("max_chars"), manifest.get("max_chars_per_package")) != (max_chars, max_chars_per_package):
        return None
    # a corpus of an earlier version of this tool could pass its caps: it is rebuilt
    within = manifest.get("chars", max_chars + 1) <= max_chars and all(
        package["chars"] <= max_chars_per_package for package in manifest.get("packages", [])
    )
    if not within or manifest.get("sha256") != _sha256(output_path):
        return None
    manifest["cached"] = True
    return manifest


def build_docs_corpus(
    output_path: str,
    max_chars: int = 5_000_000,
    max_chars_per_package: int = 150_000,
    force: bool = False,
    overwrite: bool = False,
) -> dict:
    """Write the corpus (one paragraph a line) to ``output_path`` unless it is cached; return its manifest.

    At most ``max_chars_per_package`` characters (newlines counted) of a package and ``max_chars`` in all: a package's
    paragraphs are taken in order until the next would pass either. ``force``: rebuild a cached corpus.
    ``overwrite``: replace a file at ``output_path`` that is not a corpus this tool built (refused otherwise)."""
    manifest_path = output_path + ".manifest.json"
    check_corpus_output(output_path, overwrite)
    if not force:
        cached = _cached(output_path, manifest_path, max_chars, max_chars_per_package)
        if cached:
            return cached
    dists = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name and name not in dists:
            dists[name] = dist
    seen: set[str] = set()
    total = 0
    packages = []
    tmp = output_path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for name in sorted(dists):
                if total >= max_chars:
                    break
                dist = dists[name]
                budget = min(max_chars_per_package, max_chars - total)
                used = 0
                for para in _paragraphs(dist):
                    digest = hashlib.sha1(para.encode()).hexdigest()
                    if digest in seen:
                        continue
                    if used + len(para) + 1 > budget:  # the caps are never passed: this package ends here
                        break
                    seen.add(digest)
                    out.write(para + "\n")
                    used += len(para) + 1
                if used:
                    packages.append({"name": name, "version": dist.version, "chars": used})
                    total += used
    except BaseException:  # Ctrl-C, or SIGTERM turned into it: no partial corpus is left beside the output
        os.remove(tmp)
        raise
    manifest = {
        "path": output_path,
        "chars": total,
        "paragraphs": len(seen),
        "sha256": _sha256(tmp),
        "max_chars": max_chars,
        "max_chars_per_package": max_chars_per_package,
        "packages": packages,
        "cached": False,
    }
    # The manifest first, then the corpus under its name: a stop between the two leaves a manifest whose sha256 the
    # file there does not have (rebuilt next time), never a corpus without its manifest (refused as not this tool's).
    write_json_atomic(manifest_path, manifest)
    os.replace(tmp, output_path)
    return manifest
