"""Hub packaging: the dry-run folder is complete, loads in a clean process without the package, and its card is
valid."""

import json
import os
import re
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
    find_provenance,
    load_linformer,
    prepare_model_folder,
    render_model_card,
    validate_model_card,
)
from linformer_hf.models import compat

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
        assert len(config["auto_map"]) == 8  # AutoConfig, the six heads and AutoModelForPreTraining
        # transformers 5 saves where the tokenizer was loaded from (here: a local folder, offline); a Hub repo is not
        tokenizer_config = json.loads(open(os.path.join(output_dir, "tokenizer_config.json")).read())
        assert not {"is_local", "local_files_only"} & set(tokenizer_config)
        assert tokenizer_config["tokenizer_class"]

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
    assert "positions past RoBERTa's are copies of the learned ones" in content  # n = 32 > RoBERTa's 16
    # a RoBERTa source and its byte-level BPE, read from the report and the tokenizer; no sentence-transformers
    assert "Converted from the RoBERTa checkpoint" in content and "every RoBERTa weight copied" in content
    assert "(byte-level BPE, `RobertaTokenizer`)" in content
    assert "## Use as a sentence encoder" not in content and "Attention transfer" not in content
    assert (
        'AutoModelForSequenceClassification.from_pretrained("someone/linformer-sst2", trust_remote_code=True)'
        in content
    )
    # the transformers the folder's code runs on, as compat.py states it (tests/test_compatibility.py proves it)
    assert f"`transformers>={compat.REMOTE_CODE_MINIMUM},<{compat.BELOW}`: the last\n4.x or any 5.x" in content
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
    prepare_model_folder(folders["RobertaForMaskedLM"], str(out), "someone/x")  # an earlier folder
    earlier = sorted(os.listdir(out))
    capsys.readouterr()
    roberta_folder = str(root / "RobertaForMaskedLM")
    args = ["someone/x", "--dry_run", "--output_dir", str(out), "--overwrite", "--skip_remote_check"]
    assert push_to_hub.main([roberta_folder] + args) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and "holds a 'roberta' model, not a Linformer" in error
    assert "scripts/convert_to_linformer.py" in error
    assert sorted(os.listdir(out)) == earlier  # nothing deleted before the inputs were checked

    assert push_to_hub.main([str(tmp_path / "nowhere")] + args) == 2
    assert "is not a saved model folder (no config.json)" in capsys.readouterr().err

    # A Linformer whose config.json the strict config rejects: an error line naming the field, not a traceback.
    edited = tmp_path / "edited"
    shutil.copytree(folders["RobertaForMaskedLM"], edited)
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps(dict(config, sharing="per_head")))
    assert push_to_hub.main([str(edited)] + args) == 2
    assert "'sharing' expected one of" in capsys.readouterr().err


def test_overwrite_refuses_a_folder_that_push_to_hub_did_not_write(converted, tmp_path, capsys):
    """--output_dir D --overwrite deleted D whole, whatever it held: pointed by mistake at a data folder, a training
    run with its checkpoints or a model's own folder, it was gone. Now only an earlier folder of push_to_hub (a model
    and its card, nothing else) is replaced; anything else is refused before any work, named, and kept."""
    root, folders = converted
    model = folders["RobertaForMaskedLM"]
    data = tmp_path / "data"  # a folder of other things
    data.mkdir()
    (data / "train.csv").write_text("text,label\n")
    run = tmp_path / "run"  # a training run: the model at its top, checkpoints and a log beside it
    shutil.copytree(folders["RobertaForSequenceClassification"], run)
    (run / "checkpoint-500").mkdir()
    (run / "checkpoint-500" / "model.safetensors").write_bytes(b"weights")
    (run / "train_log.jsonl").write_text("{}\n")
    converted_model = tmp_path / "converted"  # a model folder with no card: not pushed, maybe the only copy
    shutil.copytree(folders["RobertaForSequenceClassification"], converted_model)
    capsys.readouterr()
    for folder, found in (
        (data, "it holds train.csv, which such a folder never holds"),
        (run, "it holds checkpoint-500, train_log.jsonl, which such a folder never holds"),
        (converted_model, "it has no README.md, which every such folder holds"),
    ):
        before = sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))
        # without --overwrite the refusal is the same: it used to advise passing --overwrite, refused in turn
        for flags in (["--overwrite"], []):
            args = [model, "someone/x", "--dry_run", "--skip_remote_check", "--output_dir", str(folder), *flags]
            assert push_to_hub.main(args) == 2
            error = capsys.readouterr().err
            assert f"{folder} is not a model folder written by push_to_hub ({found})" in error
            assert "never deletes a folder of other things" in error and "or pass" not in error
            assert f"Give another output directory, or delete {folder} yourself" in error
            assert sorted(str(path.relative_to(folder)) for path in folder.rglob("*")) == before
    # its own earlier folder is replaced as before
    prepare_model_folder(model, str(tmp_path / "pushed"), "someone/x")
    args = [model, "someone/y", "--dry_run", "--skip_remote_check", "--output_dir", str(tmp_path / "pushed")]
    assert push_to_hub.main([*args, "--overwrite"]) == 0
    assert "someone/y" in (tmp_path / "pushed" / "README.md").read_text()


