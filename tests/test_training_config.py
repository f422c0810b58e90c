"""Bad input fails clearly, before any training: unknown keys, missing files/columns, block size > n, bad
checkpoints."""

import os

import pytest
from training_utils import REPO, SST2_DEV, SST2_TRAIN, WIKITEXT, run_script, tiny_pretrain_overrides

from linformer_hf.training.config import ConfigError, FinetuneRecipe, PretrainRecipe, load_recipe, parse_overrides
from linformer_hf.training.pretraining import run_pretraining
from linformer_hf.training.tokenizer import train_bpe_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    lines = []
    with open(WIKITEXT, encoding="utf-8") as fh:
        for _, line in zip(range(300), fh):
            lines.append(line)
    train_bpe_tokenizer(lines, str(out), vocab_size=400, model_max_length=64)
    return str(out)


def pretrain_recipe(tokenizer_dir, out, **extra):
    overrides = tiny_pretrain_overrides(tokenizer_dir, out, max_steps=3)
    overrides.update(extra)
    return load_recipe(PretrainRecipe, None, extra=overrides)


def test_unknown_key_is_named_and_allowed_keys_listed(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("training:\n  learning_rat: 1.0e-4\n")
    with pytest.raises(ConfigError) as err:
        load_recipe(PretrainRecipe, str(cfg), extra={"data.train_files": [WIKITEXT]})
    msg = str(err.value)
    assert "training.learning_rat" in msg and "learning_rate" in msg and "warmup_steps" in msg
    with pytest.raises(ConfigError, match="Unknown section.*'optimiser'.*Allowed sections: data, model"):
        load_recipe(PretrainRecipe, None, extra={"optimiser.lr": 1, "data.train_files": [WIKITEXT]})


def test_overrides_are_typed():
    extra = parse_overrides(
        [
            "--training.learning_rate",
            "5e-4",
            "--training.max_steps=10",
            "--training.warmup_steps=2",
            "--data.train_files",
            f"[{WIKITEXT}]",
            "--training.max_grad_norm",
            "null",
            "--training.report_to",
            "tensorboard",
        ]
    )
    recipe = load_recipe(PretrainRecipe, None, extra=extra)
    assert recipe.training.learning_rate == 5e-4 and isinstance(recipe.training.learning_rate, float)
    assert recipe.training.max_steps == 10 and recipe.training.max_grad_norm is None
    assert recipe.training.report_to == ["tensorboard"]
    # The defaults are the paper's (fairseq RoBERTa) recipe.
    t = recipe.training
    assert (t.adam_beta1, t.adam_beta2, t.adam_epsilon, t.weight_decay, t.learning_rate) == (
        0.9,
        0.98,
        1e-6,
        0.01,
        5e-4,
    )
    with pytest.raises(ConfigError, match="training.max_steps: expected an integer"):
        load_recipe(PretrainRecipe, None, extra={"training.max_steps": "many", "data.train_files": [WIKITEXT]})


def test_unknown_model_config_field(tokenizer_dir, tmp_path):
    recipe = pretrain_recipe(tokenizer_dir, tmp_path / "o", **{"model.config.projected_lenght": 8})
    with pytest.raises(ConfigError, match=r"projected_lenght.*Allowed fields:.*projected_length"):
        run_pretraining(recipe, show_progress=False)
    assert not os.path.exists(tmp_path / "o")


def test_missing_files(tmp_path):
    with pytest.raises(ConfigError, match="Data file not found: .*nope.txt"):
        load_recipe(PretrainRecipe, None, extra={"data.train_files": [str(tmp_path / "nope.txt")]})
    with pytest.raises(ConfigError, match="Config file not found: .*Pass an existing YAML file as --config"):
        load_recipe(PretrainRecipe, str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="data.train_file not found"):
        load_recipe(FinetuneRecipe, None, extra={"model.pretrained": str(tmp_path), "data.train_file": "x.tsv"})


def test_block_size_larger_than_n_fails_before_training(tokenizer_dir, tmp_path):
    recipe = pretrain_recipe(tokenizer_dir, tmp_path / "o", **{"data.block_size": 128})  # tiny model: n = 64
    with pytest.raises(ConfigError, match=r"block_size=128 is larger than the model's longest input n=64"):
        run_pretraining(recipe, show_progress=False)
    assert not os.path.exists(tmp_path / "o")


def test_bad_checkpoint_dirs(tokenizer_dir, tmp_path):
    not_ckpt = tmp_path / "not_a_checkpoint"
    not_ckpt.mkdir()
    recipe = pretrain_recipe(tokenizer_dir, tmp_path / "o", **{"training.resume_from_checkpoint": str(not_ckpt)})
    with pytest.raises(ConfigError, match="is not a checkpoint of this script"):
        run_pretraining(recipe, show_progress=False)
    recipe = pretrain_recipe(tokenizer_dir, tmp_path / "o", **{"training.resume_from_checkpoint": "latest"})
    with pytest.raises(ConfigError, match="no checkpoint under"):
        run_pretraining(recipe, show_progress=False)
    recipe = pretrain_recipe(tokenizer_dir, tmp_path / "o", **{"training.resume_from_checkpoint": str(tmp_path / "x")})
    with pytest.raises(ConfigError, match="Checkpoint dir not found"):
        run_pretraining(recipe, show_progress=False)
    assert not os.path.exists(tmp_path / "o")


def test_missing_tokenizer_dir_says_how_to_make_one(tmp_path):
    recipe = load_recipe(
        PretrainRecipe, None, extra={"data.train_files": [WIKITEXT], "tokenizer.name_or_path": str(tmp_path / "tok")}
    )
    with pytest.raises(ConfigError, match="python -m linformer_hf.training.train_tokenizer"):
        run_pretraining(recipe, show_progress=False)


def test_finetune_missing_column_and_not_a_model_dir(tmp_path):
    from linformer_hf import LinformerConfig

    with pytest.raises(ConfigError, match="has no config.json"):
        load_recipe(FinetuneRecipe, None, extra={"model.pretrained": str(tmp_path), "data.train_file": SST2_TRAIN})
    LinformerConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_sequence_length=32,
        projected_length=8,
    ).save_pretrained(tmp_path)
    recipe = load_recipe(
        FinetuneRecipe,
        None,
        extra={
            "model.pretrained": str(tmp_path),
            "data.task": "qnli",
            "data.train_file": SST2_TRAIN,
            "data.validation_file": SST2_DEV,
            "training.output_dir": str(tmp_path / "o"),
        },
    )
    from linformer_hf.training.finetuning import run_finetuning

    with pytest.raises(ConfigError, match=r"lacks column\(s\) \['question'\].*has \['sentence', 'label'\]"):
        run_finetuning(recipe, show_progress=False)
    assert not os.path.exists(tmp_path / "o")
    with pytest.raises(ConfigError, match="data.task must be one of"):
        load_recipe(
            FinetuneRecipe,
            None,
            extra={"model.pretrained": str(tmp_path), "data.task": "mnli", "data.train_file": SST2_TRAIN},
        )


