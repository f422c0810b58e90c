"""The offline default corpus is deterministic, cached, English prose, and trains a loadable tokenizer."""

import json
import os
import re

import pytest
from training_utils import load_script

from linformer_hf.training.corpus import build_docs_corpus


def test_docs_corpus_is_deterministic_cached_and_prose(tmp_path):
    a = build_docs_corpus(str(tmp_path / "a.txt"), max_chars=120_000, max_chars_per_package=20_000)
    b = build_docs_corpus(str(tmp_path / "b.txt"), max_chars=120_000, max_chars_per_package=20_000)
    assert a["sha256"] == b["sha256"] and a["chars"] >= 100_000
    assert len(a["packages"]) >= 5 and all(p["version"] for p in a["packages"])
    again = build_docs_corpus(str(tmp_path / "a.txt"), max_chars=120_000, max_chars_per_package=20_000)
    assert again["cached"] and again["sha256"] == a["sha256"]
    lines = (tmp_path / "a.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(set(lines))  # de-duplicated
    words = " ".join(lines).lower().split()
    for common in ("the", "of", "to", "and", "is"):
        assert words.count(common) > 100
    assert all("](http" not in line for line in lines)


def test_corpus_and_tokenizer_scripts(tmp_path, capsys):
    corpus = tmp_path / "docs.txt"
    load_script("build_corpus").main(
        ["--output", str(corpus), "--max_chars", "60000", "--max_chars_per_package", "15000"]
    )
    train, valid = tmp_path / "docs.train.txt", tmp_path / "docs.valid.txt"
    n_train, n_valid = (len(p.read_text().splitlines()) for p in (train, valid))
    assert n_train + n_valid == len(corpus.read_text().splitlines()) and n_valid > 0
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))  # the splits were renamed into place
    train_tokenizer = load_script("train_tokenizer")
    assert (
        train_tokenizer.main(["--files", str(train), "--vocab_size", "600", "--output_dir", str(tmp_path / "tok")]) == 0
    )
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert len(tok) == 600 and tok.mask_token == "<mask>" and tok.pad_token_id == 1
    ids = tok("The function returns a list.")["input_ids"]
    assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
    assert tok.decode(ids, skip_special_tokens=True) == "The function returns a list."
    assert train_tokenizer.main(["--files", str(tmp_path / "missing.txt"), "--output_dir", str(tmp_path / "t2")]) == 2
    assert "not found" in capsys.readouterr().err and not os.path.exists(tmp_path / "t2")


def test_docstrings_are_those_of_ast_walk_in_its_order(tmp_path):
    """The docstring reader walks statements only: the same docstrings in the same order as a walk of the whole tree,
    for definitions nested in every kind of block and for real files (the corpus, and its sha256, stay the same)."""
    import ast
    import glob
    import textwrap

    from linformer_hf.training import corpus

    def reference(path):
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        return [d for n in ast.walk(tree) if isinstance(n, kinds) for d in [ast.get_docstring(n, clean=True)] if d]

    nested = tmp_path / "nested.py"
    nested.write_text(
        textwrap.dedent('''
        """module"""
        if x:
            def in_if(): "in if"
        else:
            class InElse:
                """in else"""
                def method(self): "method"
        try:
            def in_try(): "in try"
        except E:
            def in_except(): "in except"
        finally:
            async def in_finally(): "in finally"
        with ctx:
            for i in y:
                while z:
                    def deep(): "deep"
        match v:
            case 1:
                def in_case(): "in case"
        def outer():
            "outer"
            class Inner:
                "inner"
            f = lambda: "not a docstring"
    ''')
    )
    found = corpus._docstrings(str(nested))
    assert sorted(found) == sorted(["module", "in if", "in else", "method", "in try", "in except", "in finally", "deep",
                                    "in case", "outer", "inner"])  # fmt: skip
    files = [str(nested), corpus.__file__, ast.__file__, *sorted(glob.glob(os.path.join(os.path.dirname(os.__file__),
                                                                                     "json", "*.py")))]  # fmt: skip
    for path in files:
        assert corpus._docstrings(path) == reference(path), path


