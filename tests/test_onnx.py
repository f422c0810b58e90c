"""ONNX export and ONNX Runtime inference (linformer_hf.onnx_export, scripts/export_onnx.py) on a tiny Linformer
and a tiny Performer.

Each export takes seconds, so each head is exported once per module and every test reads the same files.
"""

import importlib.util
import os
import shutil

import pytest
import torch
import torch.nn.functional as F
import transformers
from conftest import SHARED_DATA, random_batch, randomize_projections, tiny_config
from tiny_bert import build_wordpiece_tokenizer, randomize_all, tiny_bert_config
from transformers import AutoModelForSequenceClassification, AutoTokenizer, RobertaConfig, RobertaModel

from linformer_hf import (
    LinformerForMaskedLM,
    LinformerForMultipleChoice,
    LinformerForSequenceClassification,
    LinformerModel,
    PerformerConfig,
    PerformerForCausalLM,
    PerformerForMaskedLM,
    PerformerForSequenceClassification,
)
from linformer_hf.conversion import convert_checkpoint
from linformer_hf.loading import load_linformer
from linformer_hf.onnx_export import (
    INT8_FILE,
    ONNX_FILE,
    data_files,
    export_folder,
    export_onnx,
    feed_forward_unchunked,
    onnx_session,
    quantize_int8,
    run_onnx,
)

N = 16  # max_sequence_length of the tiny model
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "export_onnx.py")


def right_padded(batch_size, seq_len, real_lengths, seed=0):
    """input_ids with pad ids after each row's real length, and the matching 1/0 attention mask."""
    input_ids = random_batch(batch_size, seq_len, seed=seed)
    attention_mask = (torch.arange(seq_len)[None, :] < torch.tensor(real_lengths)[:, None]).long()
    return input_ids.masked_fill(attention_mask == 0, 1), attention_mask  # 1 = pad_token_id


def tiny_model(model_class, **overrides):
    torch.manual_seed(0)
    model = model_class(tiny_config(num_hidden_layers=2, num_labels=3, **overrides)).eval()
    randomize_projections(model)
    return model


def tiny_performer(model_class, **overrides):
    """A Performer with the tiny Linformer's sizes and longest input (N)."""
    torch.manual_seed(0)
    sizes = {key: getattr(tiny_config(), key) for key in ("vocab_size", "hidden_size", "intermediate_size")}
    config = PerformerConfig(
        **sizes, num_hidden_layers=2, num_attention_heads=4, num_labels=3, num_random_features=16,
        max_position_embeddings=N + 2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **overrides,
    )  # fmt: skip
    return model_class(config).eval()


def load_script():
    spec = importlib.util.spec_from_file_location("export_onnx_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def encoder_export(tmp_path_factory):
    """A bare LinformerModel with one segment (type_vocab_size 1, as roberta-base) exported through the library call:
    its graph takes no token_type_ids."""
    model = tiny_model(LinformerModel, type_vocab_size=1)
    path = str(tmp_path_factory.mktemp("encoder") / ONNX_FILE)
    export_onnx(model, path)
    return model, onnx_session(path), path


def export_classifier(tmp_path_factory, model, args=()):
    """A saved classifier exported through the script, reloaded from its folder for reference."""
    model_dir = str(tmp_path_factory.mktemp("classifier"))
    model.save_pretrained(model_dir)
    output_dir = str(tmp_path_factory.mktemp("classifier_onnx"))
    assert load_script().main([model_dir, output_dir, *args]) == 0
    return type(model).from_pretrained(model_dir).eval(), output_dir


@pytest.fixture(scope="module")
def classifier_export(tmp_path_factory):
    """A Linformer classifier exported through the script (fp32 and int8)."""
    return export_classifier(tmp_path_factory, tiny_model(LinformerForSequenceClassification))


@pytest.fixture(scope="module")
def performer_classifier_export(tmp_path_factory):
    """A Performer classifier exported through the script (fp32 only: int8 is the same code for every family)."""
    return export_classifier(tmp_path_factory, tiny_performer(PerformerForSequenceClassification), ["--no_int8"])


# Two lengths (one below n, one at n) and two batch sizes, every batch right-padded, all through the same file.
SHAPES = [(3, 9, [9, 5, 2]), (2, N, [N, 11])]


@pytest.mark.parametrize("batch_size,seq_len,real_lengths", SHAPES)
def test_encoder_matches_pytorch_on_padded_batches(encoder_export, batch_size, seq_len, real_lengths):
    model, session, _ = encoder_export
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    input_ids, attention_mask = right_padded(batch_size, seq_len, real_lengths)
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask)
    got = run_onnx(session, input_ids, attention_mask)
    assert set(got) == {"last_hidden_state", "pooler_output"}
    for name, value in got.items():
        assert value.shape == expected[name].shape
        torch.testing.assert_close(value, expected[name], atol=1e-4, rtol=0)