def test_script_exits_with_a_clear_message(tmp_path):
    res = run_script(["scripts/pretrain.py", "--config", "configs/pretrain/demo.yaml", "--training.warmup_step", "3"])
    assert res.returncode == 2
    assert "error: Unknown key(s) 'training.warmup_step'" in res.stderr and "warmup_steps" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("cls", [PretrainRecipe, FinetuneRecipe])
def test_optimizer_fields_are_shared_and_checked_at_load(cls, tmp_path):
    import dataclasses
    import typing

    from linformer_hf.training.config import OptimizerSection

    training = typing.get_type_hints(cls)["training"]
    assert issubclass(training, OptimizerSection)  # one home for the optimizer fields
    assert {f.name for f in dataclasses.fields(OptimizerSection)} <= {f.name for f in dataclasses.fields(training)}
    base = {"data.train_files": [WIKITEXT]} if cls is PretrainRecipe else {"model.pretrained": str(tmp_path)}
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"lr_scheduler_type must be one of .*cosine.*got 'cosin'"):
        load_recipe(cls, None, extra={**base, "training.lr_scheduler_type": "cosin"})
    with pytest.raises(ConfigError, match="adam_beta2 must be in"):
        load_recipe(cls, None, extra={**base, "training.adam_beta2": 1.5})


