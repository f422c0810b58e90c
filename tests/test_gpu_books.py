"""Issue 35's GPU session at base width (`experiments/gpu_books.sh`): the preparation that copies what travels, the
wheels it installs there, the files it gathers (also from a run stopped part-way), and its CPU dry run end to end
(tiny models; the same plans, commands and files). No timing assertions."""

import csv
import json
import os
import re
import subprocess
import zipfile

import pyarrow.parquet as pq
import pytest
from prefork import python_executable
from training_utils import DATA, REPO, write_hub_dataset

import linformer_hf.outputs as outputs
from experiments import gpu_books

SCRIPT = os.path.join(REPO, "experiments", "gpu_books.sh")
BOOK_CHARACTERS = 40_000  # each stand-in book: real text cut to about 13,000 tokens of a 1,000-token tokenizer


@pytest.fixture(scope="module")
def small_books(tmp_path_factory):
    """A folder laid out like ../shared/data/gutenberg (3 train shards, a validation shard, the README declaring them)
    of 12 real books cut short, and a byte-level BPE tokenizer of 1,000 tokens trained on them."""
    from linformer_hf.training.tokenizer import train_bpe_tokenizer

    table = pq.ParquetFile(os.path.join(DATA, "gutenberg", "validation.parquet")).read_row_group(0)
    books = [{**row, "text": row["text"][:BOOK_CHARACTERS]} for row in table.slice(0, 12).to_pylist()]
    source = write_hub_dataset(
        tmp_path_factory.mktemp("source") / "gutenberg",
        {"train": [books[0:3], books[3:6], books[6:9]], "validation": [books[9:12]]},
    )
    tokenizer = str(tmp_path_factory.mktemp("tokenizer"))
    train_bpe_tokenizer((book["text"] for book in books), tokenizer, vocab_size=1000, model_max_length=512)
    return source, tokenizer


@pytest.fixture(scope="module")
def carried(small_books, tmp_path_factory):
    """What `prepare` carries (no wheels: the dry run's Python has `datasets`)."""
    source, tokenizer = small_books
    dest = str(tmp_path_factory.mktemp("carry") / ".gpu_books")
    return dest, gpu_books.prepare(source, tokenizer, dest, shards=(0, 2), wheels=False)


def test_prepare_carries_a_whole_set_of_shards_the_tokenizer_and_the_size(carried, small_books):
    from datasets import load_dataset

    from linformer_hf.training.validation import check_dataset_entry

    dest, manifest = carried
    books = os.path.join(dest, "gutenberg")
    # train shards 0 and 2 of 3, renamed as a whole set of 2 (a set with shards missing is refused before any work)
    assert sorted(os.listdir(books)) == [
        "README.md", "train-00000-of-00002.parquet", "train-00001-of-00002.parquet",
        "validation-00000-of-00001.parquet",
    ]  # fmt: skip
    assert [v["from"] for v in manifest["shards"].values()] == [
        "train-00000-of-00003.parquet", "train-00002-of-00003.parquet", "validation-00000-of-00001.parquet",
    ]  # fmt: skip
    assert all(v["books"] == 3 and v["characters"] == 3 * BOOK_CHARACTERS for v in manifest["shards"].values())
    with open(os.path.join(books, "README.md")) as fh:
        readme = fh.read()
    assert (
        readme.startswith("---\nconfigs:") and "train-00002-of-00003.parquet as train-00001-of-00002.parquet" in readme
    )
    for split in ("train", "validation"):
        check_dataset_entry({"path": books, "split": split}, "data.datasets", "text")  # the runs' own check
    assert len(load_dataset(books, split="train")) == 6
    with open(os.path.join(dest, "tokenizer-books", "tokenizer_config.json")) as fh:
        assert json.load(fh)["padding_side"] == "right"
    manifest_bytes = os.path.getsize(os.path.join(dest, "MANIFEST.json"))  # written last, with the sizes in it
    assert manifest["wheels"] == [] and manifest["bytes"]["carried"] + manifest_bytes == gpu_books.folder_bytes(dest)
    assert 0 < manifest["bytes"]["tree"] + manifest["bytes"]["carried"] < gpu_books.LIMIT_BYTES
    with open(os.path.join(dest, "MANIFEST.json")) as fh:
        assert json.load(fh)["shards"] == manifest["shards"]


