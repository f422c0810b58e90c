"""Hub packaging: the dry-run folder is complete, loads in a clean process without the package, and its card is
valid."""

import json
import os
import shutil
import sys

import pytest
import torch
import transformers
import yaml
from huggingface_hub import ModelCard
from tiny_roberta import build_tokenizer, randomize_all, tiny_roberta_config

from linformer_hf.conversion import convert_checkpoint
from linformer_hf.hub import (
    check_remote_loading,
    load_linformer,
    prepare_model_folder,
    render_model_card,
    validate_model_card,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import push_to_hub  # noqa: E402

TEXTS = ["The tower is 324 metres tall.", "It was the first structure to reach a height of 300 metres."]

CARD_INFO = {
    "license": "apache-2.0",
    "language": "en",
    "datasets": ["glue"],
    "training_data": "SST-2 train split (fine-tuning)",
    "eval_results": [
        {
            "task_type": "text-classification",
            "task_name": "Sentiment",
            "dataset_type": "glue",
            "dataset_name": "SST-2",
            "dataset_config": "sst2",
            "dataset_split": "validation",
            "metric_type": "accuracy",
            "metric_value": 0.5123,
        }
    ],
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Warm-started Linformers (n = 32 > RoBERTa's 16, k = 8) for two heads, each with its tokenizer."""
    root = tmp_path_factory.mktemp("hub")
    tokenizer = build_tokenizer(str(root / "tokenizer"))
    folders = {}
    for architecture, sharing in [("RobertaForMaskedLM", "headwise"), ("RobertaForSequenceClassification", "none")]:
        roberta = getattr(transformers, architecture)(tiny_roberta_config(num_labels=2))
        randomize_all(roberta)
        roberta.save_pretrained(root / architecture)
        tokenizer.save_pretrained(root / architecture)
        convert_checkpoint(
            str(root / architecture),
            str(root / f"linformer-{architecture}"),
            max_sequence_length=32,
            projected_length=8,
            sharing=sharing,
        )
        folders[architecture] = str(root / f"linformer-{architecture}")
    return root, folders


def test_dry_run_folder_loads_in_a_clean_process_without_the_package(converted, tmp_path):
    root, folders = converted
    prepared = {}
    for architecture, folder in folders.items():
        repo_id = f"someone/linformer-{architecture.lower()}"
        output_dir = str(tmp_path / architecture)
        push_to_hub.main([folder, repo_id, "--dry_run", "--output_dir", output_dir, "--skip_remote_check"])
        names = set(os.listdir(output_dir))
        assert {
            "config.json",
            "model.safetensors",
            "modeling_linformer.py",
            "configuration_linformer.py",
            "README.md",
            "tokenizer.json",
            "tokenizer_config.json",
            "conversion_report.json",
        } <= names
        assert not any(name.endswith(".bin") for name in names)
        config = json.loads(open(os.path.join(output_dir, "config.json")).read())
        assert config["auto_map"]["AutoModel"] == "modeling_linformer.LinformerModel"
        assert len(config["auto_map"]) == 7

        prepared[architecture] = output_dir

    # Every head saved, plus the bare encoder from each folder, all in one clean process.
    jobs = [
        (prepared["RobertaForMaskedLM"], "AutoModelForMaskedLM"),
        (prepared["RobertaForSequenceClassification"], "AutoModelForSequenceClassification"),
        (prepared["RobertaForMaskedLM"], "AutoModel"),
        (prepared["RobertaForSequenceClassification"], "AutoModel"),
    ]
    results = check_remote_loading([folder for folder, _ in jobs], TEXTS, [auto for _, auto in jobs])
    assert len(results) == len(jobs)
    for (folder, auto_name), result in zip(jobs, results, strict=True):
        assert result["linformer_hf_imported"] is False
        assert result["model_class"].startswith("transformers_modules.")
        # the reference: the same folder through the installed package, in this process
        reference_model = getattr(transformers, auto_name).from_pretrained(folder).eval()
        assert type(reference_model).__module__ == "linformer_hf.models.modeling_linformer"
        with torch.no_grad():
            reference = reference_model(**result["inputs"])
        expected = reference.logits if auto_name != "AutoModel" else reference.last_hidden_state
        assert result["inputs"]["attention_mask"].min() == 0  # the batch really is padded
        torch.testing.assert_close(result["output"], expected, rtol=0, atol=1e-6, msg=f"{auto_name} {folder}")


def test_model_card_metadata_is_valid_and_filled_from_the_config(converted, tmp_path):
    root, folders = converted
    folder = folders["RobertaForSequenceClassification"]
    (tmp_path / "card.json").write_text(json.dumps(CARD_INFO))
    (tmp_path / "efficiency.csv").write_text("n,k,time_ms_linformer,time_ms_roberta\n32,8,1.5,2.0\n")
    (tmp_path / "recipe.yaml").write_text("optimizer:\n  lr: 0.0005\n  betas: [0.9, 0.98]\nmax_steps: 1000\n")
    output_dir = str(tmp_path / "folder")
    prepare_model_folder(
        folder,
        output_dir,
        "someone/linformer-sst2",
        card_info_path=str(tmp_path / "card.json"),
        efficiency_path=str(tmp_path / "efficiency.csv"),
        recipe_path=str(tmp_path / "recipe.yaml"),
    )
    content = open(os.path.join(output_dir, "README.md")).read()

    metadata = yaml.safe_load(content.split("---\n", 2)[1])
    assert metadata["license"] == "apache-2.0" and metadata["library_name"] == "transformers"
    assert metadata["pipeline_tag"] == "text-classification"
    assert {"linformer", "custom_code"} <= set(metadata["tags"])
    assert metadata["datasets"] == ["glue"] and metadata["metrics"] == ["accuracy"]
    result = metadata["model-index"][0]["results"][0]
    assert result["metrics"][0]["value"] == 0.5123 and result["dataset"]["config"] == "sst2"
    assert "base_model" not in metadata  # converted from a local path, which means nothing on the Hub
    parsed = ModelCard(content).data
    assert parsed.eval_results[0].metric_value == 0.5123

    config = load_linformer(folder).config
    assert f"| maximum sequence length n | {config.max_sequence_length} |" in content
    assert f"| projected length k | {config.projected_length} |" in content
    assert "| projection sharing | `none`" in content
    assert "| 32 | 8 | 1.5 | 2.0 |" in content  # efficiency table from the CSV
    assert "lr: 0.0005" in content  # recipe
    assert "| Sentiment | SST-2 (sst2) | validation | accuracy | 0.5123 |" in content
    assert "18 -> 34 rows" in content  # the conversion report's position extension
    assert (
        'AutoModelForSequenceClassification.from_pretrained("someone/linformer-sst2", trust_remote_code=True)'
        in content
    )
    assert "{{" not in content and "{%" not in content


def test_card_without_results_says_so_and_uses_hub_base_model(converted, tmp_path):
    root, folders = converted
    folder = folders["RobertaForMaskedLM"]
    report_path = os.path.join(folder, "conversion_report.json")
    report = json.loads(open(report_path).read())
    model = load_linformer(folder)
    hub_named = dict(report, source="FacebookAI/roberta-base")
    (tmp_path / "conversion_report.json").write_text(json.dumps(hub_named))
    content = render_model_card(model, "someone/x", model_dir=str(tmp_path))
    metadata = validate_model_card(content)
    assert metadata["base_model"] == "FacebookAI/roberta-base" and metadata["pipeline_tag"] == "fill-mask"
    assert "model-index" not in metadata
    assert "No evaluation results were supplied" in content and "No efficiency measurements were supplied" in content


def test_bad_inputs_are_errors(converted, tmp_path):
    root, folders = converted
    model = load_linformer(folders["RobertaForMaskedLM"])
    with pytest.raises(ValueError, match="Unknown card_info key"):
        render_model_card(model, "someone/x", card_info={"licence": "mit"})
    with pytest.raises(ValueError, match="must start with YAML metadata"):
        validate_model_card("# no metadata")
    with pytest.raises(ValueError, match="lacks 'license'"):
        validate_model_card("---\nlibrary_name: transformers\ntags: []\n---\n# x")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stale.txt").write_text("x")
    with pytest.raises(FileExistsError, match="--overwrite"):
        prepare_model_folder(folders["RobertaForMaskedLM"], str(tmp_path / "out"), "someone/x")
    with pytest.raises(FileNotFoundError, match="No tokenizer"):
        prepare_model_folder(
            folders["RobertaForMaskedLM"], str(tmp_path / "o2"), "someone/x", tokenizer_path=str(tmp_path / "out")
        )


def test_push_to_hub_on_a_folder_that_is_not_a_linformer_says_so(converted, tmp_path, capsys):
    root, folders = converted
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("an earlier folder")
    roberta_folder = str(root / "RobertaForMaskedLM")
    args = ["someone/x", "--dry_run", "--output_dir", str(out), "--overwrite", "--skip_remote_check"]
    assert push_to_hub.main([roberta_folder] + args) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and "holds a 'roberta' model, not a Linformer" in error
    assert "convert_roberta_to_linformer.py" in error
    assert (out / "keep.txt").exists()  # nothing deleted before the inputs were checked

    assert push_to_hub.main([str(tmp_path / "nowhere")] + args) == 2
    assert "is not a saved model folder (no config.json)" in capsys.readouterr().err

    # A Linformer whose config.json the strict config rejects: an error line naming the field, not a traceback.
    edited = tmp_path / "edited"
    shutil.copytree(folders["RobertaForMaskedLM"], edited)
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps(dict(config, sharing="per_head")))
    assert push_to_hub.main([str(edited)] + args) == 2
    assert "'sharing' expected one of" in capsys.readouterr().err


def test_the_card_template_is_package_data_and_pipeline_tags_come_from_transformers():
    import linformer_hf
    from linformer_hf.hub import PIPELINE_TAGS, SHARING_MEANING, TEMPLATE

    assert TEMPLATE.is_file()
    assert os.path.dirname(linformer_hf.__file__) in str(TEMPLATE)  # inside the package, not the repository
    assert "{{ card_data }}" in TEMPLATE.read_text(encoding="utf-8")
    assert set(PIPELINE_TAGS) == {cls.__name__ for cls in linformer_hf.LINFORMER_HEADS.values()}
    for architecture, tag in PIPELINE_TAGS.items():
        if tag is not None:  # the pipeline of that task builds this head
            assert (
                transformers.pipelines.SUPPORTED_TASKS[tag]["pt"][0].__name__
                == {v.__name__: k for k, v in linformer_hf.LINFORMER_HEADS.items()}[architecture]
            )
    assert set(SHARING_MEANING) == set(linformer_hf.SHARING_MODES)  # every sharing mode is explained in the card
    assert PIPELINE_TAGS["LinformerForMaskedLM"] == "fill-mask"
    assert PIPELINE_TAGS["LinformerModel"] == "feature-extraction"