@pytest.mark.parametrize("cls", [PretrainRecipe, FinetuneRecipe])
def test_a_bare_no_is_a_word_where_a_word_is_meant(cls, tmp_path):
    """YAML reads `no` as false: `--training.mixed_precision no` (the documented value) once became 'False' and was
    refused; another text field given a bare boolean is refused with the fix, never stored as 'True'/'False'."""
    base = {"data.train_files": [WIKITEXT]} if cls is PretrainRecipe else {"model.pretrained": str(tmp_path)}
    (tmp_path / "config.json").write_text("{}")
    for raw, expected in (("no", "no"), ("'no'", "no"), ("bf16", "bf16"), ("null", None)):
        overrides = parse_overrides(["--training.mixed_precision", raw])
        assert load_recipe(cls, None, extra={**base, **overrides}).training.mixed_precision == expected
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text("training:\n  mixed_precision: no\n")
    assert load_recipe(cls, str(recipe_file), extra=base).training.mixed_precision == "no"
    with pytest.raises(ConfigError, match="mixed_precision must be null, no, fp16 or bf16, got True"):
        load_recipe(cls, None, extra={**base, **parse_overrides(["--training.mixed_precision", "yes"])})
    with pytest.raises(ConfigError, match=r"training.output_dir: expected a string, got the boolean False.*Quote"):
        load_recipe(cls, None, extra={**base, **parse_overrides(["--training.output_dir", "off"])})


def test_flags_take_the_dashed_and_the_underscored_form():
    from linformer_hf.cli import ArgumentParser
    from linformer_hf.training.config import parse_overrides

    parser = ArgumentParser()
    parser.add_argument("--max_sequence_length", type=int)
    parser.add_argument("--dry_run", action="store_true")
    args, rest = parser.parse_known_args(["--max-sequence-length=7", "--dry-run", "--not-a-flag", "x"])
    assert (args.max_sequence_length, args.dry_run, rest) == (7, True, ["--not-a-flag", "x"])
    assert parse_overrides(["--training.max-steps", "5", "--data.max-seq-length=8"]) == {
        "training.max_steps": 5,
        "data.max_seq_length": 8,
    }


@pytest.mark.parametrize("cls", [PretrainRecipe, FinetuneRecipe])
def test_the_adamw_kernel_is_a_setting_that_reaches_the_trainers_optimizer(cls, tmp_path):
    """training.optim picks torch's AdamW kernel for either command (null: pretraining's unfused update of the
    recorded runs, fine-tuning's fused Trainer default), and the Trainer builds that optimizer; an optimizer that the
    adam_* fields do not describe is refused at load."""
    import torch
    from transformers import Trainer

    from linformer_hf.training import finetuning, pretraining

    base = {"data.train_files": [WIKITEXT]} if cls is PretrainRecipe else {"model.pretrained": str(tmp_path)}
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="training.optim must be adamw_torch or adamw_torch_fused .*got 'adafactor'"):
        load_recipe(cls, None, extra={**base, "training.optim": "adafactor"})

    def optimizer(optim):
        recipe = load_recipe(cls, None, extra={**base, "training.optim": optim, "training.output_dir": str(tmp_path)})
        if cls is PretrainRecipe:
            args = pretraining.training_arguments(recipe, resuming=False, show_progress=False)
        else:
            args = finetuning.training_arguments(recipe)
        args.use_cpu = True
        trainer = Trainer(model=torch.nn.Linear(2, 2), args=args, eval_dataset=[{}])
        return trainer.create_optimizer()

    default = optimizer(None)
    assert isinstance(default, torch.optim.AdamW)
    assert bool(default.defaults.get("fused")) == (cls is FinetuneRecipe)
    assert optimizer("adamw_torch_fused").defaults["fused"] is True
    assert not optimizer("adamw_torch").defaults.get("fused")