def test_prepare_refuses_what_cannot_travel(small_books, tmp_path):
    source, tokenizer = small_books
    with pytest.raises(gpu_books.PrepareError, match="distinct shards among 0..2"):
        gpu_books.prepare(source, tokenizer, str(tmp_path / "a"), shards=(0, 3), wheels=False)
    with pytest.raises(gpu_books.PrepareError, match="over the device call's 0 MiB"):
        gpu_books.prepare(source, tokenizer, str(tmp_path / "b"), shards=(0,), wheels=False, limit=1000)
    with pytest.raises(gpu_books.PrepareError, match="No tokenizer in"):
        gpu_books.prepare(source, str(tmp_path), str(tmp_path / "c"), wheels=False)
    # inside the checkout, a folder git does not ignore is refused before anything is copied
    unignored = os.path.join(REPO, "gpu-books-test-unignored")
    with pytest.raises(gpu_books.PrepareError, match="is not ignored by git"):
        gpu_books.prepare(source, tokenizer, unignored, wheels=False)
    assert not os.path.exists(unignored)
    # the default destination is ignored (.gitignore), so it is carried, never committed
    inside = os.path.join(gpu_books.DEST, "gutenberg", "train-00000-of-00002.parquet")
    assert subprocess.run(["git", "check-ignore", "-q", inside], cwd=REPO).returncode == 0


def _wheel(folder, name, version, requires=()):
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as wheel:
        meta = [f"Name: {name}", f"Version: {version}", *[f"Requires-Dist: {r}" for r in requires]]
        wheel.writestr(f"{name}-{version}.dist-info/METADATA", "\n".join(meta) + "\n")
    return path


def test_only_the_wheels_the_image_lacks_or_holds_unfit_are_installed(tmp_path):
    from importlib import metadata

    dill = metadata.version("dill")
    requires = [
        "fsspec<=2000.1.0,>=1999.1.0",  # the installed fsspec is newer: the carried one goes in
        f"dill=={dill}",  # fits: the image's stays
        "somethingnotinstalled>=1.0",
        'pytest; extra == "tests"',  # an extra's need: never installed for it
    ]
    chosen = [
        _wheel(tmp_path, "datasets", "9.9.9", requires), _wheel(tmp_path, "fsspec", "2000.1.0"),
        _wheel(tmp_path, "somethingnotinstalled", "1.0"),
    ]  # fmt: skip
    _wheel(tmp_path, "dill", dill)
    assert sorted(gpu_books.wheels_to_install(str(tmp_path))) == sorted(chosen)
    os.remove(chosen[0])
    with pytest.raises(gpu_books.PrepareError, match="No datasets wheel"):
        gpu_books.wheels_to_install(str(tmp_path))


