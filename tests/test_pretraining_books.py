"""Pretraining on corpora read as Hub datasets: the paper's BookCorpus + Wikipedia recipe and the books recipe, run
through local folders in the Hub's layout (parquet shards and a README declaring configs and splits) that stand in
for the Hub names; held-out validation books; missing, corrupt and unreachable sources named before any work; and
tokenising a large corpus in cached pieces."""

import glob
import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from training_utils import (
    DATA,
    REPO,
    TINY_MODEL,
    claimed_by_another_driver,
    signal_this_process_once_started,
    stoppable_child,
    write_hub_dataset,
)

from linformer_hf.training import data as pretraining_data
from linformer_hf.training.config import ConfigError, PretrainRecipe, load_recipe
from linformer_hf.training.data import prepare_pretraining_data
from linformer_hf.training.pretraining import run_pretraining
from linformer_hf.training.tokenizer import train_bpe_tokenizer

BOOKS = os.path.join(DATA, "gutenberg")
MARKER = "Zqxjvalidationmarker"  # written into every held-out book of the stand-in, and into no training book
BOOK_CHARACTERS = 12_000  # each stand-in book: real text cut to about 3,000 tokens


def _real_books(count: int) -> list[dict]:
    """The first ``count`` books of the real validation shard (one row group read), cut to `BOOK_CHARACTERS`."""
    table = pq.ParquetFile(os.path.join(BOOKS, "validation.parquet")).read_row_group(0)
    rows = table.slice(0, count).to_pylist()
    assert len(rows) == count
    return [{**row, "text": row["text"][:BOOK_CHARACTERS]} for row in rows]


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """A folder like ../shared/data/gutenberg: 6 training books in 2 shards, 2 held-out books with a marker."""
    real = _real_books(8)
    held_out = [{**book, "text": f"{MARKER} {book['text']} {MARKER}"} for book in real[6:]]
    folder = tmp_path_factory.mktemp("books") / "gutenberg"
    return write_hub_dataset(folder, {"train": [real[:3], real[3:6]], "validation": [held_out]})


@pytest.fixture(scope="module")
def tokenizer_dir(books, tmp_path_factory):
    out = tmp_path_factory.mktemp("tokenizer")
    texts = (
        row["text"] for path in glob.glob(os.path.join(books, "*.parquet")) for row in pq.read_table(path).to_pylist()
    )
    train_bpe_tokenizer(texts, str(out), vocab_size=1000, model_max_length=512)
    return str(out)


def books_recipe(books_folder, tokenizer_dir, output_dir, **overrides):
    extra = {
        "model.config_file": os.path.join(REPO, "configs", "model", "books_small.yaml"),  # the recipe's, from any cwd
        "data.datasets": [{"path": books_folder, "split": "train"}],
        "data.validation_datasets": [{"path": books_folder, "split": "validation"}],
        "tokenizer.name_or_path": tokenizer_dir,
        "training.output_dir": str(output_dir),
        "data.cache_dir": str(output_dir) + "-cache",
        "data.preprocessing_num_workers": 1,
    }
    extra.update(overrides)
    return load_recipe(PretrainRecipe, os.path.join(REPO, "configs", "pretrain", "books.yaml"), extra=extra)


def books_plan(books_folder, tokenizer_dir, output_dir, runs, **shared):
    """A books plan (experiments/books_pretraining.py) over stand-in books, written to <output_dir>.yaml and loaded:
    the books recipe's small model, its training books and held-out books, with `shared` (recipe keys) on top."""
    import yaml

    from experiments import books_pretraining

    plan = {
        "recipe": os.path.join(REPO, "configs", "pretrain", "books.yaml"),
        "output_dir": str(output_dir),
        "shared": {
            "model.config_file": os.path.join(REPO, "configs", "model", "books_small.yaml"),
            "tokenizer.name_or_path": tokenizer_dir,
            "data.datasets": [{"path": books_folder, "split": "train"}],
            "data.validation_datasets": [{"path": books_folder, "split": "validation"}],
            **shared,
        },
        "runs": runs,
    }
    path = f"{output_dir}.yaml"
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(plan, fh)
    return books_pretraining.load_plan(path)


def test_validation_reads_the_held_out_books_and_training_never_does(books, tokenizer_dir, tmp_path):
    from transformers import AutoTokenizer

    recipe = books_recipe(books, tokenizer_dir, tmp_path / "run", **{"data.block_size": 256})
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    prepared = prepare_pretraining_data(recipe.data, tokenizer, seed=1)
    train_text = [tokenizer.decode(ids) for ids in prepared["train"]["input_ids"]]
    validation_text = [tokenizer.decode(ids) for ids in prepared["validation"]["input_ids"]]
    assert not any(MARKER in text for text in train_text)
    # Both held-out books, start to end (64 blocks of 256 hold both): their 4 markers, but for the last one when it
    # falls in the packed tail of under 256 tokens, which no block holds.
    assert sum(text.count(MARKER) for text in validation_text) >= 3
    assert len(prepared["train"]) > 50 and all(len(ids) == 256 for ids in prepared["train"]["input_ids"])


@pytest.mark.parametrize("streaming", [False, True], ids=["map-style", "streaming"])
def test_books_recipe_trains_at_the_models_n(books, tokenizer_dir, tmp_path, streaming):
    """data.block_size null: blocks are the model's n long, so one override sets a run's length."""
    summary = run_pretraining(
        books_recipe(
            books,
            tokenizer_dir,
            tmp_path / "run",
            **{
                "model.config.max_sequence_length": 128,
                "model.config.projected_length": 32,
                "data.streaming": streaming,
                "data.max_eval_blocks": 4,
                "training.max_steps": 2,
                "training.warmup_steps": 1,
                "training.per_device_train_batch_size": 2,
                "training.eval_steps": 2,
                "training.report_to": [],
            },
        ),
        show_progress=False,
    )
    import json

    with open(os.path.join(summary["final_dir"], "config.json")) as fh:
        assert json.load(fh)["max_sequence_length"] == 128
    with open(os.path.join(summary["final_dir"], "tokenizer_config.json")) as fh:
        assert json.load(fh)["model_max_length"] == 128  # trained at 512: truncation follows the model's n
    assert summary["final_eval"]["perplexity"] > 1


def _bookwiki_stand_ins(root, tokenizer_dir) -> None:
    """Local folders named like the paper recipe's Hub names, in the Hub's layout: BookCorpus (a sentence a row),
    Wikipedia's 20231101.en config (an article a row, in a config folder), and RoBERTa's tokenizer."""
    real = _real_books(4)
    sentences = [{"text": s.strip() + "."} for book in real[:2] for s in book["text"].split(".") if s.strip()]
    write_hub_dataset(os.path.join(root, "bookcorpus", "bookcorpus"), {"train": [sentences]})
    articles = [{"id": str(i), "url": "", "title": b["title"], "text": b["text"]} for i, b in enumerate(real[2:])]
    write_hub_dataset(os.path.join(root, "wikimedia", "wikipedia"), {"train": [articles]}, config_name="20231101.en")
    shutil.copytree(tokenizer_dir, os.path.join(root, "FacebookAI", "roberta-base"))


@pytest.mark.parametrize("name", ["paper_bookwiki.yaml", "paper_bookwiki_roberta.yaml"])
def test_the_paper_recipe_runs_through_local_stand_ins_for_its_hub_names(name, tokenizer_dir, tmp_path, monkeypatch):
    """configs/pretrain/paper_bookwiki*.yaml as shipped (its data, tokenizer and optimiser), with only the model, the
    length, the batch and the step count made small: reading both corpora by their Hub names works."""
    _bookwiki_stand_ins(tmp_path, tokenizer_dir)
    monkeypatch.chdir(tmp_path)
    path = os.path.join(REPO, "configs", "pretrain", name)
    model = (
        {"model.config_file": TINY_MODEL}
        if "roberta" not in name
        else {
            "model.config_file": None,
            "model.config": {
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 66,
            },
        }
    )
    recipe = load_recipe(
        PretrainRecipe,
        path,
        extra={
            **model,
            "data.block_size": 64,
            "data.preprocessing_num_workers": 1,
            "data.validation_split_percentage": 10,  # of a few hundred documents: the real corpora's 0.05% is empty
            "data.max_eval_blocks": 4,
            "data.cache_dir": str(tmp_path / "cache"),
            "training.output_dir": str(tmp_path / "run"),
            "training.per_device_train_batch_size": 2,
            "training.gradient_accumulation_steps": 1,
            "training.max_steps": 2,
            "training.warmup_steps": 1,
            "training.report_to": [],
        },
    )
    summary = run_pretraining(recipe, show_progress=False)
    assert os.path.isfile(os.path.join(summary["final_dir"], "config.json"))
    assert summary["final_eval"]["perplexity"] > 1