@pytest.mark.parametrize("cls", [PretrainRecipe, FinetuneRecipe])
def test_bf16_on_a_machine_without_an_accelerator_is_a_cpu_run(cls, tmp_path, monkeypatch):
    """bf16 autocasts on a CPU, and the fp16 warning suggests it; but run outside the Accelerate launcher, the
    Trainer refused it with "Your setup doesn't support bf16/gpu" unless told the run is on the CPU."""
    import torch

    from linformer_hf.training import finetuning, pretraining

    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    base = {"data.train_files": [WIKITEXT]} if cls is PretrainRecipe else {"model.pretrained": str(tmp_path)}
    (tmp_path / "config.json").write_text("{}")
    recipe = load_recipe(cls, None, extra={**base, "training.mixed_precision": "bf16", "training.output_dir": "x"})
    if cls is PretrainRecipe:
        args = pretraining.training_arguments(recipe, resuming=False, show_progress=False)
    else:
        args = finetuning.training_arguments(recipe)
    assert args.bf16 and args.use_cpu and args.device.type == "cpu"


@pytest.mark.parametrize("cls", [PretrainRecipe, FinetuneRecipe])
def test_a_tracker_that_is_not_installed_is_refused_when_the_recipe_is_read(cls, tmp_path):
    """The Trainer failed on it with a traceback, after the data was tokenised."""
    from transformers.integrations import get_available_reporting_integrations

    if "wandb" in get_available_reporting_integrations():
        pytest.skip("wandb is installed here")
    base = {"data.train_files": [WIKITEXT]} if cls is PretrainRecipe else {"model.pretrained": str(tmp_path)}
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"report_to names \['wandb'\], not installed here: pip install wandb"):
        load_recipe(cls, None, extra={**base, "training.report_to": ["wandb"]})
    assert load_recipe(cls, None, extra={**base, "training.report_to": ["none"]}).training.report_to == ["none"]


def test_a_recipe_given_to_the_other_command_says_so():
    """A pretraining recipe given to fine-tuning said only "Unknown section(s) 'tokenizer'"."""
    with pytest.raises(ConfigError, match=r"'tokenizer' .* looks like a pretraining recipe \(configs/pretrain/\)"):
        load_recipe(FinetuneRecipe, os.path.join(REPO, "configs", "pretrain", "demo.yaml"))


def test_model_settings_that_would_not_be_read_are_refused(tmp_path):
    """model.config / config_file beside model.pretrained were dropped without a word (the saved config goes on), and
    a vocabulary size or special token id in them was replaced by the tokenizer's."""
    from linformer_hf.training.model_setup import build_model_config

    with pytest.raises(ConfigError, match="model.config_file / model.config are not read when model.pretrained is set"):
        load_recipe(
            PretrainRecipe,
            None,
            extra={
                "data.train_files": [WIKITEXT],
                "model.pretrained": str(tmp_path),
                "model.config": {"hidden_dropout_prob": 0.5},
            },
        )

    class Tokenizer:
        pad_token_id, bos_token_id, eos_token_id = 1, 0, 2

        def __len__(self):
            return 1000

    recipe = load_recipe(
        PretrainRecipe, None, extra={"data.train_files": [WIKITEXT], "model.config": {"vocab_size": 5000}}
    )
    with pytest.raises(ConfigError, match=r"set vocab_size=5000 \(the tokenizer's: 1000\).* come from the tokenizer"):
        build_model_config(recipe.model, Tokenizer())
    recipe.model.config = {"vocab_size": 1000}  # the tokenizer's own: taken
    assert build_model_config(recipe.model, Tokenizer()).vocab_size == 1000