def test_gathering_a_run_stopped_part_way_keeps_its_curve(carried, tmp_path):
    """A run killed at its stage's end (no summary, no final evaluation) still gives its evaluations, each with the
    training tokens/s of the updates before it (no compile or evaluation counted) and the seconds since its start.
    What an earlier gather killed while writing curves.csv left beside it is removed."""
    dest, _ = carried
    sets = {
        "data.datasets": [{"path": os.path.join(dest, "gutenberg"), "split": "train"}],
        "data.validation_datasets": [{"path": os.path.join(dest, "gutenberg"), "split": "validation"}],
    }
    work = tmp_path / "work"
    old = os.getcwd()
    os.chdir(REPO)  # the plans' paths are from the root of a checkout
    try:
        plan = gpu_books.gpu_plan(os.path.join("configs", "books", "gpu_base.yaml"), str(work / "base"), sets)
        run_dir = os.path.join(plan.output_dir, "roberta_n512")
        os.makedirs(run_dir)
        metrics = dict(eval_loss=6.0, perplexity=400.0, mask_input_perplexity=700.0, perplexity_over_unigram=0.9)
        rows = [{"time": 100.0, "event": "start", "step": 0}, {"time": 101.0, "event": "eval", "step": 0, **metrics}]
        rows += [
            {"time": 110.0, "step": 1, "loss": 7.0},
            {"time": 110.0, "event": "compiled", "step": 1, "seconds": 9.0},
        ]
        rows += [{"time": 110.0 + 0.05 * (s - 1), "step": s, "loss": 6.0} for s in range(2, 81)]
        rows += [{"time": 114.5, "event": "eval", "step": 80, **dict(metrics, perplexity=300.0)}]
        rows += [{"time": 115.0 + 0.1 * (s - 81), "step": s, "loss": 5.0} for s in range(81, 101)]
        with open(os.path.join(run_dir, "train_log.jsonl"), "w") as fh:
            fh.write("".join(json.dumps(row) + "\n" for row in rows))
        # The Linformer, stopped by its time budget at update 90: against RoBERTa at update 80, the last both evaluated
        linformer_dir = os.path.join(plan.output_dir, "linformer_n4096_k256")
        os.makedirs(linformer_dir)
        rows = [{"time": 100.0, "event": "start", "step": 0}]
        rows += [{"time": 101.0 + s, "event": "eval", "step": s, **dict(metrics, mask_input_perplexity=m)}
                 for s, m in ((0, 800.0), (80, 630.0), (90, 600.0))]  # fmt: skip
        with open(os.path.join(linformer_dir, "train_log.jsonl"), "w") as fh:
            fh.write("".join(json.dumps(row) + "\n" for row in rows))
        with open(work / "stages.tsv", "w") as fh:
            fh.write("roberta_n512\t124\t40\t128\t\n")
        out = tmp_path / "out"
        # what an earlier gather killed while writing curves.csv left (gather wrote it through a temporary file of
        # its own naming, `.curves.csv.tmp-<pid>`, that no later gather removed): removed now, as its writer is dead
        out.mkdir()
        dead = subprocess.Popen([python_executable(), "-c", "pass"])
        dead.wait()
        debris = out / f"curves.csv.tmp-{dead.pid}-0123abcd@{outputs._host_tag()}"
        debris.write_text("plan,run\n")
        assert gpu_books.main(["gather", str(out), str(work)]) == 0
    finally:
        os.chdir(old)
    assert sorted(os.listdir(out)) == ["curves.csv", "report.md", "results.json"]
    with open(out / "curves.csv", newline="") as fh:
        curve = list(csv.DictReader(fh))
    assert [(r["plan"], r["run"], r["n"], r["step"], r["tokens"], r["perplexity"]) for r in curve][:2] == [
        ("base", "roberta_n512", "512", "0", "0", "400.0"), ("base", "roberta_n512", "512", "80", "2621440", "300.0"),
    ]  # fmt: skip
    # 32,768 tokens an update every 0.05 s from update 2 to 80 (update 1's gap is its compile, not counted)
    assert (curve[0]["train_tokens_per_s"], curve[1]["train_tokens_per_s"]) == ("", "655360")
    assert (curve[0]["elapsed_s"], curve[1]["elapsed_s"]) == ("1.0", "14.5")
    report = (out / "report.md").read_text()
    assert "| roberta_n512 | 124 | 40 | 128 |" in report
    assert "| roberta_n512 | no | 80 | 2,621,440 | 300.0 | 700.0 | 0.900 | 1.000 |" in report
    # 630 / 700 at update 80, not its last 600 against RoBERTa's last 700 (0.857)
    assert "| linformer_n4096_k256 | no | 90 | 2,949,120 | 400.0 | 600.0 | 0.900 | 0.900 (at 80) |" in report
    assert "| 80 | 300.0 / 700.0 |" in report and "Uptraining" not in report  # no uptraining ran