@pytest.mark.parametrize("export", ["classifier_export", "performer_classifier_export"])
@pytest.mark.parametrize("batch_size,seq_len,real_lengths", SHAPES)
def test_classifier_matches_pytorch_on_padded_batches(export, batch_size, seq_len, real_lengths, request):
    model, output_dir = request.getfixturevalue(export)
    session = onnx_session(os.path.join(output_dir, ONNX_FILE))
    input_ids, attention_mask = right_padded(batch_size, seq_len, real_lengths, seed=1)
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(run_onnx(session, input_ids, attention_mask)["logits"], expected, atol=1e-4, rtol=0)


QNLI = os.path.join(SHARED_DATA, "qnli", "train.tsv")


def qnli_pairs(rows: int = 200) -> tuple[list[str], list[str]]:
    """Real (question, sentence) pairs of the QNLI file: the five shortest of its first `rows` (shorter than n = 64
    tokens, so padded in a batch) and the first one (longer: truncated to n)."""
    with open(QNLI, encoding="utf-8") as fh:
        pairs = [line.rstrip("\n").split("\t")[:2] for _, line in zip(range(rows + 1), fh)][1:]
    chosen = [pairs[0], *sorted(pairs, key=lambda pair: len(pair[0]) + len(pair[1]))[:5]]
    return [pair[0] for pair in chosen], [pair[1] for pair in chosen]


@pytest.fixture(scope="module", params=["linformer", "performer"])
def bert_pair_classifier_export(request, tmp_path_factory):
    """A BERT sentence-pair classifier (two segments: type_vocab_size 2) converted to each family with its WordPiece
    tokenizer, then exported through the script: the model a user fine-tunes on QNLI and deploys."""
    root = tmp_path_factory.mktemp(f"bert_pairs_{request.param}")
    tokenizer = build_wordpiece_tokenizer(str(root / "wordpiece"))
    bert = transformers.BertForSequenceClassification(tiny_bert_config(num_labels=2)).eval()
    randomize_all(bert, seed=3)
    bert.save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    options = {"projected_length": 8} if request.param == "linformer" else {"num_random_features": 16}
    convert_checkpoint(str(root / "bert"), str(root / "model"), target=request.param, max_sequence_length=64, **options)
    output_dir = str(root / "onnx")
    assert load_script().main([str(root / "model"), output_dir]) == 0
    model = AutoModelForSequenceClassification.from_pretrained(str(root / "model")).eval()
    return model, AutoTokenizer.from_pretrained(output_dir), output_dir


def test_the_export_carries_the_models_tokenizer(bert_pair_classifier_export):
    """The export folder is what a deployment gets: the model's own tokenizer comes with the graph (the pair test
    above encodes its inputs with it), padding on the side the model takes."""
    model, tokenizer, output_dir = bert_pair_classifier_export
    source = AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(output_dir), "model"))
    pairs = qnli_pairs()
    assert tokenizer(*pairs)["input_ids"] == source(*pairs)["input_ids"]
    assert tokenizer.padding_side == "right" and tokenizer.model_max_length == 64


@pytest.mark.parametrize("precision", [ONNX_FILE, INT8_FILE])
def test_a_pair_classifier_exports_its_token_types(bert_pair_classifier_export, precision):
    """Real QNLI pairs through the model's own BERT tokenizer (token_type_ids 1 on the second text, right padding):
    the graph takes token_type_ids and computes what PyTorch computes with them, fp32 to 1e-4, int8 close."""
    model, tokenizer, output_dir = bert_pair_classifier_export
    assert model.config.type_vocab_size == 2
    session = onnx_session(os.path.join(output_dir, precision))
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    batch = tokenizer(*qnli_pairs(), truncation=True, padding=True, return_tensors="pt")  # to n = 64
    assert batch["token_type_ids"].any() and not batch["attention_mask"].all()  # two segments, and padding
    with torch.no_grad():
        expected = model(**batch).logits
        without_types = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    # The token types matter to this model: a graph that dropped them would be caught.
    assert (without_types - expected).abs().max() > 1e-2
    got = run_onnx(session, **batch)["logits"]
    if precision == ONNX_FILE:
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
        # Not given, the types are zeros in the graph as in the PyTorch forward.
        alone = run_onnx(session, batch["input_ids"], batch["attention_mask"])["logits"]
        torch.testing.assert_close(alone, without_types, atol=1e-4, rtol=0)
    else:
        assert F.cosine_similarity(got.flatten(), expected.flatten(), dim=0) >= 0.99
        assert (got - expected).abs().max() < (without_types - expected).abs().max()