def test_a_folder_stopped_part_way_leaves_nothing_ready_to_push_and_keeps_the_earlier_one(
    converted, tmp_path, monkeypatch
):
    """Stopped while the folder was written (Ctrl-C): before, --output_dir held the weights without a card, and an
    --overwrite had deleted the earlier folder first. Now it is written beside --output_dir and moved in when whole."""
    import linformer_hf.hub as hub

    root, folders = converted
    folder, earlier = folders["RobertaForMaskedLM"], tmp_path / "earlier"
    prepare_model_folder(folder, str(earlier), "someone/x")
    before = {name: (earlier / name).read_bytes() for name in os.listdir(earlier) if (earlier / name).is_file()}

    def stopped(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(hub, "copy_sentence_transformers_modules", stopped)
    for output_dir, overwrite in ((tmp_path / "new", False), (earlier, True)):
        with pytest.raises(KeyboardInterrupt):
            prepare_model_folder(folder, str(output_dir), "someone/y", overwrite=overwrite)
    assert sorted(os.listdir(tmp_path)) == ["earlier"]  # no partial folder, no staging folder
    assert {name: (earlier / name).read_bytes() for name in os.listdir(earlier) if (earlier / name).is_file()} == before
    monkeypatch.undo()
    prepare_model_folder(folder, str(earlier), "someone/y", overwrite=True)  # replaced whole
    assert "someone/y" in (earlier / "README.md").read_text()


def test_a_new_folder_another_push_filled_meanwhile_is_kept_and_this_one_refused(converted, tmp_path, monkeypatch):
    """Two pushes into one new --output_dir at once (both found it absent): the later to end is refused, naming the
    option that replaces, and the other's folder stays as it wrote it; no staging folder is left. (push_to_hub refused
    it before it wrote through `staged_output` too.) With --overwrite it is replaced whole."""
    import linformer_hf.hub as hub

    root, folders = converted
    folder, out = folders["RobertaForMaskedLM"], tmp_path / "pushed"
    copy_modules = hub.copy_sentence_transformers_modules

    def another_push_ends_first(model_dir, staging):
        if not started:
            started.append(True)
            prepare_model_folder(folder, str(out), "someone/first")
        copy_modules(model_dir, staging)

    started = []
    monkeypatch.setattr(hub, "copy_sentence_transformers_modules", another_push_ends_first)
    with pytest.raises(FileExistsError, match=r"filled by another run while this one worked.*overwrite=True \(--o"):
        prepare_model_folder(folder, str(out), "someone/second")
    assert "someone/first" in (out / "README.md").read_text()
    assert sorted(os.listdir(tmp_path)) == ["pushed"]
    prepare_model_folder(folder, str(out), "someone/second", overwrite=True)
    assert "someone/second" in (out / "README.md").read_text()
    assert sorted(os.listdir(tmp_path)) == ["pushed"]


def test_a_folder_stopped_by_sigterm_leaves_no_staging_folder(converted, tmp_path, monkeypatch, send_sigterm):
    """`kill` (SIGTERM) unwinds as Ctrl-C does: before, the process ended and its staging folder stayed."""
    import linformer_hf.hub as hub

    root, folders = converted
    monkeypatch.setattr(hub, "copy_sentence_transformers_modules", send_sigterm)
    args = [folders["RobertaForMaskedLM"], "someone/x", "--dry_run", "--output_dir", str(tmp_path / "out")]
    with pytest.raises(KeyboardInterrupt):
        push_to_hub.main(args)
    assert os.listdir(tmp_path) == []


def test_a_push_without_output_dir_deletes_its_copy_of_the_model(converted, tmp_path, monkeypatch, capsys):
    """Without --output_dir the folder was written to a temporary directory that was never deleted: every push left
    a whole copy of the model (weights included) in the temporary directory."""
    import tempfile

    import push_to_hub as script

    root, folders = converted
    pushed = []
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(script, "check_can_push", lambda repo_id, token: "hf_x")
    monkeypatch.setattr(script, "push_folder", lambda folder, *a, **k: pushed.append(sorted(os.listdir(folder))))
    assert script.main([folders["RobertaForMaskedLM"], "someone/x", "--skip_remote_check"]) == 0
    assert "model.safetensors" in pushed[0] and "README.md" in pushed[0]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("option", ["--card_info", "--efficiency", "--recipe", "--template", "--tokenizer"])
def test_a_missing_input_file_is_named_before_the_model_is_read(converted, tmp_path, capsys, monkeypatch, option):
    """A mistyped --card_info, --efficiency, --recipe or --template was reported as "[Errno 2] No such file or
    directory" after the model was loaded (minutes for a base model), and a --tokenizer file or missing folder as a
    malformed Hub repo id."""
    import linformer_hf.hub as hub

    root, folders = converted
    monkeypatch.setattr(hub, "load_model", lambda *a, **k: pytest.fail("the model was read first"))
    (tmp_path / "tokenizer.json").write_text("{}")
    given = [str(tmp_path / "missing.json")] + ([str(tmp_path / "tokenizer.json")] if option == "--tokenizer" else [])
    for path in given:
        out = tmp_path / "out"
        args = [folders["RobertaForMaskedLM"], "someone/x", "--dry_run", "--output_dir", str(out), option, path]
        assert push_to_hub.main(args) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"error: {option[2:]} {path} ") and f"({option})" in error, error
        assert "\n" not in error and not out.exists()


@pytest.mark.parametrize("text", ["n,k,time_ms\n", "[]", '{"rows": []}'])
def test_efficiency_figures_without_rows_are_refused_before_the_model_is_read(converted, tmp_path, monkeypatch, text):
    """A CSV with its header only (or an empty JSON list) gave a card saying "No efficiency measurements were supplied",
    though a file was given."""
    import linformer_hf.hub as hub

    root, folders = converted
    monkeypatch.setattr(hub, "load_model", lambda *a, **k: pytest.fail("the model was read first"))
    path = tmp_path / ("efficiency.csv" if text.startswith("n,") else "efficiency.json")
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path} holds no efficiency figures \\(no rows\\)"):
        prepare_model_folder(
            folders["RobertaForMaskedLM"], str(tmp_path / "out"), "someone/x", efficiency_path=str(path)
        )


def test_a_push_that_cannot_happen_is_refused_before_the_folder_is_built(converted, tmp_path, capsys, monkeypatch):
    """Offline, without credentials, or with a malformed repo id, the folder was built and loaded in a fresh process
    (minutes for a base model) before the push failed; a malformed repo id passed a dry run."""
    import push_to_hub as script
    from huggingface_hub import constants

    root, folders = converted
    folder = folders["RobertaForMaskedLM"]
    monkeypatch.setattr(script, "prepare_model_folder", lambda *a, **k: pytest.fail("the folder was built"))
    assert script.main([folder, "not-a-valid-repo-id!!", "--dry_run", "--output_dir", str(tmp_path / "o")]) == 2
    assert "not-a-valid-repo-id!!" in capsys.readouterr().err
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert script.main([folder, "someone/x", "--token", "hf_x"]) == 2
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().err
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    assert script.main([folder, "someone/x"]) == 2
    assert "No Hugging Face credentials" in capsys.readouterr().err


