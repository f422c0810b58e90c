"""The replication experiment (issue 6): data separation, plan validation, and one tiny end-to-end plan."""

import csv
import dataclasses
import json
import os

import pytest
from conftest import SHARED_DATA

from experiments.replication import load_plan, prepare_data, pretrain_variant, run_plan, summarize
from linformer_hf.training.config import ConfigError

REPO = os.path.join(os.path.dirname(__file__), "..")
QUICK = os.path.join(REPO, "configs", "replication", "quick.yaml")
FULL = os.path.join(REPO, "configs", "replication", "full.yaml")


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """The first rows of each file of ../shared/data the plan reads, in its layout: the plan runs its subprocesses on
    this as on the whole files, without tokenising 3,000 paragraphs for each 6-update pretraining run (most of the
    tiny plan's time) or reading all 67k SST-2 rows for each 64-example fine-tuning run."""
    root = tmp_path_factory.mktemp("small_data")
    heads = {
        os.path.join("wikitext-2", "valid.txt"): 400,
        os.path.join("imdb", "train.csv"): None,  # rows, not lines: reviews are quoted CSV fields
        os.path.join("sst2", "train.tsv"): 2001,
        os.path.join("sst2", "dev.tsv"): 201,
    }
    for name, lines in heads.items():
        os.makedirs(root / os.path.dirname(name), exist_ok=True)
        with open(os.path.join(SHARED_DATA, name), encoding="utf-8", newline="") as src:
            with open(root / name, "w", encoding="utf-8", newline="") as dst:
                if lines is None:
                    rows = list(csv.DictReader(src))[:400]
                    writer = csv.DictWriter(dst, fieldnames=["text", "label"])
                    writer.writeheader()
                    writer.writerows(rows)
                else:
                    dst.writelines(line for _, line in zip(range(lines), src))
    return str(root)


def tiny_overrides(tmp_path, data_dir=SHARED_DATA, **extra):
    overrides = dict(
        output_dir=str(tmp_path / "run"),
        data_dir=data_dir,
        imdb_heldout=100 if data_dir != SHARED_DATA else 500,  # small_data has 400 reviews
        vocab_size=512,
        block_size=64,
        max_eval_blocks=8,
        model=dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_sequence_length=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        ),
        variants=[
            dict(name="roberta", model_type="roberta"),
            dict(name="linformer_k16", config=dict(projected_length=16)),
            dict(
                name="linformer_n128",
                config=dict(max_sequence_length=128, projected_length=32),
                block_size=128,
                per_device_train_batch_size=2,
            ),
            # run on its own at the end of the end-to-end test (only_variants), as a variant added to a finished plan
            dict(name="performer_m16", model_type="performer", config=dict(num_random_features=16)),
        ],
        pretrain=dict(
            seed=3,
            per_device_train_batch_size=4,
            max_steps=6,
            learning_rate=1e-3,
            warmup_steps=1,
            eval_steps=3,
            logging_steps=3,
        ),
        finetune=[
            dict(
                name="sst2",
                task="sst2",
                max_seq_length=32,
                max_train_samples=64,
                max_eval_samples=32,
                num_train_epochs=1,
                variants=["roberta", "linformer_k16", "performer_m16"],
            ),
            dict(
                name="imdb_n128",
                task="imdb",
                max_seq_length=128,
                max_train_samples=32,
                max_eval_samples=16,
                num_train_epochs=1,
                seeds=[2],
            ),
        ],
        seeds=[1],
        only_variants=["roberta", "linformer_k16", "linformer_n128"],
    )
    overrides.update(extra)
    return overrides