def _recipe_error(books_folder, tokenizer_dir, tmp_path, **overrides) -> str:
    with pytest.raises(ConfigError) as err:
        books_recipe(books_folder, tokenizer_dir, tmp_path / "run", **overrides)
    return str(err.value)


def test_a_missing_or_corrupt_shard_is_named_before_any_work(books, tokenizer_dir, tmp_path):
    copy = shutil.copytree(books, tmp_path / "gutenberg")
    os.remove(copy / "train-00001-of-00002.parquet")
    message = _recipe_error(str(copy), tokenizer_dir, tmp_path)
    assert "train-00001-of-00002.parquet" in message and "missing" in message

    copy = shutil.copytree(books, tmp_path / "gutenberg2")
    shard = copy / "train-00000-of-00002.parquet"
    shard.write_bytes(shard.read_bytes()[:-100])  # cut short, as an interrupted download leaves it
    message = _recipe_error(str(copy), tokenizer_dir, tmp_path)
    assert "train-00000-of-00002.parquet" in message and "corrupt or truncated" in message
    assert not os.path.exists(tmp_path / "run")  # nothing was claimed or written


def test_a_wrong_split_column_or_folder_is_named(books, tokenizer_dir, tmp_path):
    message = _recipe_error(
        books, tokenizer_dir, tmp_path, **{"data.validation_datasets": [{"path": books, "split": "test"}]}
    )
    assert "no split 'test'" in message and "'train'" in message and "'validation'" in message
    books_recipe(books, tokenizer_dir, tmp_path / "run", **{"data.datasets": [{"path": books, "split": "train[:2]"}]})
    message = _recipe_error(books, tokenizer_dir, tmp_path, **{"data.datasets": [{"path": books, "split": "tra[:2]"}]})
    assert "no split 'tra'" in message  # a slice of a split that exists passes, of one that does not is named
    message = _recipe_error(books, tokenizer_dir, tmp_path, **{"data.text_column": "body"})
    assert "no column 'body'" in message and "text" in message
    message = _recipe_error(books, tokenizer_dir, tmp_path, **{"data.datasets": [{"path": "./no/such/folder"}]})
    assert "./no/such/folder is not a folder" in message


def test_a_split_of_no_rows_is_named_as_such_with_the_entry_that_reads_it(books, tokenizer_dir, tmp_path):
    """A valid parquet split of 0 rows was "could not be read (ArrowInvalid: BatchSize must be greater than 0) ...
    download a damaged one again", and blamed on data.datasets when data.validation_datasets named it."""
    copy = shutil.copytree(books, tmp_path / "gutenberg")
    shard = str(copy / "validation-00000-of-00001.parquet")
    pq.write_table(pq.read_table(shard).slice(0, 0), shard)
    message = _recipe_error(str(copy), tokenizer_dir, tmp_path)
    assert message.startswith("data.validation_datasets: split 'validation'") and "has no rows" in message
    assert "damaged" not in message
    # Read only for its train split, the folder is still prepared whole: the empty split is named with the fix.
    message = _recipe_error(str(copy), tokenizer_dir, tmp_path, **{"data.validation_datasets": []})
    assert message.startswith("data.datasets: split 'validation'") and "has no rows" in message
    assert "move the empty split's files out of the folder" in message
    # A stream reads its own split only.
    stream = {"data.validation_datasets": [], "data.streaming": True, "data.validation_examples_streaming": 1}
    books_recipe(str(copy), tokenizer_dir, tmp_path / "run", **stream)
    assert not os.path.exists(tmp_path / "run")


