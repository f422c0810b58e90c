"""Every shipped config parses: model variants build a config, recipes have only known keys, Accelerate configs load."""

import glob
import os

import pytest
import yaml
from training_utils import REPO

from linformer_hf.models import max_input_length
from linformer_hf.training.config import FinetuneRecipe, ModelSection, PretrainRecipe, build_recipe
from linformer_hf.training.model_setup import build_model_config


class _Tok:  # what build_model_config reads from a tokenizer
    pad_token_id, bos_token_id, eos_token_id = 1, 0, 2

    def __len__(self):
        return 50265


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(REPO, "configs", "model", "*.yaml"))), ids=os.path.basename
)
def test_model_configs_build(path):
    with open(path) as fh:
        model_type = yaml.safe_load(fh)["model_type"]
    config = build_model_config(ModelSection(model_type=model_type, config_file=path), _Tok())
    assert config.vocab_size == 50265 and config.model_type == model_type
    if model_type == "linformer":
        name = os.path.basename(path)
        if name.startswith("linformer_n"):
            n, k = name[len("linformer_n") :].split(".")[0].split("_")[:2]
            assert config.max_sequence_length == int(n) and config.projected_length == int(k[1:])
            assert config.sharing == (
                "layerwise" if "kv_layer" in name else "key_value" if "_kv" in name else "headwise"
            )
    else:
        assert max_input_length(config) == 512


@pytest.mark.parametrize("kind,cls", [("pretrain", PretrainRecipe), ("finetune", FinetuneRecipe)])
def test_recipes_have_known_keys(kind, cls):
    paths = sorted(glob.glob(os.path.join(REPO, "configs", kind, "*.yaml")))
    assert paths
    for path in paths:
        with open(path) as fh:
            recipe = build_recipe(cls, yaml.safe_load(fh))  # raises on any unknown section or key
        recipe.training.validate()  # and on a bad value (scheduler name, batch size ...)


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(REPO, "configs", "replication", "*.yaml"))), ids=os.path.basename
)
def test_replication_plans_load(path):
    from training_utils import DATA

    from experiments.replication import load_plan, variant_n

    plan = load_plan(path, {"data_dir": DATA})  # typed and checked, model fields included
    assert all(variant_n(plan, v) >= plan.block_size for v in plan.variants)


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(REPO, "configs", "books", "*.yaml"))), ids=os.path.basename
)
def test_books_plans_load(path, monkeypatch, tmp_path):
    import yaml
    from tiny_bert import build_wordpiece_tokenizer, tiny_bert_config
    from tiny_roberta import build_tokenizer, tiny_roberta_config
    from transformers import BertForMaskedLM, RobertaForMaskedLM

    from experiments.books_pretraining import load_plan

    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if "model.pretrained" in data["shared"]:  # an uptraining plan: a tiny masked LM stands in for its teacher
        teacher = str(tmp_path / "teacher")
        # of the teacher's layout: the control run, trained on unconverted, names it
        layouts = {run["overrides"].get("model.model_type") for run in data["runs"]}
        if "bert" in layouts:
            tokenizer = build_wordpiece_tokenizer(teacher)
            BertForMaskedLM(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(teacher)
        else:
            tokenizer = build_tokenizer(teacher)
            RobertaForMaskedLM(tiny_roberta_config(vocab_size=len(tokenizer))).save_pretrained(teacher)
        data["shared"]["model.pretrained"] = teacher
        path = str(tmp_path / os.path.basename(path))
        with open(path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(data, fh)
    monkeypatch.chdir(REPO)  # the plan's paths are from the root of a checkout, as its command runs
    plan = load_plan(path)  # every run's recipe read and checked
    assert plan.baseline in [run.name for run in plan.runs]


def test_accelerate_configs_load():
    from accelerate.commands.config.config_args import load_config_from_file

    paths = sorted(glob.glob(os.path.join(REPO, "configs", "accelerate", "*.yaml")))
    assert len(paths) >= 5
    for path in paths:
        config = load_config_from_file(path)
        assert config.num_processes >= 1


def test_every_config_path_named_in_the_repository_exists():
    """Scripts, configs, docs and the package name only config files that exist (a renamed recipe breaks no usage
    line)."""
    import re

    named = {}
    roots = ["scripts", "configs", "docs", "src", "README.md"]
    for root in roots:
        path = os.path.join(REPO, root)
        files = (
            [path]
            if os.path.isfile(path)
            else [
                os.path.join(d, f)
                for d, _, fs in os.walk(path)
                for f in fs
                if f.endswith((".py", ".md", ".yaml", ".sh"))
            ]
        )
        for file in files:
            with open(file, encoding="utf-8") as fh:
                for ref in re.findall(r"configs/[a-z_]+/[A-Za-z0-9_.-]+\.yaml", fh.read()):
                    named.setdefault(ref, os.path.relpath(file, REPO))
    assert "configs/pretrain/demo.yaml" in named
    missing = {ref: where for ref, where in named.items() if not os.path.isfile(os.path.join(REPO, ref))}
    assert not missing, f"named but missing (config: first file naming it): {missing}"


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(REPO, "configs", "finetune", "*.yaml"))), ids=os.path.basename
)
def test_finetune_recipes_fit_their_default_model(path, monkeypatch):
    """A recipe runs on the model it names by default: its data.max_seq_length is null (the model's n) or at most
    that model's n. The recipes default to the demo's model (configs/pretrain/demo.yaml, n = 32): one that asked for
    128 tokens stopped the README's fine-tuning example."""
    with open(path) as fh:
        recipe = build_recipe(FinetuneRecipe, yaml.safe_load(fh))
    with open(os.path.join(REPO, "configs", "pretrain", "demo.yaml")) as fh:
        demo = build_recipe(PretrainRecipe, yaml.safe_load(fh))
    assert recipe.model.pretrained == os.path.join(demo.training.output_dir, "final")
    monkeypatch.chdir(REPO)  # the recipe names its model config relative to the repository
    demo_n = build_model_config(demo.model, _Tok()).max_sequence_length
    assert demo_n == demo.data.block_size == 32
    length = recipe.data.max_seq_length
    assert length is None or length <= demo_n, f"data.max_seq_length={length} > the default model's n={demo_n}"