def test_missing_data_stops_at_once_and_still_returns_the_reason(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), GPU_BOOKS_TINY="1", GPU_BOOKS_DIR=str(tmp_path / "nothing"),
               GPU_BOOKS_WORK=str(tmp_path / "work"), PYTHON=python_executable())  # fmt: skip
    done = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["log.txt", "report.md"]
    report = (out / "report.md").read_text()
    assert "tokenizer-books/tokenizer.json is missing: run `python -m experiments.gpu_books prepare`" in report
    assert "| tokenise | 3 |" in report
    assert "stopping before any run" in (out / "log.txt").read_text()


def test_cpu_dry_run_runs_every_stage_and_returns_the_curves(carried, tmp_path):
    """The exact script on a CPU (GPU_BOOKS_TINY=1): the blocks tokenised once, both Figure 3 runs, the uptraining
    from the RoBERTa just trained and its control, and the files that come back."""
    dest, _ = carried
    out, work = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ, OUT=str(out), GPU_BOOKS_TINY="1", GPU_BOOKS_DIR=dest, GPU_BOOKS_WORK=str(work),
               PYTHON=python_executable())  # fmt: skip
    done = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["curves.csv", "log.txt", "report.md", "results.json"]
    log = (out / "log.txt").read_text()
    stages = ["tokenise", "roberta_n512", "linformer_n4096_k256", "uptrain_linformer_n4096_k256"]
    stages.append("uptrain_roberta_n512_control")
    for name in stages:
        assert f"stage {name} exit 0" in log, name
    # tokenised and packed once, before the runs: every run, RoBERTa's, the Linformer's (whose tokenizer pads on the
    # right) and the uptraining ones, finds the blocks cached
    before, runs = log.split("stage roberta_n512:", 1)
    assert "Tokenising" in before and "Packing" in before
    assert "Tokenising" not in runs and "Packing" not in runs
    assert f"--model.pretrained {work}/base/roberta_n512/final" in log  # the teacher is the RoBERTa just trained
    with open(out / "curves.csv", newline="") as fh:
        curve = list(csv.DictReader(fh))
    got = {(r["plan"], r["run"], r["model_type"], r["n"], r["k"], r["step"], r["tokens"]) for r in curve}
    base = {("base", "roberta_n512", "roberta", "512", "", s, str(int(s) * 2 * 4096)) for s in ("0", "2", "4")}
    base |= {
        ("base", "linformer_n4096_k256", "linformer", "4096", "256", s, str(int(s) * 8192)) for s in ("0", "2", "4")
    }
    up = {("uptrain", "linformer_n4096_k256", "linformer", "4096", "256", s, str(int(s) * 8192)) for s in "012"}
    up |= {("uptrain", "roberta_n512_control", "roberta", "512", "", s, str(int(s) * 8192)) for s in "012"}
    assert got == base | up
    for row in curve:
        assert 1 < float(row["perplexity"]) < 2000 and 1 < float(row["mask_input_perplexity"]) < 2000
    assert all(float(r["train_tokens_per_s"]) > 0 for r in curve if r["plan"] == "base" and r["step"] == "4")
    report = (out / "report.md").read_text()
    assert "| roberta_n512 | yes | 4 | 32,768 |" in report and "| linformer_n4096_k256 | yes | 4 | 32,768 |" in report
    assert "## Uptraining against the teacher reading 512" in report and "not measured" not in report
    assert "--model.convert_from_roberta" in report and "- datasets " in report
    # the commands the stages printed and started are report.md's, the uptraining ones with their time budget
    started = [line[2:] for line in log.splitlines() if line.startswith("$ python -m linformer_hf.training.pretrain")]
    listed = report.split("## Commands", 1)[1].split("```")[1].strip().splitlines()
    assert started == listed and len(started) == 4
    assert all(re.search(r" --training\.max_train_minutes [0-9.]+$", line) for line in listed[2:]), listed[2:]
    results = json.loads((out / "results.json").read_text())
    assert [r["run"] for r in results["runs"]] == [
        "roberta_n512", "linformer_n4096_k256", "linformer_n4096_k256", "roberta_n512_control",
    ]  # fmt: skip
    assert not os.path.exists(work / "base" / "roberta_n512" / "checkpoints")  # checkpoints: none written
