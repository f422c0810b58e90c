"""experiments.context_gain: masked LMs reading different amounts of context score exactly the same masked tokens of
held-out books, by position in the block; a model reading whole blocks scores as pretraining's evaluation does."""

import csv
import json
import os

import pytest
import torch
from test_pretraining_books import books, roberta_source, tokenizer_dir  # noqa: F401  (the books stand-in fixtures)
from training_utils import REPO

from experiments.context_gain import main, score_blocks


@pytest.fixture(scope="module")
def linformer_at_128(roberta_source, tmp_path_factory):  # noqa: F811
    """The 64-position RoBERTa converted to a Linformer at n = 128 (positions copied out), with its tokenizer."""
    from linformer_hf.conversion import convert_checkpoint

    out = tmp_path_factory.mktemp("linformer") / "n128"
    convert_checkpoint(roberta_source, str(out), max_sequence_length=128, projected_length=32)
    return str(out)


def run(books_folder, models, output_dir, *extra):
    return main(
        [
            "--recipe",
            os.path.join(REPO, "configs", "pretrain", "books.yaml"),
            "--models",
            *models,
            "--max_blocks",
            "3",
            "--bucket",
            "32",
            "--output_dir",
            str(output_dir),
            "--data.datasets",
            json.dumps([{"path": books_folder}]),
            "--data.validation_datasets",
            json.dumps([{"path": books_folder, "split": "validation"}]),
            "--data.cache_dir",
            str(output_dir) + "-cache",
            "--data.preprocessing_num_workers",
            "1",
            "--model.config_file",
            os.path.join(REPO, "configs", "model", "books_small.yaml"),
            *extra,
        ]
    )


def test_every_model_scores_the_same_masked_tokens_by_position(books, roberta_source, linformer_at_128, tmp_path):  # noqa: F811
    assert run(books, [roberta_source, linformer_at_128], tmp_path / "out") == 0
    with open(tmp_path / "out" / "summary.json") as fh:
        summary = json.load(fh)
    assert summary["block_size"] == 128 and summary["blocks"] == 3
    short, long = summary["models"]
    assert (short["window"], long["window"]) == (64, 128)
    assert short["masked_tokens"] == long["masked_tokens"] > 0
    with open(tmp_path / "out" / "scores_by_position.csv") as fh:
        rows = list(csv.DictReader(fh))
    by_model = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append((row["bucket_start"], row["masked_tokens"]))
    assert by_model[roberta_source] == by_model[linformer_at_128] and len(by_model[roberta_source]) == 4
    assert all(int(count) > 0 for _, count in by_model[roberta_source])  # past 64 too: the second window


def test_a_whole_block_reader_scores_as_pretraining_evaluates(books, linformer_at_128, tmp_path):  # noqa: F811
    """Windows of the whole block: the mean over the buckets is pretraining's evaluation loss on the same blocks."""
    from accelerate import Accelerator
    from torch.utils.data import DataLoader
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from linformer_hf.training.config import PretrainRecipe, load_recipe
    from linformer_hf.training.data import build_mlm_collator, prepare_held_out_blocks
    from linformer_hf.training.pretraining import evaluate_mlm

    recipe = load_recipe(
        PretrainRecipe,
        os.path.join(REPO, "configs", "pretrain", "books.yaml"),
        extra={
            "model.config_file": os.path.join(REPO, "configs", "model", "books_small.yaml"),
            "data.datasets": [{"path": books}],
            "data.validation_datasets": [{"path": books, "split": "validation"}],
            "data.block_size": 128,
            "data.max_eval_blocks": 3,
            "data.cache_dir": str(tmp_path / "cache"),
        },
    )
    tokenizer = AutoTokenizer.from_pretrained(linformer_at_128)
    blocks = prepare_held_out_blocks(recipe.data, tokenizer)
    model = AutoModelForMaskedLM.from_pretrained(linformer_at_128)
    collator = build_mlm_collator(tokenizer, recipe.data, seed=2)
    batches = [collator([blocks[i]]) for i in range(len(blocks))]
    sums, counts = score_blocks(model, batches, window=128, bucket=32, block_size=128)["all"]
    loader = DataLoader(blocks, batch_size=1, collate_fn=build_mlm_collator(tokenizer, recipe.data, seed=2))
    expected = evaluate_mlm(model, loader, Accelerator(cpu=True))
    assert (sums.sum() / counts.sum()).item() == pytest.approx(expected["eval_loss"], rel=1e-5)
    assert int(counts.sum()) == expected["eval_masked_tokens"]
    assert torch.all(counts > 0)


def test_models_with_other_tokenizers_are_refused(books, roberta_source, tmp_path, capsys):  # noqa: F811
    from transformers import AutoTokenizer

    other = tmp_path / "other"
    AutoTokenizer.from_pretrained(roberta_source).save_pretrained(other)
    with open(other / "tokenizer.json") as fh:
        saved = json.load(fh)
    vocab = saved["model"]["vocab"]
    first, second = list(vocab)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # two ids swapped: the same tokens, other ids
    (other / "tokenizer.json").write_text(json.dumps(saved))
    for name in os.listdir(roberta_source):
        if name.endswith(".safetensors") or name == "config.json":
            os.link(os.path.join(roberta_source, name), other / name)
    assert run(books, [roberta_source, str(other)], tmp_path / "out") == 2
    assert "another tokenizer" in capsys.readouterr().err