def test_heldout_reviews_never_reach_pretraining(tmp_path):
    plan = load_plan(QUICK, dict(output_dir=str(tmp_path), data_dir=SHARED_DATA, imdb_heldout=300))
    paths = prepare_data(plan)
    with open(paths["imdb_train"], encoding="utf-8") as fh:
        train = [row["text"] for row in csv.DictReader(fh)]
    with open(paths["imdb_heldout"], encoding="utf-8") as fh:
        heldout = [row["text"] for row in csv.DictReader(fh)]
    with open(paths["pretrain_text"], encoding="utf-8") as fh:
        pretrain_lines = set(fh.read().splitlines())
    assert len(heldout) == 300 and len(train) == 2000 - 300
    assert not set(heldout) & set(train)
    assert not any(review in pretrain_lines for review in heldout)
    assert all(review in pretrain_lines for review in train[:50])  # the training reviews are pretraining text
    assert all("<br />" not in review for review in heldout)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(variants=[dict(name="a"), dict(name="a")]), "unique names"),
        (
            dict(finetune=[dict(name="x", task="qnli", max_seq_length=64)]),
            r"finetune\[0\].task: must be one of 'sst2', 'imdb'",
        ),
        (dict(finetune=[dict(name="x", task="sst2", max_seq_length=64, variants=["nope"])]), "unknown variants"),
        (dict(variants=[dict(name="a", sharing="none")]), r"Unknown key\(s\) 'variants\[0\].sharing'"),
        (
            dict(variants=[dict(name="a", config=dict(projected_lenght=8))]),
            r"Unknown LinformerConfig field.*projected_lenght",
        ),
        (dict(variants=[dict(name="a", config=dict(projected_length=1024))]), "Invalid LinformerConfig"),
        (dict(pretrain=dict(max_steps="many")), "pretrain.max_steps: expected an integer"),
        (dict(pretrain=dict(lr_scheduler_type="cosin")), "lr_scheduler_type must be one of"),
        (dict(pretrain_data=dict(mlm_probability=1.5)), "mlm_probability must be in"),
        (dict(pretrain_data=dict(block_size=128)), "pretrain_data.block_size is set by the replication"),
        # every run starts over in its own directory: neither resumed nor left to the plan to overwrite
        (
            dict(pretrain=dict(resume_from_checkpoint="latest")),
            "pretrain.resume_from_checkpoint is set by the replication",
        ),
        (dict(pretrain=dict(overwrite_output_dir=True)), "pretrain.overwrite_output_dir is set by the replication"),
        (dict(data_dir="/nonexistent"), "not found under data_dir"),
        (dict(learning_rate=1.0), "Unknown key"),
        (dict(pretrain=dict(max_steps=6, stop_after_steps=3)), "stop_after_steps"),
        (
            dict(variants=[dict(name="p", model_type="performer", config=dict(kernel="gelu"))]),
            "Invalid PerformerConfig.*kernel",
        ),
        (
            dict(variants=[dict(name="p", model_type="performer", config=dict(projected_length=64))]),
            r"Unknown PerformerConfig field.*projected_length",
        ),
        (dict(variants=[dict(name="a")], only_variants=["b"]), r"only_variants \['b'\] must name some"),
        (dict(variants=[dict(name="a")], only_variants=[]), "only_variants"),
    ],
)
def test_bad_plans_fail_before_anything_runs(overrides, message, tmp_path):
    overrides.setdefault("output_dir", str(tmp_path))
    overrides.setdefault("data_dir", SHARED_DATA)
    with pytest.raises(ConfigError, match=message):
        load_plan(QUICK, overrides)
    assert not os.path.exists(tmp_path / "data")


class Stop(Exception):
    pass