def test_the_card_template_is_package_data_and_pipeline_tags_come_from_transformers():
    import linformer_hf
    from linformer_hf.conversion import SOURCE_CONFIGS, TARGET_FAMILIES
    from linformer_hf.hub import (
        CARD_FAMILIES,
        KERNEL_MEANING,
        PIPELINE_TAGS,
        ROW_NORM_MEANING,
        SHARING_MEANING,
        SOURCE_FAMILY_NAMES,
        TEMPLATE,
        remote_code_files,
    )
    from linformer_hf.loading import HEADS_BY_MODEL_TYPE

    assert TEMPLATE.is_file()
    assert os.path.dirname(linformer_hf.__file__) in str(TEMPLATE)  # inside the package, not the repository
    assert "{{ card_data }}" in TEMPLATE.read_text(encoding="utf-8")
    # every family the package registers (and the conversion targets) has a card, its heads their pipeline tags
    assert set(CARD_FAMILIES) == set(HEADS_BY_MODEL_TYPE) == set(TARGET_FAMILIES) == {"linformer", "performer"}
    assert HEADS_BY_MODEL_TYPE["performer"] is linformer_hf.PERFORMER_HEADS
    auto_of = {cls.__name__: auto for heads in HEADS_BY_MODEL_TYPE.values() for auto, cls in heads.items()}
    assert set(PIPELINE_TAGS) == set(auto_of)
    for architecture, tag in PIPELINE_TAGS.items():
        if tag is not None:  # the pipeline of that task builds this head
            assert transformers.pipelines.SUPPORTED_TASKS[tag]["pt"][0].__name__ == auto_of[architecture]
    assert set(SHARING_MEANING) == set(linformer_hf.SHARING_MODES)  # every sharing mode is explained in the card
    assert set(KERNEL_MEANING) == set(linformer_hf.KERNELS) and set(ROW_NORM_MEANING) == set(linformer_hf.ROW_NORMS)
    assert set(SOURCE_FAMILY_NAMES) == set(SOURCE_CONFIGS)  # every source family the conversion takes is named
    assert PIPELINE_TAGS["LinformerForMaskedLM"] == PIPELINE_TAGS["PerformerForMaskedLM"] == "fill-mask"
    assert PIPELINE_TAGS["LinformerModel"] == "feature-extraction"
    assert PIPELINE_TAGS["PerformerForCausalLM"] == "text-generation"
    # the code a folder needs: the family's config and modeling files and the module of transformers release
    # differences, nothing else
    shared = ["compat.py"]
    assert remote_code_files("linformer") == sorted(["configuration_linformer.py", "modeling_linformer.py", *shared])
    assert remote_code_files("performer") == sorted(["configuration_performer.py", "modeling_performer.py", *shared])


# ---- a transferred BERT-layout sentence encoder: the first pretrained Linformer's card, on a tiny random BERT ----

TEACHER_CARD_INFO = {
    "license": "apache-2.0",
    "base_model": "someone/tiny-sentence-bert",
    "base_model_license": "apache-2.0",
    "evaluation_notes": "The teacher scores 0.6 on the same probe.",
}