def test_windows_score_the_same_tokens_and_a_context_free_model_alike(books, roberta_source, tmp_path):  # noqa: F811
    """--windows: every window size scores the same masked tokens. A model whose outputs cannot depend on other tokens
    or on positions (attention and position embeddings zeroed) gets the same perplexity at every window, so any
    difference left is context; the trained-at-random source model, whose attention is live, does not."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    context_free = tmp_path / "context-free"
    model = AutoModelForMaskedLM.from_pretrained(roberta_source)
    with torch.no_grad():
        model.roberta.embeddings.position_embeddings.weight.zero_()
        for layer in model.roberta.encoder.layer:
            layer.attention.output.dense.weight.zero_()
            layer.attention.output.dense.bias.zero_()
    model.save_pretrained(context_free)
    AutoTokenizer.from_pretrained(roberta_source).save_pretrained(context_free)
    assert run(books, [str(context_free), roberta_source], tmp_path / "out", "--windows", "8", "32") == 0
    with open(tmp_path / "out" / "summary.json") as fh:
        scored = {(os.path.basename(m["model"]), m["window"]): m for m in json.load(fh)["models"]}
    assert sorted(window for name, window in scored if name == "context-free") == [8, 32, 64]
    assert len({(m["masked_tokens"], m["mask_input_tokens"]) for m in scored.values()}) == 1
    assert 0 < next(iter(scored.values()))["mask_input_tokens"] < next(iter(scored.values()))["masked_tokens"]
    free = [scored["context-free", w]["mask_input_perplexity"] for w in (8, 32, 64)]
    assert free == pytest.approx([free[0]] * 3, rel=1e-5)
    live = [scored[os.path.basename(roberta_source), w]["mask_input_perplexity"] for w in (8, 32, 64)]
    assert max(live) / min(live) > 1 + 1e-4  # a barely trained model: small, but 10x the context-free spread


@pytest.mark.parametrize("flag", ["--block_size", "--max_blocks", "--bucket", "--windows", "--batch_size"])
def test_sizes_and_counts_below_one_are_refused_before_any_model_loads(flag, tmp_path, capsys):
    # a bucket or batch of 0 would divide by zero after the models load, a window of 0 score nothing
    with pytest.raises(SystemExit) as stop:
        main(["--models", str(tmp_path / "nothing"), "--output_dir", str(tmp_path / "out"), flag, "0"])
    assert stop.value.code == 2
    assert f"argument {flag}: must be >= 1, got 0" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("option", ["--models", "--tokenizer"])
def test_a_missing_model_or_tokenizer_folder_is_named_before_any_work(option, tmp_path, capsys, monkeypatch):
    """A folder that is not there is said to be missing, on one line, before the output folder is made or anything
    loaded; not transformers' malformed Hub repo id (--tokenizer) nor a folder without config.json (--models)."""
    import transformers

    def work(*args, **kwargs):
        raise AssertionError("work began before the folders were checked")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", work)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    missing = str(tmp_path / "no-such-model")
    argv = ["--models", missing] if option == "--models" else ["--models", str(model), "--tokenizer", missing]
    assert main([*argv, "--output_dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{option}={missing}: no such directory" in err and "Repo id" not in err
    assert not os.path.exists(tmp_path / "out")


def test_a_hub_tokenizer_offline_is_one_line_naming_the_option(tmp_path, capsys, monkeypatch):
    """A --tokenizer Hub name that cannot be fetched offline is one line naming --tokenizer and the name, before the
    output folder is made (before: transformers' message, naming neither)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    argv = ["--models", str(model), "--tokenizer", "nobody-here/no-such-tokenizer", "--output_dir", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tokenizer" in err and "nobody-here/no-such-tokenizer" in err


def test_two_runs_into_one_folder_never_replace_or_mix_each_others_results(
    books,  # noqa: F811
    roberta_source,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    """Two runs into one empty --output_dir at once (both found it empty): the one that ended second wrote its files
    over the first's, or one's CSV beside the other's summary. Now the second is refused and the first's kept."""
    from experiments import context_gain

    out = tmp_path / "out"
    scoring = context_gain.score_blocks

    def another_run_ends(*args, **kwargs):  # the other run writes its results while this one scores
        out.mkdir(exist_ok=True)
        (out / "summary.json").write_text('{"the other run": true}')
        return scoring(*args, **kwargs)

    monkeypatch.setattr(context_gain, "score_blocks", another_run_ends)
    assert run(books, [roberta_source], out) == 2
    assert "filled by another run" in capsys.readouterr().err.splitlines()[-1]  # one line, after the loading bars
    assert os.listdir(out) == ["summary.json"] and "the other run" in (out / "summary.json").read_text()
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]


def test_what_a_run_cannot_do_is_said_not_dropped(books, roberta_source, tmp_path, capsys):  # noqa: F811
    """A --windows size longer than every model reads was dropped without a word, and a --max_blocks beyond the
    held-out text was cut short noted only in summary.json; a run that failed left its output folder, empty."""
    assert run(books, [roberta_source], tmp_path / "out", "--windows", "8", "100") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--windows [100]: no model reads windows that long (the longest is 64" in err
    assert not (tmp_path / "out").exists()
    assert run(books, [roberta_source], tmp_path / "all", "--max_blocks", "100000") == 0
    with open(tmp_path / "all" / "summary.json") as fh:
        blocks = json.load(fh)["blocks"]
    assert f"scoring {blocks} blocks: the held-out text holds no more (--max_blocks 100000)" in capsys.readouterr().out