def test_a_one_segment_graph_refuses_token_types_it_cannot_read(encoder_export):
    """A RoBERTa-style model (type_vocab_size 1) takes no token_type_ids; all-zero ones (what a BERT-style tokenizer
    gives for single texts) change nothing, any 1 is refused as the PyTorch forward refuses it."""
    model, session, _ = encoder_export
    assert model.config.type_vocab_size == 1
    input_ids, attention_mask = right_padded(2, 9, [9, 4])
    zeros = run_onnx(session, input_ids, attention_mask, token_type_ids=torch.zeros_like(input_ids))
    torch.testing.assert_close(
        zeros["last_hidden_state"], run_onnx(session, input_ids, attention_mask)["last_hidden_state"]
    )
    with pytest.raises(ValueError, match="one segment .*takes no token_type_ids"):
        run_onnx(session, input_ids, attention_mask, token_type_ids=torch.ones_like(input_ids))


HIDE_MODULE = """
import importlib.machinery, runpy, sys
class Hidden(importlib.machinery.PathFinder):  # finds every installed module but one: as if it were not installed
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            return None
        return super().find_spec(name, path, target)
sys.meta_path = [Hidden if finder is importlib.machinery.PathFinder else finder for finder in sys.meta_path]
sys.argv = {argv!r}
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("module,args", [("onnxscript", []), ("onnxruntime", []), ("onnxruntime", ["--no_int8"])])
def test_without_the_onnx_extra_the_script_names_the_pip_install_before_any_work(tmp_path, module, args):
    """torch's exporter imports onnxscript half-way through the export; the int8 step imports onnxruntime. Without
    them the script says, on one line, which extra to install, and writes nothing. fp32 only needs no onnxruntime."""
    from training_utils import run_script

    model_dir, output_dir = tmp_path / "model", tmp_path / "onnx"
    tiny_model(LinformerModel).save_pretrained(model_dir)
    argv = [SCRIPT, str(model_dir), str(output_dir), *args]
    result = run_script(["-c", HIDE_MODULE.format(module=module, argv=argv)])
    if module == "onnxruntime" and args:
        assert result.returncode == 0, result.stderr[-2000:]
        assert os.path.isfile(output_dir / ONNX_FILE)
        return
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert module in lines[0] and 'pip install "linformer-hf[onnx]"' in lines[0]
    assert not output_dir.exists()


def test_pooled_projection_and_chunked_feed_forward_export_for_every_length(tmp_path):
    """Max pooling pads L to whole bins and the feed-forward may be chunked: neither may be fixed at the traced
    length (8). L = 9 needs a padded bin; L = 12 is a multiple of the chunk size other than the traced one."""
    model = tiny_model(LinformerModel, projection="max", sharing="none", chunk_size_feed_forward=4)
    path = str(tmp_path / ONNX_FILE)
    export_onnx(model, path)
    assert {layer.chunk_size_feed_forward for layer in model.encoder.layer} == {4}, "export left chunking off"
    session = onnx_session(path)
    for batch_size, seq_len, real_lengths in [(2, 9, [9, 4]), (3, 12, [12, 5, 1])]:
        input_ids, attention_mask = right_padded(batch_size, seq_len, real_lengths, seed=seq_len)
        with torch.no_grad(), feed_forward_unchunked(model):  # eager chunking needs L % 4 == 0
            expected = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        got = run_onnx(session, input_ids, attention_mask)["last_hidden_state"]
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_multiple_choice_exports_with_a_dynamic_choice_axis(tmp_path):
    """The one head with (batch, choices, L) inputs: traced with 2 choices, run with 3, rows right-padded."""
    model = tiny_model(LinformerForMultipleChoice)
    path = str(tmp_path / ONNX_FILE)
    assert export_onnx(model, path) == ["logits"]
    input_ids, attention_mask = right_padded(6, 11, [11, 4, 7, 11, 2, 9], seed=5)
    input_ids, attention_mask = input_ids.view(2, 3, 11), attention_mask.view(2, 3, 11)
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (2, 3)
    got = run_onnx(onnx_session(path), input_ids, attention_mask)["logits"]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", ["linformer", "performer"])
def test_the_pretraining_head_exports_as_the_masked_lm(family, tmp_path):
    """AutoModelForPreTraining (registered for both families: the masked LM, as transformers maps RoBERTa's) was no
    --head choice of scripts/export_onnx.py. Exported with it, a saved masked LM gives eager's logits on a padded
    batch, and the export's config names the masked LM."""
    model = tiny_model(LinformerForMaskedLM) if family == "linformer" else tiny_performer(PerformerForMaskedLM)
    model_dir, output_dir = tmp_path / "mlm", tmp_path / "onnx"
    model.save_pretrained(model_dir)
    args = [str(model_dir), str(output_dir), "--head", "AutoModelForPreTraining", "--no_int8"]
    assert load_script().main(args) == 0
    assert transformers.AutoConfig.from_pretrained(output_dir).architectures == [type(model).__name__]
    reference = type(model).from_pretrained(model_dir).eval()
    session = onnx_session(str(output_dir / ONNX_FILE))
    for batch_size, seq_len, real_lengths in SHAPES:
        input_ids, attention_mask = right_padded(batch_size, seq_len, real_lengths)
        with torch.no_grad():
            expected = reference(input_ids=input_ids, attention_mask=attention_mask).logits
        got = run_onnx(session, input_ids, attention_mask)["logits"]
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_an_input_longer_than_n_is_refused_as_the_model_refuses_it(encoder_export):
    """ONNX Runtime failed on it with an index error in a Gather node; the graph records n in its metadata."""
    model, session, _ = encoder_export
    n = model.config.max_sequence_length
    with pytest.raises(ValueError, match=f"Input length {n + 1} exceeds the model's longest input n={n}"):
        run_onnx(session, torch.ones(1, n + 1, dtype=torch.long), torch.ones(1, n + 1, dtype=torch.long))
    assert run_onnx(session, torch.ones(1, n, dtype=torch.long), torch.ones(1, n, dtype=torch.long))


def test_the_exported_mask_is_used(encoder_export):
    """Padding changes nothing at real positions and something at padded ones: the graph reads the mask input."""
    _, session, _ = encoder_export
    input_ids, _ = right_padded(1, 12, [12])
    real = 7
    alone = run_onnx(session, input_ids[:, :real], torch.ones(1, real, dtype=torch.long))["last_hidden_state"]
    padded_ids, padded_mask = right_padded(1, 12, [real])
    padded_ids[:, :real] = input_ids[:, :real]
    padded = run_onnx(session, padded_ids, padded_mask)["last_hidden_state"]
    torch.testing.assert_close(padded[:, :real], alone, atol=1e-4, rtol=0)
    # The same ids with an all-ones mask: padding is then attended to, so the real positions move.
    unmasked = run_onnx(session, padded_ids, torch.ones_like(padded_mask))["last_hidden_state"]
    assert (unmasked[:, :real] - alone).abs().max() > 1e-2


def test_int8_model_is_quantised_and_close_to_fp32(classifier_export):
    import onnx

    _, output_dir = classifier_export
    int8_path = os.path.join(output_dir, INT8_FILE)
    op_types = {node.op_type for node in onnx.load(int8_path).graph.node}
    assert "MatMulInteger" in op_types, "quantize_dynamic left every MatMul in fp32"
    assert data_files(int8_path) == [INT8_FILE + ".data"], "int8 weights not in their own file beside the graph"
    fp32, int8 = onnx_session(os.path.join(output_dir, ONNX_FILE)), onnx_session(int8_path)
    input_ids, attention_mask = right_padded(4, N, [N, 12, 7, 3], seed=2)
    expected = run_onnx(fp32, input_ids, attention_mask)["logits"]
    got = run_onnx(int8, input_ids, attention_mask)["logits"]
    cosine = F.cosine_similarity(got.flatten(), expected.flatten(), dim=0).item()
    # Measured on this tiny random model: 0.99985 (logits), >= 0.99996 per token (hidden states); the floor leaves
    # room for other seeds. int8 weights do change the output.
    assert not torch.equal(got, expected)
    assert cosine >= 0.999, f"int8 logits cosine {cosine:.5f} against fp32"


def test_quantize_int8_of_the_encoder(encoder_export, tmp_path, caplog):
    """The library call on its own, on the other head: int8 hidden states stay close to fp32. The quantiser's warning
    for each tensor it leaves alone (with the tensor's whole protobuf type: pages of them) is one line."""
    _, _, fp32_path = encoder_export
    int8_path = str(tmp_path / INT8_FILE)
    with caplog.at_level("WARNING"):
        quantize_int8(fp32_path, int8_path)
    assert "Inference failed or unsupported type" not in caplog.text and "elem_type" not in caplog.text
    assert "were left as they are" in caplog.text
    # Again into the same path: onnx appends external data to an existing file, so a stale one would grow.
    size = os.path.getsize(int8_path + ".data")
    quantize_int8(fp32_path, int8_path)
    assert os.path.getsize(int8_path + ".data") == size
    input_ids, attention_mask = right_padded(2, 10, [10, 6], seed=3)
    expected = run_onnx(onnx_session(fp32_path), input_ids, attention_mask)["last_hidden_state"]
    got = run_onnx(onnx_session(int8_path), input_ids, attention_mask)["last_hidden_state"]
    real = attention_mask.bool()
    assert F.cosine_similarity(got[real], expected[real], dim=-1).min() >= 0.999


def test_a_folder_that_is_not_a_linformer_is_refused(tmp_path):
    roberta_dir = tmp_path / "roberta"
    RobertaModel(
        RobertaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37)
    ).save_pretrained(roberta_dir)
    with pytest.raises(ValueError, match="not a Linformer.*convert_to_linformer"):
        load_linformer(str(roberta_dir))
    with pytest.raises(ValueError, match="no config.json"):
        load_linformer(str(tmp_path / "empty"))
    # The script reports it on one line and exits 2, writing nothing.
    assert load_script().main([str(roberta_dir), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_a_folder_without_weights_is_refused_naming_the_fix(classifier_export, tmp_path):
    """An export folder (config.json, no weights) given as the model: before, transformers' "no file named
    model.safetensors"."""
    _, output_dir = classifier_export
    assert load_script().main([output_dir, str(tmp_path / "out")]) == 2
    with pytest.raises(ValueError, match=f"{output_dir} holds no weights .*save_pretrained"):
        export_folder(output_dir, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_causal_performer_is_refused_before_any_work(tmp_path):
    model_dir = tmp_path / "causal"
    tiny_performer(PerformerForCausalLM, is_decoder=True).save_pretrained(model_dir)
    with pytest.raises(ValueError, match=r"PerformerForCausalLM is causal .*cummax.*no ONNX operator"):
        export_folder(str(model_dir), str(tmp_path / "out"))
    assert load_script().main([str(model_dir), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_an_unknown_head_is_refused(tmp_path):
    tiny_model(LinformerModel).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="Unknown head 'AutoModelForCausalLM'"):
        load_linformer(str(tmp_path), head="AutoModelForCausalLM")


def test_a_head_whose_weights_the_folder_lacks_is_refused_before_any_export(tmp_path):
    """A masked LM exported as a classifier had a random classifier, exported without a word (exit 0); dropping the
    head (the bare model) is fine."""
    model_dir = tmp_path / "mlm"
    tiny_model(LinformerForMaskedLM).save_pretrained(model_dir)
    with pytest.raises(
        ValueError,
        match=r"no weights for \d+ tensor\(s\) of AutoModelForSequenceClassification .*"
        r"saved as LinformerForMaskedLM",
    ):
        export_folder(str(model_dir), str(tmp_path / "out"), head="AutoModelForSequenceClassification", int8=False)
    assert not (tmp_path / "out").exists()
    assert type(load_linformer(str(model_dir), head="AutoModel")).__name__ == "LinformerModel"


def test_weights_are_written_beside_the_graph(encoder_export):
    """Every export takes the large-model path: the graph names one data file, by a relative path, and every
    weight-sized initializer is stored there, not in the .onnx."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    model, _, path = encoder_export
    assert data_files(path) == [ONNX_FILE + ".data"]
    graph = onnx.load(path, load_external_data=False).graph
    inline = [t.name for t in graph.initializer if not uses_external_data(t) and len(t.raw_data) > 1024]
    assert not inline, f"weights left inside the graph: {inline}"
    # The weight matrices all went there (the writer keeps tensors of <= 256 bytes, LayerNorm's, inline).
    external_bytes = sum(ExternalDataInfo(t).length for t in graph.initializer if uses_external_data(t))
    assert external_bytes >= sum(p.numel() * p.element_size() for p in model.parameters() if p.dim() == 2)


def test_the_export_folder_is_self_contained_and_movable(classifier_export, tmp_path):
    """The folder copied elsewhere and the original gone: fp32 still matches PyTorch on a padded batch, int8 still
    runs close to it; a graph copied without its data file is a clear error."""
    model, output_dir = classifier_export
    config = ["config.json", "configuration_linformer.py", "compat.py"]  # the last two for trust_remote_code readers
    assert sorted(os.listdir(output_dir)) == sorted(
        [*config, ONNX_FILE, ONNX_FILE + ".data", INT8_FILE, INT8_FILE + ".data"]
    )
    copied = shutil.copytree(output_dir, tmp_path / "copy")
    moved = shutil.move(str(copied), str(tmp_path / "elsewhere" / "onnx"))  # the source of the move is gone
    input_ids, attention_mask = right_padded(3, 13, [13, 8, 4], seed=7)
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask).logits
    fp32 = run_onnx(onnx_session(os.path.join(moved, ONNX_FILE)), input_ids, attention_mask)["logits"]
    torch.testing.assert_close(fp32, expected, atol=1e-4, rtol=0)
    int8 = run_onnx(onnx_session(os.path.join(moved, INT8_FILE)), input_ids, attention_mask)["logits"]
    assert F.cosine_similarity(int8.flatten(), fp32.flatten(), dim=0) >= 0.99

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(os.path.join(moved, ONNX_FILE), alone)
    with pytest.raises(FileNotFoundError, match="model.onnx.data.*copy or move the export folder whole"):
        onnx_session(str(alone / ONNX_FILE))


def test_the_int8_data_file_is_as_readable_as_the_other_files(classifier_export):
    """onnx wrote model_int8.onnx.data readable by its owner only (0600), unlike every other file of the export: a
    server running as another user could load the fp32 graph but not the int8 one."""
    _, output_dir = classifier_export
    modes = {name: os.stat(os.path.join(output_dir, name)).st_mode & 0o777 for name in os.listdir(output_dir)}
    assert modes[INT8_FILE + ".data"] == modes[ONNX_FILE + ".data"] == modes["config.json"], modes


def test_an_earlier_export_is_not_overwritten(classifier_export, tmp_path):
    """A non-empty output_dir is refused before any work (checked even before the model folder is read); with
    --overwrite the earlier export's files are replaced (an int8 graph and a tokenizer the new export does not write
    included: a tokenizer of another model must not stay beside the new graph) and other files are kept."""
    _, earlier_dir = classifier_export
    output_dir = shutil.copytree(earlier_dir, tmp_path / "onnx")
    (output_dir / "tokenizer.json").write_text("{}")
    (output_dir / "README.md").write_text("notes")
    before = {name: (output_dir / name).read_bytes() for name in os.listdir(output_dir)}
    with pytest.raises(FileExistsError, match=r"not empty .*another output directory.*--overwrite"):
        export_folder(str(tmp_path / "no_such_model"), str(output_dir))
    model_dir = tmp_path / "model"
    tiny_model(LinformerModel).save_pretrained(model_dir)
    assert load_script().main([str(model_dir), str(output_dir), "--no_int8"]) == 2
    assert {name: (output_dir / name).read_bytes() for name in os.listdir(output_dir)} == before
    with pytest.raises(ValueError, match="must differ from model_dir"):
        export_folder(str(model_dir), str(model_dir), overwrite=True)

    assert load_script().main([str(model_dir), str(output_dir), "--no_int8", "--overwrite"]) == 0
    assert sorted(os.listdir(output_dir)) == sorted(
        ["config.json", "configuration_linformer.py", "compat.py", ONNX_FILE, ONNX_FILE + ".data", "README.md"]
    )
    assert (output_dir / "README.md").read_text() == "notes"
    session = onnx_session(str(output_dir / ONNX_FILE))
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "pooler_output"]  # the new head's


def test_an_export_stopped_part_way_leaves_nothing_that_reads_as_an_export(classifier_export, tmp_path, monkeypatch):
    """Stopped while quantising (Ctrl-C): before, the new folder held model.onnx and its data file with no config,
    int8 graph or tokenizer, and an --overwrite had already deleted the earlier export. Now the export is written
    beside the folder and moved in when whole: nothing is left, and an earlier export stays as it was."""
    import linformer_hf.onnx_export as onnx_export

    model_dir = tmp_path / "model"
    tiny_model(LinformerModel).save_pretrained(model_dir)
    earlier = shutil.copytree(classifier_export[1], tmp_path / "earlier")
    before = {name: (earlier / name).read_bytes() for name in os.listdir(earlier)}

    def stopped(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(onnx_export, "quantize_int8", stopped)
    with pytest.raises(KeyboardInterrupt):
        export_folder(str(model_dir), str(tmp_path / "new"))
    with pytest.raises(KeyboardInterrupt):
        export_folder(str(model_dir), str(earlier), overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["earlier", "model"]  # no partial export, no staging folder
    assert {name: (earlier / name).read_bytes() for name in os.listdir(earlier)} == before


def test_an_export_stopped_by_sigterm_leaves_no_staging_folder(tmp_path, monkeypatch, send_sigterm):
    """`kill` (SIGTERM) unwinds as Ctrl-C does: before, the process ended and its staging folder stayed."""
    import linformer_hf.onnx_export as onnx_export

    model_dir = tmp_path / "model"
    tiny_model(LinformerModel).save_pretrained(model_dir)
    monkeypatch.setattr(onnx_export, "quantize_int8", send_sigterm)
    with pytest.raises(KeyboardInterrupt):
        load_script().main([str(model_dir), str(tmp_path / "onnx")])
    assert sorted(os.listdir(tmp_path)) == ["model"]


def half_precision_folder(kind, model_dir):
    """A saved folder in half precision, and its fp32 reference: bf16 weights (a Linformer classifier), a Performer's
    bf16 feature maps, fp16 weights (a Performer)."""
    if kind == "bf16 weights":
        model = tiny_model(LinformerForSequenceClassification)
        model.to(torch.bfloat16).save_pretrained(model_dir)
        # bf16 weights read back as fp32 are the same numbers: the reference is the saved model computing in fp32.
        return LinformerForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()
    if kind == "bf16 feature maps":
        model = tiny_performer(PerformerForSequenceClassification, feature_map_dtype="bfloat16")
        model.save_pretrained(model_dir)
        model.config.feature_map_dtype = "float32"
        return model
    model = tiny_performer(PerformerForSequenceClassification)
    model.to(torch.float16).save_pretrained(model_dir)
    return PerformerForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize("kind", ["bf16 weights", "bf16 feature maps", "fp16 weights"])
def test_a_half_precision_folder_is_exported_in_fp32(tmp_path, kind, caplog):
    """transformers 5 loads a folder in its saved dtype: the graph held bf16 weights (or bf16 FAVOR+ matmuls), which
    ONNX Runtime's CPU kernels do not implement (the script had printed the path and exited 0), and an fp16 graph's
    int8 quantisation was an invalid graph. Exported in fp32, both graphs run and match PyTorch in fp32."""
    model_dir, output_dir = tmp_path / "model", tmp_path / "onnx"
    reference = half_precision_folder(kind, model_dir)
    with caplog.at_level("WARNING"):
        assert load_script().main([str(model_dir), str(output_dir)]) == 0
    assert f"saved with {kind.replace('bf16', 'bfloat16').replace('fp16', 'float16')}: exported in float32" in (
        caplog.text
    )
    input_ids, attention_mask = right_padded(3, 11, [11, 7, 2], seed=4)
    with torch.no_grad():
        expected = reference(input_ids=input_ids, attention_mask=attention_mask).logits
    fp32 = run_onnx(onnx_session(str(output_dir / ONNX_FILE)), input_ids, attention_mask)["logits"]
    torch.testing.assert_close(fp32, expected, atol=1e-4, rtol=0)
    int8 = run_onnx(onnx_session(str(output_dir / INT8_FILE)), input_ids, attention_mask)["logits"]
    assert F.cosine_similarity(int8.flatten(), fp32.flatten(), dim=0) >= 0.99
    # The config beside the graph says what the graph computes.
    config = transformers.AutoConfig.from_pretrained(output_dir, trust_remote_code=True)
    assert config.dtype in (torch.float32, "float32") and getattr(config, "feature_map_dtype", "float32") == "float32"


def test_export_onnx_refuses_a_model_not_in_fp32(tmp_path):
    """The library call takes the model as it is: a bf16 one is refused before the export, naming the fix."""
    model = tiny_model(LinformerModel).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"weights in torch.bfloat16.*call model.float\(\)"):
        export_onnx(model, str(tmp_path / ONNX_FILE))
    performer = tiny_performer(PerformerForSequenceClassification, feature_map_dtype="float16")
    with pytest.raises(ValueError, match="feature_map_dtype='float16'.*feature_map_dtype = \"float32\""):
        export_onnx(performer, str(tmp_path / ONNX_FILE))
    assert not os.listdir(tmp_path)


def refused_by_the_model(model, **inputs) -> str:
    """The PyTorch forward's error for these inputs."""
    with pytest.raises(ValueError) as refused:
        model(**inputs)
    return str(refused.value)


def test_run_onnx_refuses_the_inputs_the_model_refuses(encoder_export):
    """The graph skips the forward's data-dependent checks. A left-padded mask (a Linformer) and an additive mask ran
    silently with wrong outputs, a mask of another shape failed deep in ONNX Runtime (a Mul's broadcast), an id out of
    the vocabulary in its Gather: each is now the PyTorch forward's own error, before the graph runs."""
    model, session, _ = encoder_export
    input_ids, attention_mask = right_padded(2, 9, [9, 5])
    left_padded = attention_mask.flip(-1)
    out_of_vocabulary = input_ids.clone()
    out_of_vocabulary[0, 3] = model.config.vocab_size
    cases = {
        "left padding": (input_ids, left_padded),
        "additive mask": (input_ids, (1 - attention_mask) * -10000),
        "mask of another shape": (input_ids, attention_mask[:, :6]),
        "id out of the vocabulary": (out_of_vocabulary, attention_mask),
    }
    for case, (ids, mask) in cases.items():
        expected = refused_by_the_model(model, input_ids=ids, attention_mask=mask)
        with pytest.raises(ValueError) as refused:
            run_onnx(session, ids, mask)
        assert str(refused.value) == expected, case
    with pytest.raises(ValueError, match=r"token_type_ids must have the shape of input_ids, \(2, 9\), got \(2, 8\)"):
        run_onnx(session, input_ids, attention_mask, token_type_ids=torch.zeros(2, 8, dtype=torch.long))
    # A bool mask is a 0/1 mask.
    torch.testing.assert_close(
        run_onnx(session, input_ids, attention_mask.bool())["last_hidden_state"],
        run_onnx(session, input_ids, attention_mask)["last_hidden_state"],
    )


def test_run_onnx_takes_left_padding_for_a_performer(performer_classifier_export):
    """A Performer takes either side: its graph runs a left-padded batch as PyTorch does; its ids are checked too."""
    model, output_dir = performer_classifier_export
    session = onnx_session(os.path.join(output_dir, ONNX_FILE))
    input_ids, attention_mask = right_padded(2, 9, [9, 5], seed=6)
    input_ids, attention_mask = input_ids.flip(-1), attention_mask.flip(-1)
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(run_onnx(session, input_ids, attention_mask)["logits"], expected, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="input_ids holds 99, but the model's vocab_size is 99"):
        run_onnx(session, input_ids.masked_fill(attention_mask == 0, 99), attention_mask)


def test_a_graph_exported_before_its_metadata_runs_with_the_checks_it_can(encoder_export, tmp_path):
    """A graph without the family and sizes in its metadata (exported before they were written) is still run: its
    padding side and ids are not checked (nothing says it is a Linformer); the mask's shape and values are."""
    import onnx

    model, _, path = encoder_export
    graph = onnx.load(path, load_external_data=False)
    assert {p.key: p.value for p in graph.metadata_props} == {
        "max_input_length": str(N),
        "model_type": "linformer",
        "vocab_size": str(model.config.vocab_size),
        "type_vocab_size": "1",
    }
    del graph.metadata_props[:]
    onnx.save(graph, str(tmp_path / ONNX_FILE))
    shutil.copy(path + ".data", tmp_path)
    session = onnx_session(str(tmp_path / ONNX_FILE))
    input_ids, attention_mask = right_padded(2, 9, [9, 5])
    assert run_onnx(session, input_ids, attention_mask.flip(-1))["last_hidden_state"].shape == (2, 9, 32)
    with pytest.raises(ValueError, match="must hold 1 for real tokens and 0 for padding"):
        run_onnx(session, input_ids, attention_mask * 2)


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_an_output_dir_holding_a_saved_model_is_refused(tmp_path, capsys, weights, overwrite):
    """--overwrite into another model's folder deleted its config.json (and configuration files) and wrote the
    export's: that model was left broken. A folder holding weights is refused, with or without --overwrite, before the
    model to export is read."""
    victim = tmp_path / "victim"
    tiny_model(LinformerForSequenceClassification).save_pretrained(victim)
    if weights != "model.safetensors":
        os.replace(victim / "model.safetensors", victim / weights)
    before = {name: (victim / name).read_bytes() for name in os.listdir(victim)}
    model_dir = tmp_path / "model"
    tiny_model(LinformerModel).save_pretrained(model_dir)
    capsys.readouterr()  # save_pretrained's progress bars
    assert load_script().main([str(model_dir), str(victim), "--no_int8", *overwrite]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"holds a saved model ({weights})" in lines[0], lines
    assert "Give another folder for the export" in lines[0]
    assert {name: (victim / name).read_bytes() for name in os.listdir(victim)} == before
    with pytest.raises(ValueError, match="holds a saved model"):
        export_folder(str(tmp_path / "no_such_model"), str(victim), overwrite=True)


def test_an_output_dir_under_a_file_is_refused_before_any_work(tmp_path, capsys):
    """A regular file on the output path failed with "[Errno 20] Not a directory" only after the model was loaded."""
    (tmp_path / "afile").write_text("x")
    output_dir = tmp_path / "afile" / "out"
    with pytest.raises(NotADirectoryError, match=r"afile is a file, not a folder: .*afile/out cannot be made inside"):
        export_folder(str(tmp_path / "no_such_model"), str(output_dir))  # refused before the model folder is read
    model_dir = tmp_path / "model"
    tiny_model(LinformerModel).save_pretrained(model_dir)
    capsys.readouterr()  # save_pretrained's progress bars
    assert load_script().main([str(model_dir), str(output_dir), "--no_int8"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "afile is a file, not a folder" in lines[0], lines
