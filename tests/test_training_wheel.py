"""An installed wheel needs no checkout: the training modules run from a fresh venv in a directory outside the repo.

The venv (scripts/check_transformers_versions.py's `isolated_python`) gets the package from `pip install` of this
checkout (built without network: --no-deps --no-build-isolation) and reuses the test interpreter's installed
dependencies through a .pth line, so nothing is downloaded. Everything then runs with the venv's python from a
temporary directory, without PYTHONPATH.
"""

import os
import shutil
import subprocess
import sys

import pytest
from training_utils import OFFLINE_ENV, REPO, WIKITEXT, load_script

from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel_venv")
    # A venv that reuses the test interpreter's installed dependencies (torch, transformers ...) through a plain .pth
    # line, so an editable install of some checkout is not on its path; pip runs from the test interpreter.
    python = load_script("check_transformers_versions").isolated_python(str(root / "venv"))
    # Built from a copy: pip builds in the source tree, and the checkout gets no build/ or egg-info from a test.
    source = root / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            ".ci-envs",
            "outputs",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            ".pytest_cache",
            "tests",
            "docs",
        ),
    )
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",
            "--quiet",
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return python


def run_installed(python, args, cwd, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OFFLINE_ENV)
    return subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_installed_training_modules_run_outside_the_checkout(installed_python, tmp_path):
    where = run_installed(installed_python, ["-c", "import linformer_hf; print(linformer_hf.__file__)"], tmp_path)
    assert where.returncode == 0, where.stderr
    assert os.path.dirname(os.path.dirname(installed_python)) in where.stdout  # the venv's copy, not the checkout
    assert REPO not in where.stdout

    res = run_installed(installed_python, ["-m", "linformer_hf.training.finetune", "--help"], tmp_path)
    assert res.returncode == 0 and "python -m linformer_hf.training.finetune" in res.stdout, res.stderr[-2000:]

    # A tiny pretraining run (the tokenizer is input data here, trained in this process).
    corpus = tmp_path / "text.txt"
    with open(WIKITEXT, encoding="utf-8") as src:
        corpus.write_text("".join(line for _, line in zip(range(300), src)), encoding="utf-8")
    train_bpe_tokenizer(iter_text_files([str(corpus)]), str(tmp_path / "tok"), vocab_size=400, model_max_length=32)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "model: {config: {hidden_size: 16, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 32,\n"
        "                 max_sequence_length: 32, projected_length: 8}}\n"
        "tokenizer: {name_or_path: tok}\n"
        f"data: {{train_files: [{corpus}], block_size: 32, max_eval_blocks: 8}}\n"
        "training: {output_dir: run, max_steps: 2, warmup_steps: 1, per_device_train_batch_size: 4}\n"
    )
    res = run_installed(
        installed_python, ["-m", "linformer_hf.training.pretrain", "--config", "recipe.yaml", "--no_progress"], tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "run" / "final" / "config.json").is_file()
    assert (tmp_path / "run" / "summary_step2.json").is_file()

    # The model card template is package data: the installed copy renders a card for the model just trained.
    card = run_installed(
        installed_python,
        [
            "-c",
            "import sys; from linformer_hf.hub import load_linformer, render_model_card; "
            "print(render_model_card(load_linformer('run/final'), 'user/tiny-linformer', model_dir='run/final'))",
        ],
        tmp_path,
    )
    assert card.returncode == 0, card.stderr[-3000:]
    assert "user/tiny-linformer" in card.stdout and "LinformerForMaskedLM" in card.stdout, card.stdout[:2000]