def write_sentence_transformers_modules(folder, max_seq_length: int):
    """modules.json, 1_Pooling/ and sentence_bert_config.json as all-MiniLM-L6-v2 ships them (Normalize without a
    folder of its own)."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))


@pytest.fixture(scope="module")
def transferred(tmp_path_factory):
    """Tiny random sentence-BERT teacher (with sentence-transformers modules) -> Linformer k = 4 -> 3 transfer steps;
    the same without the modules; and the first with a Performer (m = 8) student. Returns
    {"with_modules"/"without_modules"/"performer_with_modules": (teacher, transferred folder)}."""
    from tiny_bert import build_wordpiece_tokenizer, tiny_bert_config, wikitext_lines

    from linformer_hf.training.transfer import TransferArguments, run_transfer

    root = tmp_path_factory.mktemp("transferred")
    (root / "text.txt").write_text("\n".join(wikitext_lines(200)) + "\n")
    folders = {}
    families = {
        "with_modules": ("linformer", dict(projected_length=4, sharing="key_value")),
        "without_modules": ("linformer", dict(projected_length=4, sharing="key_value")),
        "performer_with_modules": ("performer", dict(num_random_features=8)),
    }
    for name, (target, settings) in families.items():
        teacher = root / f"teacher_{name}"
        tokenizer = build_wordpiece_tokenizer(str(teacher))
        bert = transformers.BertModel(tiny_bert_config())
        randomize_all(bert, seed=5)
        bert.save_pretrained(teacher)
        tokenizer.save_pretrained(teacher)
        if name != "without_modules":
            write_sentence_transformers_modules(teacher, max_seq_length=8)
        convert_checkpoint(str(teacher), str(root / f"student_{name}"), target=target, **settings)
        arguments = TransferArguments(
            teacher=str(teacher),
            student=str(root / f"student_{name}"),
            output_dir=str(root / f"transferred_{name}"),
            text_files=[str(root / "text.txt")],
            lengths=[8, 16],
            batch_size=2,
            layer_steps=3,
            train_attention_weights=True,
            eval_windows=2,
            eval_documents=4,
            checkpoint_every=100,
            show_progress=False,
        )
        run_transfer(arguments)
        folders[name] = (str(teacher), str(root / f"transferred_{name}"))
    return folders


def fidelity_table(content: str) -> dict[str, list[list[float]]]:
    """The card's fidelity rows: input label -> the numbers of each cell, in order."""
    section = content.split("### Fidelity to the teacher", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and ("windows of" in cells[0] or "documents" in cells[0]):
            rows[cells[0]] = [[float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", cell)] for cell in cells[1:]]
    return rows


def test_transferred_sentence_encoder_card_and_folder(transferred, tmp_path):
    teacher, folder = transferred["with_modules"]
    assert os.path.exists(os.path.join(folder, "conversion_report.json"))  # transfer keeps its student's report
    (tmp_path / "card.json").write_text(json.dumps(TEACHER_CARD_INFO))
    output_dir = tmp_path / "folder"
    args = [folder, "someone/tiny-linformer", "--dry_run", "--output_dir", str(output_dir)]
    assert push_to_hub.main(args + ["--card_info", str(tmp_path / "card.json"), "--skip_remote_check"]) == 0
    names = set(os.listdir(output_dir))
    # provenance (the conversion report travelled through the transfer) and sentence-transformers modules
    assert {"conversion_report.json", "transfer_report.json", "transfer_log.jsonl", "modules.json"} <= names
    assert {"sentence_bert_config.json", "1_Pooling"} <= names
    content = (output_dir / "README.md").read_text()
    metadata = validate_model_card(content)
    assert metadata["base_model"] == "someone/tiny-sentence-bert"
    assert {"bert", "sentence-transformers"} <= set(metadata["tags"])

    # the source and its family, the teacher and its license, the tokenizer, the recipe: all from the files
    assert "Converted from the BERT checkpoint `someone/tiny-sentence-bert` (`BertModel`)" in content
    assert "RoBERTa checkpoint" not in content and "RoBERTa byte-level BPE" not in content
    assert "(lowercased WordPiece, `BertTokenizer`)" in content
    assert "License of `someone/tiny-sentence-bert`: apache-2.0." in content
    assert "**Attention transfer** from the teacher `someone/tiny-sentence-bert`" in content
    report = json.loads((output_dir / "transfer_report.json").read_text())
    assert f"{report['train_seconds']} s of training" in content
    assert "stage 1, layer-local: 3 steps" in content and "W^Q, W^K, W^V" in content
    assert "stage 2, end to end: not run" in content
    assert "batches of 2 windows of 8, 16 tokens in turn" in content
    assert re.search(r"text: text files `[^`/]+/text\.txt`", content)  # the file and its folder, no local layout
    assert "The teacher scores 0.6 on the same probe." in content

    # the fidelity table holds the report's figures, before -> after
    rows = fidelity_table(content)
    for length, after in report["after"]["windows"].items():
        before = report["before"]["windows"][length]
        cosine, errors = rows[f"{after['windows']} windows of {length} tokens"]
        assert cosine == [
            before["embedding_cosine_mean"],
            before["embedding_cosine_min"],
            after["embedding_cosine_mean"],
            after["embedding_cosine_min"],
        ]
        assert errors == before["attention_relative_error_per_layer"] + after["attention_relative_error_per_layer"]
    documents = report["after"]["documents"]
    label = f"{documents['documents']} whole documents (median {documents['tokens_median']} tokens, truncated to n)"
    assert rows[label][0] == [
        report["before"]["documents"]["embedding_cosine_mean"],
        report["before"]["documents"]["embedding_cosine_min"],
        documents["embedding_cosine_mean"],
        documents["embedding_cosine_min"],
    ]

    # the sentence-encoder section, with the pooling read from the modules
    usage = content.split("## Use as a sentence encoder", 1)[1]
    assert "Transformer → Pooling → Normalize" in usage
    assert "the mean of the token vectors over real tokens (the attention mask), L2-normalised" in usage
    n = load_linformer(folder).config.max_sequence_length
    assert f"model.max_seq_length = {n}  # sentence_bert_config.json says 8" in usage

    # a clean process: the folder's own code, and the folder's WordPiece tokenizer (not RoBERTa's registered BPE)
    (result,) = check_remote_loading(str(output_dir), TEXTS)
    assert result["linformer_hf_imported"] is False and result["tokenizer_class"] == "BertTokenizer"
    assert transformers.AutoTokenizer.from_pretrained(str(output_dir)).backend_tokenizer.model.__class__.__name__ == (
        "WordPiece"
    )


def test_the_card_usage_snippets_compute_what_sentence_transformers_does(transferred, tmp_path):
    """The card's two ways to embed (sentence-transformers; mean pooling by hand) agree on the dry-run folder."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    _, folder = transferred["with_modules"]
    output_dir = str(tmp_path / "folder")
    prepare_model_folder(folder, output_dir, "someone/x")
    encoder = sentence_transformers.SentenceTransformer(output_dir, trust_remote_code=True, device="cpu")
    model = transformers.AutoModel.from_pretrained(output_dir).eval()
    encoder.max_seq_length = model.config.max_sequence_length  # as the card says
    tokenizer = transformers.AutoTokenizer.from_pretrained(output_dir)
    batch = tokenizer(TEXTS, padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    by_hand = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    torch.testing.assert_close(torch.as_tensor(encoder.encode(TEXTS)), by_hand, rtol=0, atol=1e-5)


def test_a_transferred_card_without_modules_or_copied_report(transferred, tmp_path):
    """No sentence-transformers modules: no usage section. A folder without conversion_report.json (transferred
    before transfer copied it) takes its student's. A resumed run's report lacks "before": fidelity_before.json
    gives it."""
    _, folder = transferred["without_modules"]
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    (edited / "conversion_report.json").unlink()
    report = json.loads((edited / "transfer_report.json").read_text())
    before = report.pop("before")
    (edited / "transfer_report.json").write_text(json.dumps(report))
    content = render_model_card(load_linformer(str(edited)), "someone/x", model_dir=str(edited))
    assert "## Use as a sentence encoder" not in content and "sentence-transformers" not in content
    assert "Converted from the BERT checkpoint" in content  # the student's conversion report
    assert "conversion_report.json" in find_provenance(str(edited))
    rows = fidelity_table(content)
    cosine = rows["2 windows of 16 tokens"][0]
    assert cosine[:2] == [before["windows"]["16"][key] for key in ("embedding_cosine_mean", "embedding_cosine_min")]
    # the teacher's license: neither found nor given, and the card says so, and claims none (before: apache-2.0,
    # this package's own, for weights made from another's)
    assert "not found in its folder and not given" in content and validate_model_card(content)["license"] == "unknown"


def test_transferred_card_inputs_that_contradict_the_reports_are_errors(transferred, tmp_path):
    teacher, folder = transferred["without_modules"]
    model = load_linformer(folder)
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    report = json.loads((edited / "conversion_report.json").read_text())
    (edited / "conversion_report.json").write_text(json.dumps(dict(report, source="someone/on-the-hub")))
    with pytest.raises(ValueError, match="contradicts the reports"):
        render_model_card(model, "someone/x", model_dir=str(edited), card_info={"base_model": "someone/else"})
    # a local teacher folder with its own model card: its license is read, and a different one given is an error
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n# teacher\n")
    shutil.copy(tmp_path / "README.md", os.path.join(teacher, "README.md"))
    try:
        content = render_model_card(model, "someone/x", model_dir=folder)
        assert "mit (from its model card)" in content and validate_model_card(content)["license"] == "mit"
        given = render_model_card(model, "someone/x", model_dir=folder, card_info={"license": "cc-by-4.0"})
        assert validate_model_card(given)["license"] == "cc-by-4.0"  # the owner's word on the weights comes first
        with pytest.raises(ValueError, match="contradicts the license 'mit'"):
            render_model_card(model, "someone/x", model_dir=folder, card_info={"base_model_license": "apache-2.0"})
    finally:
        os.remove(os.path.join(teacher, "README.md"))


# ---- the Performer family: same folder, same check, its own card ----


@pytest.fixture(scope="module")
def performers(tmp_path_factory):
    """Tiny RoBERTa heads converted to Performer (m = 8): a bidirectional MLM (softmax kernel, orthogonal features,
    redrawn every 1000 training calls) and a causal LM (relu kernel, i.i.d. features, frozen)."""
    root = tmp_path_factory.mktemp("performers")
    tokenizer = build_tokenizer(str(root / "tokenizer"))
    settings = {
        "RobertaForMaskedLM": dict(num_random_features=8),
        "RobertaForCausalLM": dict(
            num_random_features=8, kernel="relu", orthogonal_features=False, freeze_features=True
        ),
    }
    folders = {}
    for architecture, options in settings.items():
        roberta = getattr(transformers, architecture)(tiny_roberta_config(is_decoder=architecture.endswith("CausalLM")))
        randomize_all(roberta)
        roberta.save_pretrained(root / architecture)
        tokenizer.save_pretrained(root / architecture)
        convert_checkpoint(
            str(root / architecture), str(root / f"performer-{architecture}"), target="performer", **options
        )
        folders[architecture] = str(root / f"performer-{architecture}")
    return folders


def test_performer_dry_run_folders_load_in_a_clean_process_with_the_original_outputs(performers, tmp_path):
    from linformer_hf.models import modeling_performer

    prepared = {}
    for architecture, folder in performers.items():
        output_dir = str(tmp_path / architecture)
        args = [folder, "someone/tiny-performer", "--dry_run", "--output_dir", output_dir, "--skip_remote_check"]
        assert push_to_hub.main(args) == 0
        names = set(os.listdir(output_dir))
        assert {"modeling_performer.py", "configuration_performer.py", "compat.py"} <= names
        assert {"README.md", "model.safetensors", "tokenizer.json", "conversion_report.json"} <= names
        assert "modeling_linformer.py" not in names
        config = json.loads(open(os.path.join(output_dir, "config.json")).read())
        assert config["auto_map"] == modeling_performer.auto_map() and len(config["auto_map"]) == 9
        prepared[architecture] = output_dir

    jobs = [
        (prepared["RobertaForMaskedLM"], "AutoModelForMaskedLM", performers["RobertaForMaskedLM"]),
        (prepared["RobertaForMaskedLM"], "AutoModel", performers["RobertaForMaskedLM"]),
        (prepared["RobertaForCausalLM"], "AutoModelForCausalLM", performers["RobertaForCausalLM"]),
    ]
    texts = ["The tower.", TEXTS[1]]  # a short and a long text: n = 16 would truncate both of TEXTS to one length
    results = check_remote_loading([job[0] for job in jobs], texts, [job[1] for job in jobs])
    for (_, auto_name, original), result in zip(jobs, results, strict=True):
        assert result["linformer_hf_imported"] is False
        assert result["model_class"].startswith("transformers_modules.") and "Performer" in result["model_class"]
        assert result["inputs"]["attention_mask"].min() == 0  # the batch really is padded
        # the reference: the folder the conversion wrote, before packaging, through the installed package
        reference_model = getattr(transformers, auto_name).from_pretrained(original).eval()
        assert type(reference_model).__module__ == "linformer_hf.models.modeling_performer"

        def output(model, inputs=result["inputs"], auto_name=auto_name):
            with torch.no_grad():
                outputs = model(**inputs)
            return outputs.logits if auto_name != "AutoModel" else outputs.last_hidden_state

        torch.testing.assert_close(result["output"], output(reference_model), rtol=0, atol=1e-6, msg=auto_name)
        # what makes them equal is the saved random features: other features give other outputs
        generator = torch.Generator().manual_seed(123)
        for layer in reference_model.base_model.encoder.layer:
            layer.attention.self.redraw_features(generator)
        assert (result["output"] - output(reference_model)).abs().max() > 1e-3, auto_name


def limitations(content: str) -> str:
    return content.split("## Limitations", 1)[1].split("\n## ", 1)[0]


def test_performer_cards_say_favor_m_kernel_and_only_the_limits_that_apply(performers):
    from linformer_hf.hub import load_model
    from linformer_hf.models import max_input_length

    cards = {}
    for architecture, folder in performers.items():
        model = load_model(folder)
        content = render_model_card(model, "someone/tiny-performer", model_dir=folder)
        metadata = validate_model_card(content)
        assert {"performer", "custom_code"} <= set(metadata["tags"]) and "linformer" not in metadata["tags"]
        assert "Linformer" not in content and "E/F" not in content  # nothing of the other family's prose
        assert "FAVOR+" in content and "arxiv.org/abs/2009.14794" in content and "choromanski2021" in content
        assert "O(n m d) instead of O(n² d)" in content
        config = model.config
        m, n = config.num_random_features, max_input_length(config)
        assert f"with m = {m} random features per head" in content
        assert f"| random features m per head | {m} |" in content
        assert f"| kernel | `{config.kernel}` (" in content
        assert f"| maximum input length | {n} tokens (the position table: {config.max_position_embeddings} rows" in (
            content
        )
        assert "buffer saved\nin `model.safetensors`" in content  # the features travel with the weights
        assert f"max_length={n}" in content
        limits = limitations(content)
        # Linformer's limits do not apply: no fixed n from E, F, any padding side, and (when causal) it decodes
        assert "Encoder only" not in limits and "Right padding" not in limits and "Fixed maximum length" not in limits
        assert f"**Maximum length {n} tokens, set by the position table.**" in limits
        assert "Warm-started, not pretrained as a Performer" in limits
        assert "positions past" not in limits  # n is the source's own 16: nothing was copied
        cards[architecture] = (model, content, limits)

    _, bidirectional, limits = cards["RobertaForMaskedLM"]
    assert validate_model_card(bidirectional)["pipeline_tag"] == "fill-mask"
    assert "A **Performer** encoder" in bidirectional and "| attention | FAVOR+, bidirectional |" in bidirectional
    assert "| features | orthogonal blocks, `chi`" in bidirectional
    assert "| feature redraw | every 1000 training forward calls, never in eval; 0 calls counted" in bidirectional
    assert "**An estimate of softmax attention, not exact.**" in limits and "**Bidirectional.**" in limits
    assert "Drawn by the conversion: 8 orthogonal (chi row norms) Gaussian features" in bidirectional

    _, causal, limits = cards["RobertaForCausalLM"]
    assert validate_model_card(causal)["pipeline_tag"] == "text-generation"
    assert "A **Performer** decoder (causal attention)" in causal and "| attention | FAVOR+, causal" in causal
    assert "| kernel | `relu` (" in causal and "| features | i.i.d. Gaussian rows |" in causal
    assert "| feature redraw | never: frozen" in causal and "never redrawn, in training either" in causal
    assert "encoder" not in limits.lower() and "**No key/value cache.**" in limits and "**Not softmax" in limits

    # "Padding may be on either side", as both cards say: left and right padding give the same real outputs
    assert all("Padding may be on either side" in content for _, content, _ in cards.values())
    for model, _, _ in cards.values():
        ids = torch.tensor([[0, 40, 41, 42, 43, 2]])
        pad = torch.full((1, 3), model.config.pad_token_id)
        with torch.no_grad():
            alone = model(ids).logits
            right = model(torch.cat([ids, pad], 1), attention_mask=torch.tensor([[1] * 6 + [0] * 3])).logits[:, :6]
            left = model(torch.cat([pad, ids], 1), attention_mask=torch.tensor([[0] * 3 + [1] * 6])).logits[:, 3:]
        torch.testing.assert_close(right, alone, rtol=0, atol=1e-5)
        torch.testing.assert_close(left, alone, rtol=0, atol=1e-5)


def test_transferred_performer_sentence_encoder_card_and_folder(transferred, tmp_path):
    _, folder = transferred["performer_with_modules"]
    (tmp_path / "card.json").write_text(json.dumps(TEACHER_CARD_INFO))
    output_dir = tmp_path / "folder"
    args = [folder, "someone/tiny-performer", "--dry_run", "--output_dir", str(output_dir)]
    assert push_to_hub.main(args + ["--card_info", str(tmp_path / "card.json"), "--skip_remote_check"]) == 0
    names = set(os.listdir(output_dir))
    assert {"conversion_report.json", "transfer_report.json", "modules.json", "1_Pooling", "modeling_performer.py"} <= (
        names
    )
    content = (output_dir / "README.md").read_text()
    metadata = validate_model_card(content)
    assert {"performer", "bert", "sentence-transformers"} <= set(metadata["tags"])
    assert metadata["base_model"] == "someone/tiny-sentence-bert"
    assert "Converted from the BERT checkpoint `someone/tiny-sentence-bert` (`BertModel`)" in content
    assert "Drawn by the conversion: 8 orthogonal (chi row norms) Gaussian features" in content
    # stage 1 trained W^Q, W^K, W^V only: FAVOR+ has nothing of its own to train
    report = json.loads((output_dir / "transfer_report.json").read_text())
    rate = report["arguments"]["attention_learning_rate"]
    assert "trains W^Q, W^K, W^V so that its attention output matches" in content
    assert f"learning rate {rate} for W^Q, W^K, W^V;" in content
    before_arguments, after_arguments = content.split("<details>", 1)[0], content.split("</details>", 1)[1]
    prose = before_arguments + after_arguments  # the arguments block holds every flag, projection_* included
    assert "E, F" not in prose and "projection" not in prose.lower()
    assert "Distilled from its teacher, not pretrained as a Performer" in limitations(content)
    rows = fidelity_table(content)
    assert set(rows) >= {
        f"{r['windows']} windows of {length} tokens" for length, r in report["after"]["windows"].items()
    }
    usage = content.split("## Use as a sentence encoder", 1)[1]
    assert "Transformer → Pooling → Normalize" in usage and "Performer attends in linear time." in usage

    (result,) = check_remote_loading(str(output_dir), TEXTS)  # the Auto class from the saved architecture
    assert result["linformer_hf_imported"] is False and result["tokenizer_class"] == "BertTokenizer"
    assert result["model_class"].endswith(".PerformerModel")


def test_a_performer_pretrained_from_scratch_gets_its_card_from_the_config_and_eval_results(tmp_path):
    """No conversion, no transfer: the card has no warm-start or distillation claims, reads the redraw count saved
    mid-training from the weights, and shows the pretraining's eval_results.json."""
    from linformer_hf import PerformerConfig, PerformerForMaskedLM

    config = PerformerConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=34,
        num_random_features=16,
        feature_redraw_interval=500,
    )
    model = PerformerForMaskedLM(config)
    model.roberta.encoder.training_calls.fill_(2500)  # saved mid-training: the schedule resumes from here
    model.save_pretrained(tmp_path / "run")
    build_tokenizer(str(tmp_path / "tok")).save_pretrained(tmp_path / "run")
    (tmp_path / "run" / "eval_results.json").write_text(json.dumps({"eval_loss": 5.0, "perplexity": 148.41}))
    prepare_model_folder(str(tmp_path / "run"), str(tmp_path / "folder"), "someone/performer-small")
    content = (tmp_path / "folder" / "README.md").read_text()
    assert "| feature redraw | every 500 training forward calls, never in eval; 2500 calls counted" in content
    assert "| random features m per head | 16 |" in content and "| maximum input length | 32 tokens" in content
    assert "Masked-LM validation (from `eval_results.json`): eval_loss = 5.0, perplexity = 148.41." in content
    assert "Warm-started" not in content and "Distilled" not in content and "Converted from" not in content
    assert "eval_results.json" in os.listdir(tmp_path / "folder")


@pytest.fixture(scope="module")
def every_head(tmp_path_factory):
    """A dry-run folder for every head of both families (tiny random models, each with its tokenizer):
    {(model_type, Auto class): (folder, repo id)}."""
    from linformer_hf import LinformerConfig, PerformerConfig
    from linformer_hf.loading import HEADS_BY_MODEL_TYPE

    root = tmp_path_factory.mktemp("every_head")
    tokenizer = build_tokenizer(str(root / "tokenizer"))
    sizes = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
    configs = {
        "linformer": lambda head: LinformerConfig(
            **sizes, intermediate_size=37, max_sequence_length=16, projected_length=8
        ),
        "performer": lambda head: PerformerConfig(
            **sizes,
            intermediate_size=37,
            max_position_embeddings=18,
            num_random_features=8,
            is_decoder=head == "AutoModelForCausalLM",
        ),
    }
    folders = {}
    for model_type, heads in HEADS_BY_MODEL_TYPE.items():
        for auto_name, model_class in heads.items():
            torch.manual_seed(0)
            saved = root / f"{model_type}-{auto_name}"
            model_class(configs[model_type](auto_name)).save_pretrained(saved)
            tokenizer.save_pretrained(saved)
            repo_id = f"someone/{model_type}-{auto_name.lower()}"
            output_dir = str(root / f"{model_type}-{auto_name}-hub")
            args = [str(saved), repo_id, "--dry_run", "--output_dir", output_dir, "--skip_remote_check"]
            assert push_to_hub.main(args) == 0
            folders[(model_type, auto_name)] = (output_dir, repo_id)
    return folders


def test_the_cards_loading_snippet_runs_as_written_without_the_package_and_asks_nothing(every_head, tmp_path):
    """The card's "How to load" code of every head of both families, with the repo id pointing at the dry-run folder,
    in a fresh process that does not import linformer_hf and has no terminal to answer with. Before, its AutoTokenizer
    line (no trust_remote_code) made transformers 5 ask whether to run the folder's code: a prompt in every notebook;
    and every multiple-choice card passed (1, L) inputs to a head that takes (batch, choices, L), and failed."""
    import subprocess

    script = ["import sys"]
    for (model_type, auto_name), (output_dir, repo_id) in every_head.items():
        card = open(os.path.join(output_dir, "README.md"), encoding="utf-8").read()
        loading = card.split("## How to load", 1)[1]
        snippet = re.search(r"```python\n(.*?)```", loading, re.S).group(1)
        assert "AutoTokenizer.from_pretrained" in snippet and f"{auto_name}.from_pretrained" in snippet
        code = snippet.replace(f'"{repo_id}"', repr(output_dir))
        # each card's code on its own, as written; then what it built
        script += [
            "namespace = {}",
            f"exec({code!r}, namespace)",
            f"print({model_type!r}, {auto_name!r}, type(namespace['model']).__module__, "
            "tuple(namespace['outputs'][0].shape))",
        ]
    script.append("assert 'linformer_hf' not in sys.modules")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    env.pop("PYTHONPATH", None)
    completed = subprocess.run(
        [sys.executable, "-c", "\n".join(script)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "run the custom code" not in completed.stdout + completed.stderr
    ran = {tuple(line.split()[:2]): line.split(maxsplit=3)[2:] for line in completed.stdout.splitlines()}
    assert set(ran) == set(every_head)
    for (model_type, auto_name), (module, shape) in ran.items():
        assert module.startswith("transformers_modules."), (model_type, auto_name)
        if auto_name == "AutoModelForMultipleChoice":
            assert shape == "(1, 2)"  # one prompt, a score for each of its two choices


def test_the_clean_process_check_runs_the_cards_loading_code_as_written(every_head, tmp_path):
    """The push's clean-process check runs the card's own loading code: before, it fed the multiple-choice head
    inputs of its own making (with a choices axis) and passed while the card's code failed."""
    folders = [every_head[(model_type, "AutoModelForMultipleChoice")][0] for model_type in ("linformer", "performer")]
    results = check_remote_loading(folders, TEXTS)
    for folder, result in zip(folders, results, strict=True):
        card = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
        assert result["card_code"] and "value[None]" in result["card_code"]
        assert f"AutoModelForMultipleChoice.from_pretrained({os.path.abspath(folder)!r}" in result["card_code"]
        assert result["card_code"].split("from_pretrained(")[-1].split("\n", 1)[1] in card  # the card's lines

    # the card as it was: (1, L) inputs; the check now fails on it, naming the card
    broken = tmp_path / "broken"
    shutil.copytree(folders[0], broken)
    card = (broken / "README.md").read_text(encoding="utf-8")
    old_lines = (
        'inputs = tokenizer("Linformer attends in linear time.", truncation=True, max_length=16, return_tensors="pt")\n'
        "outputs = model(**inputs)\n"
    )
    before, loading = card.split("## How to load", 1)
    model_line = loading.index("\n", loading.index("model = AutoModelForMultipleChoice")) + 1
    card = before + "## How to load" + loading[:model_line] + old_lines + loading[loading.index("```", model_line) :]
    (broken / "README.md").write_text(card, encoding="utf-8")
    assert "value[None]" not in card
    with pytest.raises(RuntimeError, match=r"card's loading code \(README.md, How to load\) fails.*shape"):
        check_remote_loading(str(broken), TEXTS)


def test_a_local_source_is_named_by_its_folder_only_and_the_push_says_how_to_name_it(converted, tmp_path, capsys):
    """A card shows a local source by its folder's name, never its full path; one from another machine (a path that
    does not exist here) is not taken for a Hub name. Before, the card printed the whole path, and such a path went
    into the base_model metadata."""
    _, folders = converted
    folder = folders["RobertaForMaskedLM"]
    report = json.loads(open(os.path.join(folder, "conversion_report.json")).read())
    source = report["source"]
    output_dir = str(tmp_path / "folder")
    push_to_hub.main([folder, "someone/x", "--dry_run", "--output_dir", output_dir, "--skip_remote_check"])
    card = open(os.path.join(output_dir, "README.md"), encoding="utf-8").read()
    assert source not in card and os.path.dirname(source) not in card
    name = os.path.basename(source)
    assert f"checkpoint `{name}` (a local folder; its Hub name was not given)" in card
    assert f"names the source {source} by its folder name only" in capsys.readouterr().err
    # nor do the reports published beside it give the local layout: folder and name only, as the card
    pushed = json.loads(open(os.path.join(output_dir, "conversion_report.json"), encoding="utf-8").read())
    assert pushed["source"] == "/".join(source.split("/")[-2:]) and pushed["max_sequence_length"] == 32
    for name in os.listdir(output_dir):
        if name.endswith(".json"):
            assert os.path.dirname(os.path.dirname(source)) not in open(os.path.join(output_dir, name)).read(), name

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "conversion_report.json").write_text(json.dumps(dict(report, source="/home/alice/models/roberta")))
    content = render_model_card(load_linformer(folder), "someone/x", model_dir=str(elsewhere))
    assert validate_model_card(content).get("base_model") is None
    assert "`roberta` (a local folder" in content and "/home/alice" not in content
    named = render_model_card(
        load_linformer(folder), "someone/x", model_dir=str(elsewhere), card_info={"base_model": "owner/roberta"}
    )
    assert validate_model_card(named)["base_model"] == "owner/roberta" and "a local folder" not in named


def test_a_tokenizer_that_is_not_the_models_is_refused_before_anything_is_written(every_head, tmp_path, capsys):
    """A tokenizer with more tokens than the model's vocabulary, or another pad id: one error line naming both
    values, nothing written. Before, the folder was written whole, then the clean-process check failed with a
    flattened child traceback; with --skip_remote_check the card claimed the config's vocabulary for a tokenizer of
    another size."""
    from tiny_bert import build_wordpiece_tokenizer

    from linformer_hf import LinformerConfig, LinformerForMaskedLM

    wordpiece = build_wordpiece_tokenizer(str(tmp_path / "wordpiece"), vocab_size=300)
    wordpiece.save_pretrained(tmp_path / "wordpiece")  # [PAD] = 0; the model pads with 1
    sizes = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37)
    for name, vocab_size, message in [
        ("small", 100, f"has {len(wordpiece)} tokens but the model's vocabulary (config.json vocab_size) is 100"),
        ("other_pad", 400, "pads with id 0 but the model's pad_token_id (config.json) is 1"),
    ]:
        config = LinformerConfig(vocab_size=vocab_size, max_sequence_length=16, projected_length=8, **sizes)
        LinformerForMaskedLM(config).save_pretrained(tmp_path / name)
        output_dir = tmp_path / f"{name}-hub"
        args = [str(tmp_path / name), "someone/x", "--dry_run", "--output_dir", str(output_dir)]
        for extra in ([], ["--skip_remote_check"]):
            assert push_to_hub.main(args + ["--tokenizer", str(tmp_path / "wordpiece")] + extra) == 2
            errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
            assert len(errors) == 1, errors
            error = errors[0]
            assert f"The tokenizer {tmp_path / 'wordpiece'} {message}" in error
            assert "Give the tokenizer the model was made with" in error
            assert not output_dir.exists()


@pytest.mark.parametrize(
    "card_info, message",
    [
        ([{"license": "mit"}], "is a JSON list, not an object of card inputs"),
        ({"licence": "mit"}, "Unknown card_info key(s) ['licence']"),
        ({"tags": "nlp"}, "tags is a JSON string: give a list"),
        ({"eval_results": CARD_INFO["eval_results"][0]}, "eval_results is a JSON object: give a list"),
        ({"eval_results": ["accuracy"]}, "eval_results[0] is a JSON string: each entry is an object"),
        (
            {"eval_results": [{k: v for k, v in CARD_INFO["eval_results"][0].items() if k != "metric_value"}]},
            "eval_results[0] lacks metric_value: each entry needs task_type, dataset_type, dataset_name, "
            "metric_type, metric_value",
        ),
        (
            {"eval_results": [CARD_INFO["eval_results"][0], dict(CARD_INFO["eval_results"][0], score=1)]},
            "eval_results[1] has unknown field(s) ['score']; EvalResult's fields are",
        ),
        ({"eval_results": [dict(CARD_INFO["eval_results"][0], dataset_name=2)]}, "dataset_name is a JSON number"),
    ],
)
def test_malformed_card_info_is_one_error_line_naming_the_entry_and_field(
    converted, tmp_path, capsys, card_info, message
):
    """Before, these gave TypeError tracebacks from the card's rendering (EvalResult(**entry), dict(card_info))."""
    _, folders = converted
    (tmp_path / "card.json").write_text(json.dumps(card_info))
    output_dir = tmp_path / "folder"
    args = [folders["RobertaForMaskedLM"], "someone/x", "--dry_run", "--output_dir", str(output_dir)]
    assert push_to_hub.main(args + ["--card_info", str(tmp_path / "card.json"), "--skip_remote_check"]) == 2
    stderr = capsys.readouterr().err
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert message in errors[0] and str(tmp_path / "card.json") in errors[0]
    assert not output_dir.exists()