def test_the_caps_are_never_passed(tmp_path):
    """A package's paragraphs are taken until the next would pass its cap or the total's (they were checked only
    between files: 9,320 characters of a package capped at 3,000, 21,130 in a corpus capped at 20,000)."""
    corpus = tmp_path / "docs.txt"
    manifest = build_docs_corpus(str(corpus), max_chars=20_000, max_chars_per_package=3_000)
    assert all(0 < package["chars"] <= 3_000 for package in manifest["packages"]), manifest["packages"]
    assert 15_000 < manifest["chars"] <= 20_000
    assert manifest["chars"] == sum(p["chars"] for p in manifest["packages"]) == len(corpus.read_text("utf-8"))
    # a corpus of the earlier builder, past its caps, is not taken from the cache: it is rebuilt within them
    over = json.loads((tmp_path / "docs.txt.manifest.json").read_text())
    over["packages"][0]["chars"] = 9_320
    (tmp_path / "docs.txt.manifest.json").write_text(json.dumps(over))
    again = build_docs_corpus(str(corpus), max_chars=20_000, max_chars_per_package=3_000)
    assert not again["cached"] and again["sha256"] == manifest["sha256"]


def test_build_corpus_never_overwrites_files_it_did_not_build(tmp_path, capsys):
    build_corpus = load_script("build_corpus")
    corpus, train, valid = tmp_path / "docs.txt", tmp_path / "docs.train.txt", tmp_path / "docs.valid.txt"
    small = ["--output", str(corpus), "--max_chars", "20000", "--max_chars_per_package", "3000"]  # >= 50 paragraphs
    corpus.write_text("my own notes\n")
    assert build_corpus.main(small) == 2
    assert "docs.txt is not a corpus this tool built (no docs.txt.manifest.json" in capsys.readouterr().err
    assert corpus.read_text() == "my own notes\n" and sorted(os.listdir(tmp_path)) == ["docs.txt"]
    corpus.unlink()
    train.write_text("my train\n")
    valid.write_text("my valid\n")
    assert build_corpus.main(small) == 2  # the splits alone are someone else's too
    assert "pass --overwrite to replace them" in capsys.readouterr().err
    assert (train.read_text(), valid.read_text()) == ("my train\n", "my valid\n") and not corpus.exists()
    assert build_corpus.main([*small, "--overwrite"]) == 0
    assert "corpus built" in capsys.readouterr().out and train.read_text() != "my train\n"
    # a rerun over its own corpus (the demo's) takes it from the cache and writes its splits again
    assert build_corpus.main(small) == 0
    assert "corpus cached" in capsys.readouterr().out
    assert len(train.read_text().splitlines()) + len(valid.read_text().splitlines()) == len(
        corpus.read_text().splitlines()
    )


def test_build_corpus_refuses_a_folder_and_a_corpus_too_small_to_split(tmp_path, capsys):
    """A folder as --output was "not a corpus this tool built ... pass --overwrite", which then failed too; caps that
    let no paragraph (or fewer than one validation paragraph) in wrote empty splits and said "corpus built"."""
    build_corpus = load_script("build_corpus")
    assert build_corpus.main(["--output", str(tmp_path)]) == 2
    line = capsys.readouterr().err
    assert f"{tmp_path} is a folder: give the corpus file's name" in line and "--overwrite" not in line
    corpus = tmp_path / "docs.txt"
    for caps in (["--max_chars", "10"], ["--max_chars", "2000", "--max_chars_per_package", "1000"]):
        assert build_corpus.main(["--output", str(corpus), *caps]) == 2
        line = capsys.readouterr().err
        assert re.search(r"has \d+ paragraph\(s\) .* too few to hold one out of 50 as validation text: raise", line)
        assert not (tmp_path / "docs.train.txt").exists() and not (tmp_path / "docs.valid.txt").exists()


def test_a_corpus_build_stopped_by_sigterm_leaves_no_partial_file(tmp_path, monkeypatch, send_sigterm):
    from linformer_hf.training import corpus as corpus_module

    clean, calls = corpus_module._clean, []

    def stopped(text):
        calls.append(text)
        if len(calls) == 20:
            send_sigterm()
        return clean(text)

    monkeypatch.setattr(corpus_module, "_clean", stopped)
    with pytest.raises(KeyboardInterrupt):
        load_script("build_corpus").main(["--output", str(tmp_path / "docs.txt")])
    assert os.listdir(tmp_path) == []  # no docs.txt.tmp