def test_tiny_plan_trains_every_variant_under_one_recipe_and_reports(tmp_path, small_data, forked_subprocesses):
    plan = load_plan(QUICK, tiny_overrides(tmp_path, small_data))

    # Stopped at the start of the second fine-tuning run: what finished is saved, marked incomplete.
    started = []

    def stop_at_second_finetune(message):
        if message.startswith("[finetune]") and "accuracy" not in message:
            started.append(message)
            if len(started) == 2:
                raise Stop

    with pytest.raises(Stop):
        run_plan(plan, log=stop_at_second_finetune)
    partial = json.loads((tmp_path / "run" / "results.json").read_text())
    assert partial["complete"] is False and len(partial["pretrain"]) == 3 and len(partial["finetune"]) == 1
    assert "roberta" in (tmp_path / "run" / "results.md").read_text()
    # What a run killed midway leaves in its directory: the rerun starts it over there (overwrite_output_dir).
    leftover = tmp_path / "run" / "finetune" / "linformer_k16" / "sst2" / "seed1" / "checkpoint-1"
    leftover.mkdir(parents=True)

    messages = []
    results = run_plan(plan, log=messages.append)
    assert results["complete"] is True

    pretrained = results["pretrain"]
    assert set(pretrained) == {"roberta", "linformer_k16", "linformer_n128"}
    # identical recipe: same updates and tokens for every variant, including the one on longer blocks
    assert {r["steps"] for r in pretrained.values()} == {6}
    assert {r["tokens"] for r in pretrained.values()} == {6 * 4 * 64}
    for r in pretrained.values():
        assert [e["step"] for e in r["evals"]] == [0, 3, 6]
        assert r["evals"][-1]["perplexity"] < r["evals"][0]["perplexity"]
        assert r["train_seconds"] > 0

    ran = [(f["variant"], f["task"], f["seed"]) for f in results["finetune"]]
    # sst2 only for the variants it names (plan seeds); imdb_n128 only where n >= 128, with its own seeds;
    # seed by seed
    assert ran == [("roberta", "sst2", 1), ("linformer_k16", "sst2", 1), ("linformer_n128", "imdb_n128", 2)]
    assert all(f"[finetune] {v} {t} seed {s}" in messages for v, t, s in ran)
    assert not leftover.exists()

    # The short-input check: first-layer attention RMS at each length the model takes (16, 64; 512 is too long).
    for r in pretrained.values():
        assert sorted(r["attention_rms"], key=int) == ["16", "64"]
        assert all(value > 0 for value in r["attention_rms"].values())
    assert all(0.0 <= f["test_accuracy"] <= 1.0 for f in results["finetune"])

    rows = {row["variant"]: row for row in summarize(results)}
    assert rows["roberta"]["perplexity_vs_roberta"] == pytest.approx(1.0)
    assert rows["linformer_k16"]["perplexity"] == pretrained["linformer_k16"]["final_perplexity"]
    report = (tmp_path / "run" / "results.md").read_text()
    assert f"{pretrained['linformer_k16']['final_perplexity']:.2f}" in report
    assert (tmp_path / "run" / "perplexity.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["pretrain"]["roberta"]["command"].endswith("--no_progress")

    # A rerun resumes: every result is already there, nothing is trained again.
    again = run_plan(plan, log=lambda *_: None)
    assert again["pretrain"]["roberta"]["wall_seconds"] == pretrained["roberta"]["wall_seconds"]

    # A variant added to the finished plan, run alone: a Performer, pretrained and fine-tuned under the same recipe,
    # reported beside the earlier runs, which are not repeated.
    added = load_plan(QUICK, tiny_overrides(tmp_path, small_data, only_variants=["performer_m16"]))
    messages = []
    results = run_plan(added, log=messages.append)
    assert [m for m in messages if "accuracy" not in m and "perplexity" not in m] == [
        "[pretrain] performer_m16",
        "[finetune] performer_m16 sst2 seed 1",
    ]
    performer = results["pretrain"]["performer_m16"]
    assert performer["recipe"]["model"]["model_type"] == "performer"
    assert performer["steps"] == 6 and performer["tokens"] == 6 * 4 * 64
    assert performer["evals"][-1]["perplexity"] < performer["evals"][0]["perplexity"]
    assert all(value > 0 for value in performer["attention_rms"].values())
    assert results["pretrain"]["roberta"] == pretrained["roberta"]  # reported from its saved result, not rerun
    ran = [(f["variant"], f["task"], f["seed"]) for f in results["finetune"]]
    assert ran == [
        ("roberta", "sst2", 1),
        ("linformer_k16", "sst2", 1),
        ("performer_m16", "sst2", 1),
        ("linformer_n128", "imdb_n128", 2),
    ]
    rows = {row["variant"]: row for row in summarize(results)}
    assert rows["performer_m16"]["perplexity_vs_roberta"] == pytest.approx(
        performer["final_perplexity"] / pretrained["roberta"]["final_perplexity"]
    )
    assert 0.0 <= rows["performer_m16"]["sst2"][0] <= 1.0
    assert "performer_m16" in (tmp_path / "run" / "results.md").read_text()


def test_the_shipped_full_plan_has_performers_under_the_common_recipe():
    """Performer variants: their longest input is their position table, sized to the plan's blocks, as RoBERTa's."""
    from experiments.replication import variant_model_fields, variant_n

    plan = load_plan(FULL, dict(data_dir=SHARED_DATA))
    performers = [v for v in plan.variants if v.model_type == "performer"]
    assert {v.config["kernel"] for v in performers} == {"softmax", "relu"}
    for variant in performers:
        fields = variant_model_fields(plan, variant)
        assert "max_sequence_length" not in fields
        assert variant_n(plan, variant) == plan.block_size
        assert {k: v for k, v in fields.items() if k in plan.model} == {
            k: v for k, v in plan.model.items() if k != "max_sequence_length"
        }


def test_plan_overrides_use_the_recipe_parser(tmp_path):
    """One override style: --key value and --section.key value, parsed and applied as a recipe's are."""
    from linformer_hf.training.config import parse_overrides

    overrides = parse_overrides(
        [
            "--output_dir",
            str(tmp_path),
            "--data_dir",
            SHARED_DATA,
            "--pretrain.seed=43",
            "--model.hidden_size",
            "32",
            "--seeds",
            "[1, 2]",
        ],
        top_level_keys=True,
    )
    plan = load_plan(QUICK, overrides)
    quick = load_plan(QUICK, dict(data_dir=SHARED_DATA))
    assert plan.pretrain == dataclasses.replace(quick.pretrain, seed=43)
    assert plan.model == {**quick.model, "hidden_size": 32}
    assert plan.seeds == [1, 2] and plan.output_dir == str(tmp_path)
    with pytest.raises(ConfigError, match="'seeds' is not a section"):
        load_plan(QUICK, {"data_dir": SHARED_DATA, "seeds.first": 1})


def test_variant_n_is_the_models_longest_input():
    """The plan's n for each variant is `max_input_length` of the config the variant is pretrained with."""
    from experiments.replication import variant_model_fields, variant_n
    from linformer_hf.models import max_input_length
    from linformer_hf.training.model_setup import make_config

    plan = load_plan(
        QUICK,
        dict(
            data_dir=SHARED_DATA,
            variants=[
                dict(name="r", model_type="roberta"),
                dict(name="r1024", model_type="roberta", block_size=1024),
                dict(name="l", config=dict(projected_length=64)),
                dict(name="l1024", config=dict(max_sequence_length=1024, projected_length=64), block_size=1024),
            ],
        ),
    )
    assert [variant_n(plan, v) for v in plan.variants] == [512, 1024, 512, 1024]
    for v in plan.variants:
        config = make_config(v.model_type, {**variant_model_fields(plan, v), "pad_token_id": 1})
        assert variant_n(plan, v) == max_input_length(config)


def test_a_time_budget_without_max_steps_reports_the_updates_actually_run(tmp_path, small_data):
    """No pretrain.max_steps (the recipe default applies) and a time budget that ends the run after one update."""
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    overrides = tiny_overrides(
        tmp_path,
        small_data,
        pretrain=dict(seed=3, per_device_train_batch_size=4, max_train_minutes=0.0, warmup_steps=1),
        rms_lengths=[16],
    )
    plan = load_plan(QUICK, overrides)
    paths = prepare_data(plan)
    tokenizer_dir = str(tmp_path / "tok")
    train_bpe_tokenizer(iter_text_files([paths["pretrain_text"]]), tokenizer_dir, vocab_size=512, model_max_length=64)
    result = pretrain_variant(plan, plan.variants[1], paths, tokenizer_dir)
    assert result["steps"] == 1 and result["tokens"] == 1 * 4 * 64
    assert [e["step"] for e in result["evals"]] == [1]
    assert result["final_perplexity"] == result["evals"][-1]["perplexity"]


def test_a_stop_signal_to_the_plan_stops_its_running_run_and_the_plan(tmp_path):
    """SIGTERM to the replication driver reaches its running run, which stops, and the plan stops naming the signal
    and what the next start does. Before, the driver died at once and left the run training alone; a Ctrl-C SIGKILLed
    the run a quarter of a second later."""
    import signal
    import sys

    from training_utils import signal_this_process_once_started, stoppable_child

    from experiments import replication

    child, events = stoppable_child(tmp_path, exit_code=75)
    signal_this_process_once_started(events, signal.SIGTERM)
    log_path = str(tmp_path / "logs" / "pretrain_roberta.log")
    with pytest.raises(
        SystemExit, match="SIGTERM received: run pretrain_roberta was stopped .exit code 75.* again from"
    ):
        replication._run([sys.executable, str(child), "run"], log_path)
    assert events.read_text().splitlines() == ["run started", "run got SIGTERM"]