def test_a_hub_dataset_with_a_split_of_no_rows_is_named_as_such(tmp_path):
    """A Hub dataset is not checked shard by shard before loading (it is not here yet): its empty split reached the
    loader, whose pyarrow error was reported as "download a damaged one again"."""
    from linformer_hf.training.config import PretrainDataSection

    folder = tmp_path / "dataset" / "data"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), folder / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"text": ["one document"]}), folder / "validation-00000-of-00001.parquet")
    entries = [{"path": str(folder.parent), "split": "validation"}]
    section = PretrainDataSection(datasets=entries, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as raised:
        pretraining_data._load_entries(entries, section, "data.datasets")
    message = str(raised.value)
    assert message.startswith(f"data.datasets: {folder.parent} has a split of no rows") and "damaged" not in message


def test_a_stream_of_folders_no_longer_than_its_hold_out_is_refused_before_any_work(books, tokenizer_dir, tmp_path):
    """Counted from the shards' footers: before, such a stream was tokenised and then gave no training batch."""
    train_books = (
        pq.ParquetFile(glob.glob(f"{books}/train-*.parquet")[0]).metadata.num_rows
        + pq.ParquetFile(glob.glob(f"{books}/train-*.parquet")[1]).metadata.num_rows
    )
    stream = {"data.validation_datasets": [], "data.streaming": True}
    message = _recipe_error(
        books, tokenizer_dir, tmp_path, **stream, **{"data.validation_examples_streaming": train_books}
    )
    assert f"data.datasets hold {train_books} document(s)" in message and "validation_examples_streaming" in message
    # Two entries interleave until both are exhausted: up to twice the larger, so one fewer held out trains.
    twice = {"data.datasets": [{"path": books}, {"path": books}], "data.validation_examples_streaming": 2 * train_books}
    assert "holds out its first" in _recipe_error(books, tokenizer_dir, tmp_path, **stream, **twice)
    books_recipe(
        books, tokenizer_dir, tmp_path / "run", **stream, **{"data.validation_examples_streaming": train_books - 1}
    )
    assert not os.path.exists(tmp_path / "run")


def test_an_entry_given_as_a_bare_path_shows_the_form(books, tokenizer_dir, tmp_path):
    message = _recipe_error(books, tokenizer_dir, tmp_path, **{"data.datasets": [books]})
    assert "Each entry of data.datasets needs at least a 'path' key" in message
    assert f"{{path: {books}}}" in message


def test_both_local_files_and_datasets_is_refused(books, tokenizer_dir, tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("one document\nanother document\n")
    message = _recipe_error(books, tokenizer_dir, tmp_path, **{"data.train_files": [str(text)]})
    assert "not both" in message


def test_an_unreachable_hub_name_is_one_line_with_the_local_alternative(books, tokenizer_dir, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.chdir(tmp_path)  # no local folder of that name
    recipe = books_recipe(
        books, tokenizer_dir, tmp_path / "run", **{"data.datasets": [{"path": "nobody/no-such-books"}]}
    )
    with pytest.raises(ConfigError, match="'nobody/no-such-books' is not a local path, nor in the cache.*local folder"):
        prepare_pretraining_data(recipe.data, AutoTokenizer.from_pretrained(tokenizer_dir), seed=1)


def test_tokenising_in_pieces_gives_the_same_blocks_and_a_killed_run_goes_on_from_its_piece(
    books, tokenizer_dir, tmp_path, monkeypatch
):
    from datasets import Dataset
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)

    def prepare(cache_name):
        recipe = books_recipe(books, tokenizer_dir, tmp_path / cache_name, **{"data.block_size": 128})
        return prepare_pretraining_data(recipe.data, tokenizer, seed=1)

    whole = prepare("whole")["train"]["input_ids"]
    monkeypatch.setattr(pretraining_data, "PIECE_CHARACTERS", 2 * BOOK_CHARACTERS)  # 6 books: 3 pieces
    in_pieces = prepare("pieces")["train"]["input_ids"]
    assert in_pieces == whole

    # A run killed while tokenising the third piece: the first two stay cached, and the next run reuses them.
    real_map = Dataset.map

    def killed_at_third_piece(self, *args, **kwargs):
        if "piece 3 of 3" in (kwargs.get("desc") or ""):
            raise KeyboardInterrupt
        return real_map(self, *args, **kwargs)

    monkeypatch.setattr(Dataset, "map", killed_at_third_piece)
    with pytest.raises(KeyboardInterrupt):
        prepare("killed")
    cache = str(tmp_path / "killed") + "-cache"
    before = {
        path: os.path.getmtime(path) for path in glob.glob(os.path.join(cache, "**", "cache-*.arrow"), recursive=True)
    }
    assert len(before) >= 2
    monkeypatch.setattr(Dataset, "map", real_map)
    assert prepare("killed")["train"]["input_ids"] == whole
    after = glob.glob(os.path.join(cache, "**", "cache-*.arrow"), recursive=True)
    assert all(os.path.getmtime(path) == mtime for path, mtime in before.items())  # not written again
    fresh = glob.glob(os.path.join(str(tmp_path / "pieces") + "-cache", "**", "cache-*.arrow"), recursive=True)
    assert len(after) == len(fresh)  # each piece tokenised once in all


def test_a_linformer_and_a_roberta_run_share_the_tokenised_corpus(books, tokenizer_dir, tmp_path):
    """The tokenised pieces are cached by what sets their tokens: a Linformer run's tokenizer, which pads on the right
    (`pad_as_the_model_takes`), reads the pieces a RoBERTa run tokenised (datasets' own key hashed the whole
    tokenizer object, padding side included, and tokenised the corpus again); a tokenizer of another vocabulary does
    not."""
    from transformers import AutoTokenizer

    from linformer_hf import LinformerConfig
    from linformer_hf.loading import pad_as_the_model_takes

    recipe = books_recipe(books, tokenizer_dir, tmp_path / "run", **{"data.block_size": 128})

    def tokenised_files(tokenizer):
        data = prepare_pretraining_data(recipe.data, tokenizer, seed=1)
        return {os.path.basename(f["filename"]) for f in data["train"].cache_files}, data["train"]["input_ids"]

    roberta = AutoTokenizer.from_pretrained(tokenizer_dir)
    roberta.padding_side = "left"
    files, ids = tokenised_files(roberta)
    linformer = AutoTokenizer.from_pretrained(tokenizer_dir)
    pad_as_the_model_takes(linformer, LinformerConfig())
    assert linformer.init_kwargs["padding_side"] == "right"
    assert tokenised_files(linformer) == (files, ids)
    linformer(["a truncated call"], truncation=True, max_length=4)  # truncation set on the backend, then reset
    assert tokenised_files(linformer)[0] == files

    other_dir = tmp_path / "other-tokenizer"
    shards = glob.glob(os.path.join(books, "*.parquet"))
    texts = (row["text"][:2000] for path in shards for row in pq.read_table(path).to_pylist())
    train_bpe_tokenizer(texts, str(other_dir), vocab_size=500, model_max_length=512)
    other_files, other_ids = tokenised_files(AutoTokenizer.from_pretrained(other_dir))
    assert other_files.isdisjoint(files) and other_ids != ids


def test_long_documents_are_tokenised_a_few_at_a_time():
    """A batch holds about 2M characters: a thousand lines of WikiText, a handful of books (a thousand books at once
    held a whole corpus in memory)."""
    assert pretraining_data.documents_per_batch(300.0, pretraining_data.TOKENIZE_BATCH_CHARACTERS) == 1000
    assert pretraining_data.documents_per_batch(300_000.0, pretraining_data.TOKENIZE_BATCH_CHARACTERS) == 6
    assert pretraining_data.documents_per_batch(5e7, pretraining_data.TOKENIZE_BATCH_CHARACTERS) == 1


@pytest.mark.parametrize("streaming", [False, True])
def test_a_batch_of_blank_documents_gives_no_blocks_and_the_run_goes_on(
    books, tokenizer_dir, tmp_path, monkeypatch, streaming
):
    """Batches are sized in characters, so a long book followed by blank cells (None, '', spaces) made a last batch of
    blank documents only, which the tokenizer failed on (IndexError)."""
    from transformers import AutoTokenizer

    real = _real_books(2)
    blank = [{**real[0], "text": text} for text in (None, "", "   ")]
    folder = write_hub_dataset(tmp_path / "blanks", {"train": [[real[0], *blank]], "validation": [[real[1], *blank]]})
    monkeypatch.setattr(pretraining_data, "TOKENIZE_BATCH_CHARACTERS", 1)  # one document a batch
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    recipe = books_recipe(folder, tokenizer_dir, tmp_path / "run", **{"data.block_size": 128})
    recipe.data.streaming = streaming
    data = prepare_pretraining_data(recipe.data, tokenizer, seed=1)
    blocks = list(data["train"]) if streaming else data["train"]
    assert len(blocks) == len(tokenizer(real[0]["text"])["input_ids"]) // 128

    # Blank cells alone: not a crash either, but the error that the corpus gives no block.
    empty = write_hub_dataset(tmp_path / "empty", {"train": [blank], "validation": [[real[1]]]})
    recipe = books_recipe(empty, tokenizer_dir, tmp_path / "run2", **{"data.block_size": 128})
    with pytest.raises(ConfigError, match="training corpus gives no block of 128 tokens"):
        prepare_pretraining_data(recipe.data, tokenizer, seed=1)


def test_a_tokenizer_trains_on_the_shards(books, tmp_path):
    from transformers import AutoTokenizer

    from linformer_hf.training.train_tokenizer import main

    out = tmp_path / "tok"
    assert main(["--dataset", books, "--split", "train", "--vocab_size", "600", "--output_dir", str(out)]) == 0
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == 600 and tokenizer.mask_token == "<mask>"


@pytest.fixture(scope="module")
def roberta_source(tokenizer_dir, tmp_path_factory):
    """A tiny RoBERTa masked LM with 64 learned positions and the books tokenizer: an encoder pretrained at 64."""
    import torch
    from tiny_roberta import randomize_all, tiny_roberta_config
    from transformers import AutoTokenizer, RobertaForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = tiny_roberta_config(
        vocab_size=len(tokenizer), max_position_embeddings=66, pad_token_id=tokenizer.pad_token_id
    )
    model = RobertaForMaskedLM(config)
    randomize_all(model)
    out = tmp_path_factory.mktemp("roberta-source")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def uptrain_recipe(source, books_folder, output_dir, **overrides):
    extra = {
        "model.pretrained": source,
        "model.convert_from_roberta": {"max_sequence_length": 128, "projected_length": 32},
        "data.datasets": [{"path": books_folder, "split": "train"}],
        "data.validation_datasets": [{"path": books_folder, "split": "validation"}],
        "data.cache_dir": str(output_dir) + "-cache",
        "data.preprocessing_num_workers": 1,
        "data.max_eval_blocks": 4,
        "training.output_dir": str(output_dir),
        "training.per_device_train_batch_size": 2,
        "training.gradient_accumulation_steps": 1,
        "training.max_steps": 2,
        "training.warmup_steps": 1,
        "training.eval_steps": 2,
        "training.report_to": [],
        **overrides,
    }
    return load_recipe(PretrainRecipe, os.path.join(REPO, "configs", "pretrain", "uptrain_books.yaml"), extra=extra)


def test_uptraining_converts_the_source_to_n_and_trains_on(roberta_source, books, tmp_path):
    """configs/pretrain/uptrain_books.yaml from a masked LM pretrained at 64 positions: converted to a Linformer at
    n = 128 with the learned positions copied out, trained, saved; the folder reloads with the source's tokenizer."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer, RobertaForMaskedLM

    summary = run_pretraining(uptrain_recipe(roberta_source, books, tmp_path / "run"), show_progress=False)
    evals = summary["evals"]
    assert all(torch.isfinite(torch.tensor(e["eval_loss"])) for e in evals.values()) and 0 in evals and 2 in evals
    model = AutoModelForMaskedLM.from_pretrained(summary["final_dir"])
    source = RobertaForMaskedLM.from_pretrained(roberta_source)
    assert type(model).__name__ == "LinformerForMaskedLM" and model.config.max_sequence_length == 128
    # The first 64 positions are the source's rows, moved by the training's two small updates only.
    moved = (
        model.roberta.embeddings.position_embeddings.weight[:66] - source.roberta.embeddings.position_embeddings.weight
    )
    assert moved.abs().max() < 0.05
    tokenizer = AutoTokenizer.from_pretrained(summary["final_dir"])
    assert tokenizer.model_max_length == 128 and len(tokenizer) == len(AutoTokenizer.from_pretrained(roberta_source))
    # What it was converted from travels with it (before, the report was dropped: the model card named no source)
    with open(os.path.join(summary["final_dir"], "conversion_report.json"), encoding="utf-8") as fh:
        report = json.load(fh)
    assert report["source"] == roberta_source and report["max_sequence_length"] == 128
    from linformer_hf.hub import find_provenance

    assert find_provenance(summary["final_dir"])["conversion_report.json"][1]["source"] == roberta_source


def test_an_uptrained_folder_reloads_and_scores_the_held_out_books_as_its_run_did(roberta_source, books, tmp_path):
    """final/ of an uptraining, reloaded by the Auto class alone, gives the run's own final validation loss on the
    same masked held-out blocks: E, F, the copied positions, the tied output layer and the head all saved."""
    import dataclasses

    from accelerate import Accelerator
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from linformer_hf.training.data import build_mlm_collator, prepare_held_out_blocks
    from linformer_hf.training.pretraining import evaluate_mlm

    # a rate high enough that two updates move the loss far more than the tolerance below
    recipe = uptrain_recipe(roberta_source, books, tmp_path / "run", **{"training.learning_rate": 1e-2})
    summary = run_pretraining(recipe, show_progress=False)
    model = AutoModelForMaskedLM.from_pretrained(summary["final_dir"])
    tokenizer = AutoTokenizer.from_pretrained(summary["final_dir"])
    blocks = prepare_held_out_blocks(dataclasses.replace(recipe.data, block_size=128), tokenizer)
    collator = build_mlm_collator(tokenizer, recipe.data, recipe.training.seed + 1)  # the run's evaluation masks
    size = recipe.training.per_device_eval_batch_size  # batched as the run's evaluation: the same float sums
    batches = [
        collator([blocks[i] for i in range(start, min(start + size, len(blocks)))])
        for start in range(0, len(blocks), size)
    ]
    scored = evaluate_mlm(model, batches, Accelerator(cpu=True), tokenizer.mask_token_id)
    expected = summary["final_eval"]
    assert scored["eval_masked_tokens"] == expected["eval_masked_tokens"] > 0
    assert scored["eval_loss"] == pytest.approx(expected["eval_loss"], rel=1e-9)
    assert scored["mask_input_loss"] == pytest.approx(expected["mask_input_loss"], rel=1e-9)
    # and the run changed the source: a folder that saved the unconverted or untrained model would not match
    assert abs(expected["eval_loss"] / summary["evals"][0]["eval_loss"] - 1) > 1e-3


def test_uptraining_refuses_a_source_without_a_trained_masked_lm_head(roberta_source, books, tmp_path):
    from transformers import RobertaModel

    encoder_only = tmp_path / "encoder-only"
    RobertaModel.from_pretrained(roberta_source).save_pretrained(encoder_only)
    shutil.copy(os.path.join(roberta_source, "tokenizer.json"), encoder_only)
    for name in os.listdir(roberta_source):
        if name.endswith((".json", ".txt")) and name != "config.json":
            shutil.copy(os.path.join(roberta_source, name), encoder_only)
    with pytest.raises(ConfigError, match="no trained masked-LM head"):
        run_pretraining(uptrain_recipe(str(encoder_only), books, tmp_path / "run"), show_progress=False)
    assert not os.path.exists(tmp_path / "run")  # refused before the output directory was claimed


def test_uptraining_settings_that_cannot_work_are_refused_when_the_recipe_is_read(roberta_source, books, tmp_path):
    with pytest.raises(ConfigError, match="not read when model.convert_from_roberta is set"):
        uptrain_recipe(roberta_source, books, tmp_path / "run", **{"model.config": {"hidden_size": 64}})
    with pytest.raises(ConfigError, match="makes a 'performer' model but model.model_type is 'linformer'"):
        uptrain_recipe(
            roberta_source, books, tmp_path / "run", **{"model.convert_from_roberta": {"target": "performer"}}
        )
    with pytest.raises(ConfigError, match=r"Unknown key\(s\) \['k'\]"):
        uptrain_recipe(roberta_source, books, tmp_path / "run", **{"model.convert_from_roberta": {"k": 32}})


def test_books_recipe_trains_its_roberta_baseline(books, tokenizer_dir, tmp_path):
    """The RoBERTa of the same shape under the same recipe, as configs/pretrain/books.yaml says to run it."""
    summary = run_pretraining(
        books_recipe(
            books,
            tokenizer_dir,
            tmp_path / "run",
            **{
                "model.model_type": "roberta",
                "model.config_file": os.path.join(REPO, "configs", "model", "books_small_roberta.yaml"),
                "data.max_eval_blocks": 2,
                "training.max_steps": 2,
                "training.warmup_steps": 1,
                "training.per_device_train_batch_size": 2,
                "training.report_to": [],
            },
        ),
        show_progress=False,
    )
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(summary["final_dir"])
    assert config.model_type == "roberta" and config.max_position_embeddings == 514  # n = 512
    assert config.architectures == ["RobertaForMaskedLM"]  # a plain RoBERTa folder, not the training class's name
    assert summary["final_eval"]["perplexity"] > 1


def test_uptraining_from_a_hub_name_offline_is_one_line(books, tmp_path, monkeypatch):
    """The recipe's own source, FacebookAI/roberta-base (and its tokenizer, read first), where the Hub cannot be
    reached: named as the model (the recipe sets no tokenizer: before, the line named one, and the fix was to give a
    tokenizer), with the fix, in one line."""
    monkeypatch.chdir(tmp_path)
    recipe = load_recipe(
        PretrainRecipe,
        os.path.join(REPO, "configs", "pretrain", "uptrain_books.yaml"),
        extra={
            "data.datasets": [{"path": books}],
            "data.validation_datasets": [{"path": books, "split": "validation"}],
        },
    )
    one_line = "^model.pretrained 'FacebookAI/roberta-base' is not a local path[^\\n]*folder of a saved model"
    with pytest.raises(ConfigError, match=one_line):
        run_pretraining(recipe, show_progress=False)


def test_runs_at_different_n_read_the_same_tokens_in_the_same_order_with_the_same_masks(books, tokenizer_dir, tmp_path):
    """data.input_length: a model of n = 128 reads the 256-token blocks of a model of n = 256 as two inputs each, so
    the two runs' batches hold the same tokens, order and masks (training and validation), and both train."""
    from linformer_hf.training.pretraining import build_trainer, check_block_size

    def batches(n, output_dir, **data):
        overrides = {
            "model.config.max_sequence_length": n,
            "model.config.projected_length": 32,
            "data.block_size": 256,
            "data.max_eval_blocks": 2,
            "training.per_device_train_batch_size": 2,
            "training.max_steps": 2,
            "training.warmup_steps": 1,
            "training.report_to": [],
            **{f"data.{key}": value for key, value in data.items()},
        }
        trainer = build_trainer(books_recipe(books, tokenizer_dir, tmp_path / output_dir, **overrides))
        try:
            train = [b for _, b in zip(range(3), trainer.get_train_dataloader())]
            return train, list(trainer.get_eval_dataloader())
        finally:
            trainer.close()

    long_train, long_eval = batches(256, "n256")
    short_train, short_eval = batches(128, "n128", input_length=128)
    for long, short in zip(long_train + long_eval, short_train + short_eval, strict=True):
        assert short["input_ids"].shape == (2 * long["input_ids"].shape[0], 128)
        for key in ("input_ids", "labels", "attention_mask"):
            assert short[key].equal(long[key].reshape(-1, 128)), key
    assert (long_train[0]["labels"] != -100).any()

    summary = run_pretraining(
        books_recipe(
            books,
            tokenizer_dir,
            tmp_path / "trained",
            **{
                "model.config.max_sequence_length": 128,
                "model.config.projected_length": 32,
                "data.block_size": 256,
                "data.input_length": 128,
                "data.max_eval_blocks": 2,
                "training.per_device_train_batch_size": 2,
                "training.max_steps": 2,
                "training.warmup_steps": 1,
                "training.eval_steps": 2,
                "training.report_to": [],
            },
        ),
        show_progress=False,
    )
    assert summary["final_eval"]["perplexity"] > 1

    recipe = books_recipe(books, tokenizer_dir, tmp_path / "bad", **{"data.block_size": 300, "data.input_length": 128})
    with pytest.raises(ConfigError, match="block_size=300 is not a multiple of data.input_length=128"):
        check_block_size(recipe, _model_config(recipe))
    recipe = books_recipe(
        books, tokenizer_dir, tmp_path / "bad", **{"data.block_size": 1024, "data.input_length": 1024}
    )
    with pytest.raises(ConfigError, match="input_length=1024 is larger than the model's longest input n=512"):
        check_block_size(recipe, _model_config(recipe))
    with pytest.raises(ConfigError, match="cannot be combined with data.short_block_probability"):
        books_recipe(
            books, tokenizer_dir, tmp_path / "bad", **{"data.input_length": 128, "data.short_block_probability": 0.1}
        )


def _model_config(recipe):
    from transformers import AutoTokenizer

    from linformer_hf.training.model_setup import build_model_config

    return build_model_config(recipe.model, AutoTokenizer.from_pretrained(recipe.tokenizer.name_or_path))


@pytest.fixture(scope="module")
def sentence_encoder(tmp_path_factory):
    """A BERT-layout encoder saved without a masked-LM head, with its WordPiece tokenizer (as all-MiniLM-L6-v2)."""
    from tiny_bert import build_wordpiece_tokenizer, randomize_all, tiny_bert_config
    from transformers import BertModel

    folder = tmp_path_factory.mktemp("sentence-encoder")
    tokenizer = build_wordpiece_tokenizer(str(folder), vocab_size=300, model_max_length=64)
    encoder = BertModel(
        tiny_bert_config(vocab_size=len(tokenizer), max_position_embeddings=64), add_pooling_layer=False
    )
    randomize_all(encoder, seed=3)
    encoder.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def fit_head_recipe(encoder, books_folder, output_dir, **overrides):
    extra = {
        "model.pretrained": encoder,
        "data.datasets": [{"path": books_folder, "split": "train"}],
        "data.validation_datasets": [{"path": books_folder, "split": "validation"}],
        "data.max_eval_blocks": 4,
        "data.preprocessing_num_workers": 1,
        "data.cache_dir": str(output_dir) + "-cache",
        "training.output_dir": str(output_dir),
        "training.per_device_train_batch_size": 4,
        "training.max_steps": 4,
        "training.warmup_steps": 1,
        "training.learning_rate": 1.0e-2,
        "training.eval_steps": 4,
        **overrides,
    }
    return load_recipe(
        PretrainRecipe, os.path.join(REPO, "configs", "pretrain", "fit_mlm_head_books.yaml"), extra=extra
    )


def test_a_head_fitted_on_a_frozen_sentence_encoder_makes_it_a_masked_lm_to_uptrain(sentence_encoder, books, tmp_path):
    """configs/pretrain/fit_mlm_head_books.yaml: only the head trains (the encoder's tensors are unchanged), the
    loss falls, the folder is a plain BERT masked LM, and uptraining takes it where it refuses the bare encoder."""
    import torch
    from transformers import AutoModelForMaskedLM, BertModel

    with pytest.raises(ConfigError, match="no trained masked-LM head.*model.trainable: lm_head"):
        run_pretraining(
            fit_head_recipe(sentence_encoder, books, tmp_path / "all", **{"model.trainable": "all"}),
            show_progress=False,
        )
    summary = run_pretraining(fit_head_recipe(sentence_encoder, books, tmp_path / "head"), show_progress=False)
    assert summary["evals"][4]["eval_loss"] < summary["evals"][0]["eval_loss"]
    fitted, loading = AutoModelForMaskedLM.from_pretrained(summary["final_dir"], output_loading_info=True)
    assert type(fitted).__name__ == "BertForMaskedLM" and not loading["missing_keys"]
    assert fitted.config.architectures == ["BertForMaskedLM"]
    source = BertModel.from_pretrained(sentence_encoder, add_pooling_layer=False).state_dict()
    for key, value in fitted.bert.state_dict().items():
        assert torch.equal(value, source[key]), key

    uptrained = run_pretraining(uptrain_recipe(summary["final_dir"], books, tmp_path / "uptrain"), show_progress=False)
    assert AutoModelForMaskedLM.from_pretrained(uptrained["final_dir"]).config.max_sequence_length == 128


def test_the_figure3_plan_runs_each_model_once_on_the_same_tokens_and_collates_the_curves(
    books, tokenizer_dir, tmp_path, forked_subprocesses, capsys
):
    """experiments/books_pretraining.py: two models of different n read the same blocks (the shorter one as two
    inputs a block); a stopped run goes on from its checkpoint, a finished one is not run again; the curves and the
    table are written from their logs. A plan changed for a run that has started is refused (a stop setting dropped is
    not a change); a run's own data.block_size is refused."""
    import csv
    import dataclasses
    import json

    import yaml

    from experiments import books_pretraining

    plan_path = tmp_path / "plan.yaml"
    shared = {
        "model.config_file": os.path.join(REPO, "configs", "model", "books_small.yaml"),
        "model.config.projected_length": 32,
        "tokenizer.name_or_path": tokenizer_dir,
        "data.datasets": [{"path": books, "split": "train"}],
        "data.validation_datasets": [{"path": books, "split": "validation"}],
        "data.cache_dir": str(tmp_path / "cache"),
        "data.preprocessing_num_workers": 1,
        "data.block_size": 256,
        "data.max_eval_blocks": 2,
        "training.per_device_train_batch_size": 1,
        "training.max_steps": 2,
        "training.warmup_steps": 1,
        "training.eval_steps": 2,
        "training.report_to": [],
    }
    runs = [
        {"name": "n256", "overrides": {"model.config.max_sequence_length": 256}},
        {  # stopped after its first update and checkpoint, as a killed run would be
            "name": "n128",
            "overrides": {
                "model.config.max_sequence_length": 128,
                "data.input_length": 128,
                "training.checkpointing_steps": 1,
                "training.stop_after_steps": 1,
            },
        },
    ]
    plan = {"recipe": os.path.join(REPO, "configs", "pretrain", "books.yaml"), "shared": shared, "runs": runs}
    plan_path.write_text(yaml.safe_dump({**plan, "output_dir": str(tmp_path / "out"), "baseline": "n256"}))
    plan = books_pretraining.load_plan(str(plan_path))
    books_pretraining.run_plan(plan)
    assert books_pretraining.finished(str(tmp_path / "out" / "n256"))
    assert not books_pretraining.finished(str(tmp_path / "out" / "n128"))
    del plan.runs[1].overrides["training.stop_after_steps"]
    books_pretraining.run_plan(plan)  # n256 is not run again; n128 goes on from its checkpoint
    log = (tmp_path / "out" / "n128.log").read_text()
    assert log.count("linformer_hf.training.pretrain") == 2 and "--training.resume_from_checkpoint latest" in log
    assert (tmp_path / "out" / "n256.log").read_text().count("linformer_hf.training.pretrain") == 1
    with open(tmp_path / "out" / "curves.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((row["run"], row["step"], row["tokens"]) for row in rows) == [
        ("n128", "0", "0"),
        ("n128", "2", "512"),
        ("n256", "0", "0"),
        ("n256", "2", "512"),
    ]
    report = (tmp_path / "out" / "results.md").read_text()
    assert "| n128 | yes | 2 | 512 |" in report and "| n256 | yes | 2 | 512 |" in report

    # the plan changed for a finished run: it would be reported under the new shape, so the plan is refused, by the
    # command (one line, --report too) and by run_plan
    plan.runs[1].overrides["data.input_length"] = 64
    plan_path.write_text(
        yaml.safe_dump(
            {
                "recipe": plan.recipe,
                "shared": shared,
                "output_dir": plan.output_dir,
                "runs": [dataclasses.asdict(run) for run in plan.runs],
            }
        )
    )
    with pytest.raises(SystemExit):
        books_pretraining.main(["--plan", str(plan_path), "--report"])
    err = capsys.readouterr().err
    assert "run n128 in " in err and "data.input_length: 128 then, 64 now" in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="data.input_length: 128 then, 64 now"):
        books_pretraining.run_plan(plan)
    assert "ln -s" not in err  # not a moved file
    plan.runs[1].overrides["data.input_length"] = 128
    moved = shutil.copytree(tokenizer_dir, tmp_path / "tokenizer-moved")  # the same tokenizer, elsewhere
    plan.shared = {**plan.shared, "tokenizer.name_or_path": str(moved)}
    with pytest.raises(ConfigError, match=r"tokenizer.name_or_path: .* If only files moved .*\(ln -s NEW OLD\)"):
        books_pretraining.check_settings(plan)
    plan.shared["tokenizer.name_or_path"] = tokenizer_dir
    # a run that failed as it started (no checkpoint, no summary) is not held to its settings: fixed, it starts over
    failed = books_pretraining.Run("n64", {"model.config.max_sequence_length": 64, "data.input_length": 64})
    plan.runs = [plan.runs[0], failed]
    books_pretraining.record_settings(plan, failed)
    failed.overrides["training.gradient_accumulation_steps"] = 2
    books_pretraining.check_settings(plan)
    books_pretraining.record_settings(plan, failed)
    with open(books_pretraining.settings_path(plan, failed), encoding="utf-8") as fh:
        assert json.load(fh)["training.gradient_accumulation_steps"] == 2

    runs[0]["overrides"]["training.output_dir"] = "elsewhere"
    plan_path.write_text(
        yaml.safe_dump(
            {"recipe": os.path.join(REPO, "configs", "pretrain", "books.yaml"), "shared": shared, "runs": runs}
        )
    )
    with pytest.raises(ConfigError, match="training.output_dir is set by the plan itself"):
        books_pretraining.load_plan(str(plan_path))
    runs[0]["overrides"] = {"data.block_size": 128}
    plan_path.write_text(yaml.safe_dump({"recipe": plan.recipe, "shared": shared, "runs": runs}))
    with pytest.raises(ConfigError, match=r"runs \['n256'\] set data.block_size"):
        books_pretraining.load_plan(str(plan_path))


def test_a_stop_signal_to_the_plan_reaches_the_running_run_once_and_starts_no_later_run(tmp_path, monkeypatch):
    """SIGTERM to the plan's driver is passed on to the run in progress (which checkpoints and stops), once; the
    driver then exits naming the signal, and no later run starts. Before, the driver died and left its run training,
    orphaned."""
    import signal
    import sys
    import time
    from types import SimpleNamespace

    from experiments import books_pretraining

    child, events = stoppable_child(tmp_path)
    plan = SimpleNamespace(
        output_dir=str(tmp_path / "out"), runs=[SimpleNamespace(name="a"), SimpleNamespace(name="b")]
    )
    monkeypatch.setattr(books_pretraining, "finished", lambda path: False)
    monkeypatch.setattr(books_pretraining, "run_dir", lambda plan, run: os.path.join(plan.output_dir, run.name))
    monkeypatch.setattr(books_pretraining, "write_report", lambda plan: None)
    monkeypatch.setattr(books_pretraining, "check_settings", lambda plan, mine: None)
    monkeypatch.setattr(books_pretraining, "record_settings", lambda plan, run: None)
    monkeypatch.setattr(books_pretraining, "command", lambda plan, run: [sys.executable, str(child), run.name])

    signal_this_process_once_started(events, signal.SIGTERM)
    handler_before, start = signal.getsignal(signal.SIGTERM), time.monotonic()
    with pytest.raises(SystemExit, match="SIGTERM received: run a was stopped .* no later run was started"):
        books_pretraining.run_plan(plan)
    assert events.read_text().splitlines() == ["a started", "a got SIGTERM"]
    assert time.monotonic() - start < 30
    assert signal.getsignal(signal.SIGTERM) == handler_before  # the driver's handler is gone again


def test_a_plan_beside_a_running_one_keeps_to_its_settings_and_never_runs_its_runs(
    books, tokenizer_dir, tmp_path, monkeypatch
):
    """While one driver runs a plan's run that has no checkpoint yet, a second plan into the folder that changes that
    run is refused, naming the change (before, it rewrote the run's settings under it), and no second driver runs the
    run; the plan's other runs are free to a second driver."""
    import yaml

    from experiments import books_pretraining

    shared = {
        "model.config_file": os.path.join(REPO, "configs", "model", "books_small.yaml"),
        "tokenizer.name_or_path": tokenizer_dir,
        "data.datasets": [{"path": books, "split": "train"}],
        "data.validation_datasets": [{"path": books, "split": "validation"}],
        "data.block_size": 256,
    }
    runs = [{"name": "a", "overrides": {"model.config.projected_length": 32}}, {"name": "b", "overrides": {}}]
    plan_path = tmp_path / "plan.yaml"
    plan = {"recipe": os.path.join(REPO, "configs", "pretrain", "books.yaml"), "output_dir": str(tmp_path / "out")}
    plan_path.write_text(yaml.safe_dump({**plan, "shared": shared, "runs": runs}))
    first = books_pretraining.load_plan(str(plan_path))
    started = []
    monkeypatch.setattr(books_pretraining, "run_one", lambda plan, run, claim: started.append(run.name))
    monkeypatch.setattr(books_pretraining, "write_report", lambda plan: None)
    books_pretraining.record_settings(first, first.runs[0])  # the first driver started run a ...
    with claimed_by_another_driver(tmp_path / "out", "a"):  # ... and is running it
        with pytest.raises(ConfigError, match="run a in .* is being run by another driver"):
            books_pretraining.run_plan(first)
        runs[0]["overrides"]["model.config.projected_length"] = 64
        plan_path.write_text(yaml.safe_dump({**plan, "shared": shared, "runs": runs}))
        second = books_pretraining.load_plan(str(plan_path))
        with pytest.raises(
            ConfigError, match="model.config: {'projected_length': 32} then, {'projected_length': 64} now"
        ):
            books_pretraining.run_plan(second, only=["b"])
        with pytest.raises(SystemExit):  # the command, --report too: it would report run a as the changed plan's
            books_pretraining.main(["--plan", str(plan_path), "--report"])
        books_pretraining.run_plan(first, only=["b"])
    assert started == ["b"]
    with open(books_pretraining.settings_path(first, first.runs[0]), encoding="utf-8") as fh:
        assert json.load(fh)["model.config"] == {"projected_length": 32}
    books_pretraining.check_settings(second)  # the first driver gone, with nothing kept: run a may start over


@pytest.mark.parametrize(
    "argv, error",
    [
        (["--plan", "configs/books/nothere.yaml"], "Pass an existing YAML file as --plan."),
        (["--plan", "configs/books/figure3.yaml", "--only", "roberta_n521"], "unknown runs ['roberta_n521']"),
    ],
)
def test_a_bad_plan_command_line_is_one_error_line_before_any_run(argv, error, monkeypatch, capsys):
    from experiments import books_pretraining

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(books_pretraining, "run_plan", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as stop:
        books_pretraining.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert error in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "overrides, error",
    [
        ({"model.config.projected_length": 1024, "data.input_length": 512}, "k=1024 is larger than"),
        ({"model.config.projected_lenght": 64}, "Unknown LinformerConfig field(s) ['projected_lenght']"),
        ({"data.input_length": 384}, "data.block_size=4096 is not a multiple of data.input_length=384"),
    ],
)
def test_a_plans_last_run_that_cannot_build_its_model_is_refused_before_its_first_run(
    overrides, error, tmp_path, monkeypatch, capsys
):
    """A model field misspelt, a k longer than n, an input length the blocks cannot be cut into: in a plan's last run
    each failed when that run started, after every run before it (hours each) had trained."""
    import yaml

    from experiments import books_pretraining

    monkeypatch.chdir(REPO)
    with open("configs/books/figure3.yaml", encoding="utf-8") as fh:
        plan = yaml.safe_load(fh)
    out = tmp_path / "books-figure3"
    plan_path = tmp_path / "figure3.yaml"
    runs = [*plan["runs"], {"name": "last", "overrides": overrides}]
    plan_path.write_text(yaml.safe_dump({**plan, "output_dir": str(out), "runs": runs}))
    monkeypatch.setattr(books_pretraining, "run_child", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as stop:
        books_pretraining.main(["--plan", str(plan_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert error in err and err.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize(
    "change, error",
    [
        ({"runs": []}, "the plan has no runs: give its runs as a list under runs:"),
        ({"output_dir": "FILE"}, "is a file: give the plan a folder for its runs."),
    ],
)
def test_a_plan_without_runs_or_with_a_file_for_its_folder_is_one_error_line(
    change, error, tmp_path, monkeypatch, capsys
):
    """A plan with no runs said "runs need unique names, got []"; a file as its output_dir was a traceback once its
    first run was to be written."""
    import yaml

    from experiments import books_pretraining

    monkeypatch.chdir(REPO)
    with open("configs/books/figure3.yaml", encoding="utf-8") as fh:
        plan = yaml.safe_load(fh)
    a_file = tmp_path / "results.txt"
    a_file.write_text("mine")
    change = {key: str(a_file) if value == "FILE" else value for key, value in change.items()}
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump({**plan, "output_dir": str(tmp_path / "out"), **change}))
    monkeypatch.setattr(books_pretraining, "run_child", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as stop:
        books_pretraining.main(["--plan", str(plan_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert error in err and err.count("\n") == 1 and a_file.read_text() == "mine"


def test_a_report_of_a_plan_no_run_of_which_has_started_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """`--report` before any run: it wrote an empty results.md, results.json and curves.csv and exited 0."""
    import yaml

    from experiments import books_pretraining

    monkeypatch.chdir(REPO)
    with open("configs/books/figure3.yaml", encoding="utf-8") as fh:
        plan = yaml.safe_load(fh)
    out = tmp_path / "books-figure3"
    (out / plan["runs"][0]["name"]).mkdir(parents=True)  # a run folder with no log yet: not a run that started
    plan_path = tmp_path / "figure3.yaml"
    plan_path.write_text(yaml.safe_dump({**plan, "output_dir": str(out)}))
    monkeypatch.setattr(books_pretraining, "run_plan", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as stop:
        books_pretraining.main(["--plan", str(plan_path), "--report"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"no run of this plan has started under {out}" in err and "nothing to report" in err
    assert err.count("\n") == 1 and os.listdir(out) == [plan["runs"][0]["name"]]  # no results.md, .json, curves.csv


def test_a_run_reads_context_from_the_evaluation_after_which_it_stays_under_the_baseline():
    from experiments.books_pretraining import READS_CONTEXT, reads_context_from

    def evals(*ratios):
        return [{"step": 128 * i, "perplexity_over_unigram": r} for i, r in enumerate(ratios)]

    below, above = READS_CONTEXT - 0.01, READS_CONTEXT + 0.01
    assert reads_context_from(evals(1.05, above, below, below)) == 256
    assert reads_context_from(evals(1.05, below, above, below, below)) == 384  # a dip under it is not yet reading
    assert reads_context_from(evals(1.05, below, below, READS_CONTEXT)) is None  # back at the plateau at the end
    assert reads_context_from(evals(below, below)) == 0  # a pretrained model reads its context from the start
    assert reads_context_from(evals(1.05)) is None and reads_context_from([]) is None


def test_each_run_is_compared_with_the_baseline_of_its_own_seed(tmp_path, monkeypatch):
    """A run of seed 2 reads other blocks under other masks: its perplexity is divided by the baseline's twin of seed
    2 (the baseline's overrides with that seed), not by seed 1's baseline; without a twin, by nothing."""
    from experiments import books_pretraining
    from experiments.books_pretraining import BooksPlan, Run, baseline_for

    roberta = {"model.model_type": "roberta", "data.input_length": 512}
    plan = BooksPlan(
        output_dir=str(tmp_path / "out"),
        baseline="roberta",
        runs=[
            Run("roberta", dict(roberta)),
            Run("k128", {"data.input_length": 512}),
            Run("roberta_seed2", {**roberta, "training.seed": 2}),
            Run("k128_seed2", {"data.input_length": 512, "training.seed": 2}),
            Run("roberta_n1024_seed3", {**roberta, "data.input_length": 1024, "training.seed": 3}),
            Run("k128_seed3", {"data.input_length": 512, "training.seed": 3}),
        ],
    )
    assert [baseline_for(plan, run) for run in plan.runs] == [
        "roberta", "roberta", "roberta_seed2", "roberta_seed2", None, None,
    ]  # fmt: skip
    plan.shared = {"training.seed": 2}  # a seed every run takes, overridden by one: the same pairing
    plan.runs[0].overrides["training.seed"] = 1
    assert baseline_for(plan, plan.runs[1]) == "roberta_seed2" and baseline_for(plan, plan.runs[0]) == "roberta"
    assert baseline_for(BooksPlan(runs=plan.runs), plan.runs[1]) is None  # a plan without a baseline

    # The report divides by that baseline's evaluation at the same update (none yet: nothing to divide by).
    plan.shared = {}
    del plan.runs[0].overrides["training.seed"]
    ppl = {"roberta": 400.0, "k128": 420.0, "roberta_seed2": 500.0, "k128_seed2": 510.0, "k128_seed3": 450.0}
    summaries = [
        {"run": name, "finished": True, "steps": 8, "tokens": 8 * 4096, "perplexity": value,
         "mask_input_perplexity": 2 * value, "mask_input_over_unigram": 0.9, "reads_context_from": 4,
         "tokens_per_s": 1000.0, "baseline": baseline_for(plan, next(r for r in plan.runs if r.name == name))}
        for name, value in ppl.items()
    ]  # fmt: skip
    summaries[3].update(steps=4, tokens=4 * 4096)  # k128_seed2, part-way
    curves = [  # each run's last evaluation is its summary's; the one before it 1.5 times higher
        {"run": s["run"], "step": step, "perplexity": s["perplexity"] * (1.0 if step == s["steps"] else 1.5),
         "mask_input_perplexity": s["mask_input_perplexity"] * (1.0 if step == s["steps"] else 1.5)}
        for s in summaries for step in (4, 8) if step <= s["steps"]
    ]  # fmt: skip
    monkeypatch.setattr(books_pretraining, "collate", lambda plan: (curves, summaries))
    monkeypatch.setattr(books_pretraining, "CURVE_COLUMNS", ["run", "step", "perplexity", "mask_input_perplexity"])
    report = books_pretraining.write_report(plan)
    assert "| k128 | yes | 8 | 32,768 | 420.0 | 840.0 | 0.900 | roberta | 1.050 / 1.050 |" in report
    # at update 4: 510 against roberta_seed2's 750 there (0.680), not against its 500 at update 8 (1.020)
    assert "| k128_seed2 | yes | 4 | 16,384 | 510.0 | 1020.0 | 0.900 | roberta_seed2 | 0.680 / 0.680 |" in report
    assert "| k128_seed3 | yes | 8 | 32,768 | 450.0 | 900.0 | 0.900 | - | - / - |" in report


def test_the_curves_are_written_through_a_temporary_file_of_each_writers_own(tmp_path, monkeypatch):
    """write_report wrote curves.csv through `curves.csv.tmp`, one name for every writer: two drivers of one plan
    ending at once wrote into one file (a mix of both, or a FileNotFoundError at the second rename), and a report
    killed mid-write left it for the next one. It goes through write_text_atomic now: a dead writer's temporary file
    beside curves.csv is removed by the next report, and the file holds the curve."""
    import subprocess
    import sys

    from experiments import books_pretraining
    from experiments.books_pretraining import BooksPlan, Run
    from linformer_hf import outputs

    plan = BooksPlan(output_dir=str(tmp_path / "out"), runs=[Run("k128", {"data.input_length": 512})])
    curves = [{"run": "k128", "step": 4, "perplexity": 420.0}]
    summaries = [
        {"run": "k128", "finished": True, "steps": 4, "tokens": 4 * 4096, "perplexity": 420.0,
         "mask_input_perplexity": None, "mask_input_over_unigram": None, "reads_context_from": None,
         "tokens_per_s": None, "baseline": None}
    ]  # fmt: skip
    monkeypatch.setattr(books_pretraining, "collate", lambda plan: (curves, summaries))
    monkeypatch.setattr(books_pretraining, "CURVE_COLUMNS", ["run", "step", "perplexity"])
    os.makedirs(plan.output_dir)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    debris = os.path.join(plan.output_dir, f"curves.csv.tmp-{dead.pid}-0123abcd@{outputs._host_tag()}")
    with open(debris, "w") as fh:
        fh.write("run,st")
    books_pretraining.write_report(plan)
    assert sorted(os.listdir(plan.output_dir)) == ["curves.csv", "results.json", "results.md"]
    with open(os.path.join(plan.output_dir, "curves.csv"), newline="") as fh:
        assert fh.read() == "run,step,perplexity\r\nk128,4,420.0\r\n"


def test_an_uptraining_runs_curve_rows_give_the_shape_its_conversion_builds(roberta_source, books, tmp_path):
    """The curves' k, sharing and E, F start of a converted run are the conversion's (its defaults where the plan
    gives none: k = n / 4, E, F as neighbour averages), not a fresh LinformerConfig's; a fresh run keeps its own."""
    import yaml

    from experiments import books_pretraining

    shared = {
        "model.pretrained": roberta_source,
        "data.datasets": [{"path": books, "split": "train"}],
        "data.validation_datasets": [{"path": books, "split": "validation"}],
        "data.block_size": 256,
    }
    runs = [
        {"name": "defaults", "overrides": {"model.convert_from_roberta": {"max_sequence_length": 256}}},
        {
            "name": "given",
            "overrides": {
                "model.convert_from_roberta": {
                    "max_sequence_length": 256,
                    "projected_length": 32,
                    "sharing": "key_value",
                    "projection_init": "random",
                    "projection_noise_std": 0.01,
                    "seed": 3,
                }
            },
        },  # fmt: skip
    ]
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump({"recipe": os.path.join(REPO, "configs", "pretrain", "uptrain_books.yaml"),
                                         "shared": shared, "runs": runs, "output_dir": str(tmp_path / "out"),
                                         "baseline": "defaults"}))  # fmt: skip
    plan = books_pretraining.load_plan(str(plan_path))
    shapes = [books_pretraining.run_shape(plan, run) for run in plan.runs]
    picked = [(s["model_type"], s["n"], s["k"], s["sharing"], s["projection_init"]) for s in shapes]
    assert picked == [
        ("linformer", 256, 64, "headwise", "neighbour_average"),
        ("linformer", 256, 32, "key_value", "random"),
    ]


def test_uptraining_into_an_earlier_runs_folder_is_refused_before_the_source_is_read(
    roberta_source, books, tmp_path, monkeypatch
):
    """Before, the source was loaded and converted (a download of roberta-base, online) and only then was the folder
    refused."""
    from linformer_hf.training import pretraining

    run = tmp_path / "run"
    run.mkdir()
    (run / "train_log.jsonl").write_text("{}\n")  # an earlier run's
    monkeypatch.setattr(pretraining, "convert_masked_lm", lambda section: pytest.fail("the source was converted"))
    with pytest.raises(ConfigError, match="is not empty .* it belongs to an earlier run"):
        run_pretraining(uptrain_recipe(roberta_source, books, run), show_progress=False)


def test_a_resumed_uptraining_reads_its_checkpoint_not_the_source_and_repeats_the_uninterrupted_run(
    roberta_source, books, tmp_path, monkeypatch, capsys
):
    """A stopped uptraining resumes with its source gone (a folder moved, a Hub name offline): the converted model and
    the tokenizer come from the checkpoint, and the resumed run makes the uninterrupted run's updates. Before, the
    resume read and converted the source again and stopped where it was out of reach. Changed conversion settings
    are still refused, naming the field."""
    from linformer_hf.training import model_setup, pretraining

    common = {"training.checkpointing_steps": 1, "training.max_steps": 3, "training.eval_steps": 3}
    full = run_pretraining(uptrain_recipe(roberta_source, books, tmp_path / "full", **common), show_progress=False)
    source = tmp_path / "source"
    shutil.copytree(roberta_source, source)
    part = run_pretraining(
        uptrain_recipe(str(source), books, tmp_path / "part", **common, **{"training.stop_after_steps": 1}),
        show_progress=False,
    )
    assert part["completed_steps"] == 1
    shutil.rmtree(source)  # the source is gone, and must not be read
    monkeypatch.setattr(pretraining, "convert_masked_lm", lambda section: pytest.fail("the source was converted"))
    monkeypatch.setattr(model_setup, "load_source", lambda *a, **k: pytest.fail("the source was read"), raising=False)
    latest = {**common, "training.resume_from_checkpoint": "latest"}
    with pytest.raises(ConfigError, match=r"model.convert_from_roberta: .*'projected_length': 32.* in the checkpoint"):
        run_pretraining(
            uptrain_recipe(
                str(source),
                books,
                tmp_path / "part",
                **latest,
                **{"model.convert_from_roberta": {"max_sequence_length": 128, "projected_length": 16}},
            ),
            show_progress=False,
        )
    capsys.readouterr()
    resumed = run_pretraining(uptrain_recipe(str(source), books, tmp_path / "part", **latest), show_progress=False)
    assert "converted model and tokenizer are read from the checkpoint" in capsys.readouterr().out
    assert resumed["resumed_from"].endswith("checkpoint-1")
    for step in (2, 3):
        assert resumed["train_losses"][step] == pytest.approx(full["train_losses"][step], abs=1e-6), step
    assert resumed["final_eval"]["eval_loss"] == pytest.approx(full["final_eval"]["eval_loss"], abs=1e-6)
    # final/ still names the source the run was converted from
    with open(os.path.join(resumed["final_dir"], "conversion_report.json"), encoding="utf-8") as fh:
        assert json.load(fh)["source"] == str(source)


def test_validation_text_that_training_books_hold_is_found_with_the_updates_that_read_it(tokenizer_dir, tmp_path):
    """books_pretraining --validation_overlap: a held-out book that starts with a passage of a training book (a story
    in a collection too) has that text found among the training books, and each seed of the plan names the updates
    whose blocks hold it; held-out books of their own text find nothing."""

    from experiments import books_pretraining

    real = _real_books(8)
    held_out = [{**real[6], "text": real[0]["text"][3000:7000] + "\n\n" + real[6]["text"]}, real[7]]
    overlapping = write_hub_dataset(tmp_path / "books", {"train": [real[:3], real[3:6]], "validation": [held_out]})
    clean = write_hub_dataset(tmp_path / "clean", {"train": [real[:3], real[3:6]], "validation": [real[6:]]})

    def plan(books, name):
        runs = [
            {"name": "seed1", "overrides": {"model.config.max_sequence_length": 256}},
            {"name": "seed1_n128", "overrides": {"model.config.max_sequence_length": 128, "data.input_length": 128}},
            {"name": "seed2", "overrides": {"model.config.max_sequence_length": 256, "training.seed": 2}},
        ]
        return books_plan(
            books,
            tokenizer_dir,
            tmp_path / name,
            runs,
            **{
                "model.config.projected_length": 32,
                "data.cache_dir": str(tmp_path / f"cache-{name}"),
                "data.preprocessing_num_workers": 1,
                "data.block_size": 256,
                "data.max_eval_blocks": 8,
                "training.per_device_train_batch_size": 1,
                "training.max_steps": 1000,  # beyond the training blocks: every block is read in several passes
                "training.report_to": [],
            },
        )

    result = books_pretraining.validation_overlap(plan(overlapping, "overlapping"))
    assert result["slices_in_training_books"] >= 2 and result["slices"] > result["slices_in_training_books"]
    assert result["seeds"]["1"]["runs"] == ["seed1", "seed1_n128"] and result["seeds"]["2"]["runs"] == ["seed2"]
    one, two = (result["seeds"][seed]["updates_reading_it"] for seed in ("1", "2"))
    # each seed reads every block in every pass, in an order of its own: every slice found, at other updates, and
    # again in the later passes (the last one cut short where max_steps ends, so not as often by each seed)
    assert sum(one.values()) >= 2 * result["slices_in_training_books"] <= sum(two.values())
    assert one.keys() != two.keys()
    with open(tmp_path / "overlapping" / books_pretraining.OVERLAP_FILE, encoding="utf-8") as fh:
        assert json.load(fh)["slices_in_training_books"] == result["slices_in_training_books"]
    assert "read a block holding them" in books_pretraining.overlap_summary(result)

    result = books_pretraining.validation_overlap(plan(clean, "clean"))
    assert result["slices_in_training_books"] == 0 and result["slices"] > 0
    assert all(not entry["updates_reading_it"] for entry in result["seeds"].values())


def test_validation_overlap_reads_the_batches_of_every_pass_as_the_training_does(tokenizer_dir, tmp_path, monkeypatch):
    """--validation_overlap counted the batches of one pass over the training blocks (max_steps x accumulation of them,
    cut short where a pass holds fewer): the updates of every later pass, which read the blocks again in another
    order, were never named. The batches it reads are the training's own, update by update, over passes of a length
    that gradient accumulation does not divide (a pass's last update takes the batches left)."""

    from experiments import books_pretraining
    from linformer_hf.training import pretraining
    from linformer_hf.training.pretraining import build_trainer

    real = _real_books(8)
    books = write_hub_dataset(tmp_path / "books", {"train": [real[:3], real[3:6]], "validation": [real[6:]]})
    shared = {
        "model.config.projected_length": 16,
        "model.config.max_sequence_length": 128,
        "model.config.num_hidden_layers": 1,
        "data.cache_dir": str(tmp_path / "cache"),
        "data.preprocessing_num_workers": 1,
        "data.block_size": 128,
        "data.max_train_blocks": 5,  # 3 updates a pass at 2 batches an update, the third of 1 batch
        "data.max_eval_blocks": 2,
        "training.per_device_train_batch_size": 1,
        "training.gradient_accumulation_steps": 2,
        "training.max_steps": 7,  # 2 passes and a third begun
        "training.warmup_steps": 1,
        "training.eval_steps": 100,
        "training.checkpointing_steps": 100,
        "training.report_to": [],
    }
    plan = books_plan(books, tokenizer_dir, tmp_path / "out", [{"name": "only"}], **shared)

    trained = []
    step = pretraining.MaskedLMTrainer.training_step

    def recording(self, model, inputs, num_items_in_batch=None):
        trained.append((self.state.global_step + 1, inputs["input_ids"].clone(), inputs["labels"].clone()))
        return step(self, model, inputs, num_items_in_batch)

    monkeypatch.setattr(pretraining.MaskedLMTrainer, "training_step", recording)
    resolved = books_pretraining.recipe(plan, plan.runs[0])
    resolved.training.output_dir = str(tmp_path / "trained")
    trainer = build_trainer(resolved, show_progress=False)
    try:
        trainer.train()
    finally:
        trainer.close()
    assert [update for update, _, _ in trained] == [1, 1, 2, 2, 3, 4, 4, 5, 5, 6, 7, 7]

    def text(ids, labels):
        ids = ids.clone()
        ids[labels != -100] = labels[labels != -100]
        return ids.tolist()

    resolved.training.output_dir = str(tmp_path / "read")
    trainer = build_trainer(resolved, show_progress=False)
    try:
        read = [
            (update, text(b["input_ids"], b["labels"])) for update, b in books_pretraining.training_batches(trainer)
        ]
    finally:
        trainer.close()
    assert read == [(update, text(ids, labels)) for update, ids, labels in trained]


def test_validation_overlap_refuses_what_it_would_answer_wrongly(tokenizer_dir, tmp_path):
    """Before any data or model is built: a plan validated on blocks held out of its training books themselves
    (no data.validation_datasets: all of that text is in the training books, and was reported as found there), and
    runs of one seed that read other batches (the first run of a seed stood for all, with its updates)."""

    from experiments import books_pretraining

    real = _real_books(8)
    books = write_hub_dataset(tmp_path / "books", {"train": [real[:3], real[3:6]], "validation": [real[6:]]})

    def plan(name, shared, runs):
        recipe = {
            "data.block_size": 256,
            "training.max_steps": 10,
            "training.warmup_steps": 1,
            "training.report_to": [],
        }
        return books_plan(books, tokenizer_dir, tmp_path / name, runs, **{**recipe, **shared})

    held_out_of_train = plan("held", {"data.validation_datasets": []}, [{"name": "a"}])
    with pytest.raises(ConfigError, match="held out of those very books"):
        books_pretraining.validation_overlap(held_out_of_train)
    other_batches = plan(
        "batches",
        {"data.validation_datasets": [{"path": books, "split": "validation"}]},
        [{"name": "a"}, {"name": "b", "overrides": {"training.gradient_accumulation_steps": 2}}],
    )
    with pytest.raises(ConfigError, match=r"runs a and b have one seed and read other .*gradient_accumulation_steps"):
        books_pretraining.validation_overlap(other_batches)
    sliced = plan("sliced", {"data.datasets": [{"path": books, "split": "train[:2]"}]}, [{"name": "a"}])
    with pytest.raises(ConfigError, match=r"reads a slice of one \(\{'path': .*'train\[:2\]'\}\)"):
        books_pretraining.validation_overlap(sliced)
    assert not os.path.exists(tmp_path / "held") and not os.path.exists(tmp_path / "batches")
