"""Spectrum analysis of P (the paper's Figure 1): exact on known matrices, consistent shapes, files written."""

import csv
import json
import os

import pytest
import torch
import transformers
from tiny_roberta import build_tokenizer, randomize_all, tiny_roberta_config

from experiments import analyze_spectrum
from experiments.spectrum import (
    Spectrum,
    attention_structure,
    compute_spectrum,
    cumulative_spectrum,
    document_windows,
    pack_inputs,
    read_texts,
    write_csv,
)
from linformer_hf import LinformerConfig, LinformerModel

SST2_DEV = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "sst2", "dev.tsv")
WIKITEXT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "wikitext-2", "valid.txt")


def test_cumulative_spectrum_of_known_matrices():
    identity = torch.eye(6)  # six singular values of 1: c_i = i / 6
    torch.testing.assert_close(cumulative_spectrum(identity), torch.arange(1, 7, dtype=torch.float64) / 6)
    uniform = torch.full((5, 5), 0.2)  # every row attends evenly: rank 1
    torch.testing.assert_close(cumulative_spectrum(uniform), torch.ones(5, dtype=torch.float64))
    wide = torch.softmax(torch.randn(2, 3, 8, 4), -1)  # (batch, heads, L, k): r = k
    curves = cumulative_spectrum(wide)
    assert curves.shape == (2, 3, 4)
    assert torch.all(curves.diff(dim=-1) >= 0) and torch.allclose(curves[..., -1], torch.ones(2, 3).double())


def test_roberta_spectrum_averages_per_input_svds():
    model = transformers.RobertaModel(tiny_roberta_config(attn_implementation="eager")).eval()
    randomize_all(model)
    ids = torch.randint(3, 300, (3, 12))
    spectrum = compute_spectrum(model, ids, batch_size=2)
    assert spectrum.curves.shape == (2, 4, 12) and spectrum.num_inputs == 3 and spectrum.rank == 12

    attentions = model(ids, output_attentions=True).attentions
    layer, head = 1, 2
    by_hand = (
        sum(
            torch.linalg.svdvals(attentions[layer][i, head].double()).cumsum(0)
            / torch.linalg.svdvals(attentions[layer][i, head].double()).sum()
            for i in range(3)
        )
        / 3
    )
    torch.testing.assert_close(spectrum.curves[layer, head], by_hand.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(spectrum.at_index(5), spectrum.curves[..., 4])
    with pytest.raises(ValueError, match="index 13 is outside 1..12"):
        spectrum.at_index(13)


def test_linformer_spectrum_has_k_singular_values():
    config = LinformerConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_sequence_length=16,
        projected_length=[8, 4],
        sharing="none",
        attn_implementation="eager",
    )
    model = LinformerModel(config).eval()
    spectrum = compute_spectrum(model, torch.randint(3, 300, (2, 16)))
    assert spectrum.curves.shape == (2, 4, 8)
    # layer 2 has k = 4: its curves end at 4 and are padded with 1.0 (its singular values past 4 are 0)
    assert spectrum.layer_ranks == [8, 4]
    assert torch.all(spectrum.curves[1, :, 3:] == 1.0) and torch.all(spectrum.curves[0, :, :7] < 1.0)


def test_packed_inputs_are_full_length_without_padding(tmp_path):
    tokenizer = build_tokenizer(str(tmp_path))
    texts = read_texts(SST2_DEV, limit=50)
    ids = pack_inputs(tokenizer, texts, seq_len=20, max_inputs=5)
    assert ids.shape == (5, 20)
    assert torch.all(ids[:, 0] == tokenizer.bos_token_id) and torch.all(ids[:, -1] == tokenizer.eos_token_id)
    assert not torch.any(ids == tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="fewer than one input of 512"):
        pack_inputs(tokenizer, texts[:1], seq_len=512, max_inputs=5)
    assert not any(line.startswith("=") for line in read_texts(WIKITEXT, limit=200))


def test_script_writes_csv_plots_and_summary(tmp_path):
    directory = tmp_path / "roberta"
    tokenizer = build_tokenizer(str(tmp_path / "tokenizer"))
    model = transformers.RobertaForMaskedLM(tiny_roberta_config())
    randomize_all(model)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)

    analyze_spectrum.main([str(directory), SST2_DEV, str(tmp_path / "out"), "--max_inputs", "4", "--index", "4"])
    out = tmp_path / "out"
    with open(out / "spectrum_curves.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 * 4 * 16  # layers x heads x r, with L = n = 16
    with open(out / "spectrum_at_index.csv") as handle:
        at_index = list(csv.DictReader(handle))
    assert len(at_index) == 8
    matching = [r for r in rows if r["layer"] == "1" and r["head"] == "3" and r["index"] == "4"]
    assert matching[0]["cumulative_normalised_singular_value"] == at_index[7]["cumulative_at_4"]
    summary = json.loads((out / "spectrum_summary.json").read_text())
    assert summary["num_inputs"] == 4 and summary["seq_len"] == 16 and summary["index"] == 4
    for image in ("spectrum_curves.png", "spectrum_heatmap.png"):
        assert (out / image).read_bytes()[:4] == b"\x89PNG"


class StoppedWhileWritingHeads(Spectrum):
    """A spectrum whose second head's local mass stops the run (Ctrl-C) while spectrum_heads.csv is written."""

    @property
    def local_mass(self):
        self.reads = getattr(self, "reads", 0) + 1
        if self.reads == 2:
            raise KeyboardInterrupt
        return super().local_mass


def test_a_run_stopped_while_writing_a_csv_leaves_the_earlier_file_whole(tmp_path):
    """write_csv wrote each CSV straight to its final name: a run stopped (or killed) mid-write left a
    spectrum_heads.csv cut short after its first head, which reads as a result. Each file is written whole or not at
    all now (`write_csv_atomic`): the earlier run's file stays as it was, and no temporary file is left."""
    layers, heads, rank = 2, 4, 16
    curves = torch.linspace(0.1, 1.0, rank).expand(layers, heads, rank).contiguous()
    fields = dict(num_inputs=4, seq_len=rank, model_name="x", offset_mass=torch.full((layers, heads, 5), 0.1))
    fields["special_mass"] = torch.full((layers, heads), 0.2)
    out = str(tmp_path / "out")
    paths = write_csv(Spectrum(curves=curves, **fields), 4, out)
    earlier = {name: (tmp_path / "out" / name).read_text() for name in os.listdir(out)}
    with open(paths["heads"], newline="") as handle:
        assert len(list(csv.DictReader(handle))) == layers * heads
    with pytest.raises(KeyboardInterrupt):
        write_csv(StoppedWhileWritingHeads(curves=curves * 0.5, **fields), 4, out)
    assert sorted(os.listdir(out)) == sorted(earlier)  # no temporary file beside them
    assert (tmp_path / "out" / "spectrum_heads.csv").read_text() == earlier["spectrum_heads.csv"]


def test_spectrum_index_default_is_a_quarter_of_r():
    spectrum = Spectrum(curves=torch.ones(1, 1, 512), num_inputs=1, seq_len=512, model_name="x")
    with pytest.raises(ValueError, match="e.g. 128"):
        spectrum.at_index(600)


# --- BERT-layout encoders (MiniLM, BERT) and the structure of P -------------------------------------------------

WORDS = "the a film was good bad long short story actor plot scene music end start very not and but".split()


def tiny_bert_folder(directory, max_positions: int = 24):
    """A random 2-layer BERT with a WordPiece tokenizer, saved as a folder (the layout of MiniLM and bert-base).

    Layer 1, head 2 has zero query weights and bias: its scores are all 0, so its P is uniform, exactly rank one.
    The other queries are scaled up so that the other heads' attention is sharp, far from rank one.
    """
    os.makedirs(directory, exist_ok=True)
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tokenizer = transformers.BertTokenizer(vocab=vocab, model_max_length=max_positions)
    config = transformers.BertConfig(
        vocab_size=len(WORDS) + 5,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=max_positions,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertModel(config)
    randomize_all(model)
    head_size = config.hidden_size // config.num_attention_heads
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.self.query.weight.mul_(8)
        query = model.encoder.layer[0].attention.self.query
        query.weight[head_size : 2 * head_size] = 0
        query.bias[head_size : 2 * head_size] = 0
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def long_documents(path, lengths=(40, 10, 30, 50)):
    """A csv of reviews with the given numbers of words (one token each in the tiny vocabulary)."""
    generator = torch.Generator().manual_seed(0)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for length in lengths:
            picks = torch.randint(len(WORDS), (length,), generator=generator).tolist()
            writer.writerow([" ".join(WORDS[i] for i in picks), 0])
    return str(path)


def test_attention_structure_of_known_matrices():
    length = 8
    identity = torch.eye(length)
    previous_token = torch.diag(torch.ones(length - 1), -1)  # row i attends to i - 1 (row 0 to nothing)
    uniform = torch.full((length, length), 1 / length)
    attention = torch.stack([identity, previous_token, uniform])[None]  # (batch 1, heads 3, L, L)
    special = torch.zeros(1, length, dtype=torch.bool)
    special[0, [0, -1]] = True
    offsets, special_mass = attention_structure(attention, special, width=2)
    torch.testing.assert_close(offsets[0, 0], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(offsets[0, 1], torch.tensor([0.0, (length - 1) / length, 0.0, 0.0, 0.0]))
    expected = torch.tensor([length - abs(d) for d in range(-2, 3)]) / length**2
    torch.testing.assert_close(offsets[0, 2], expected)
    torch.testing.assert_close(special_mass[0], torch.tensor([2 / length, 1 / length, 2 / length]))
    # a local head is full rank: the identity's mass at r / 4 is 1 / 4, the uniform head's is already 1 at index 1
    assert cumulative_spectrum(identity)[length // 4 - 1].item() == pytest.approx(0.25)
    assert cumulative_spectrum(uniform)[0].item() == pytest.approx(1.0)


def test_windows_from_a_bert_tokenizer(tmp_path):
    directory = tiny_bert_folder(tmp_path / "bert")
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    texts = read_texts(long_documents(tmp_path / "reviews.csv"))
    ids = document_windows(tokenizer, texts, seq_len=24, max_inputs=5)
    # documents of 40, 30 and 50 words are long enough for 22 + [CLS] [SEP]; the 10-word one is skipped
    assert ids.shape == (3, 24)
    assert torch.all(ids[:, 0] == tokenizer.cls_token_id) and torch.all(ids[:, -1] == tokenizer.sep_token_id)
    assert ids[1, 1:-1].tolist() == tokenizer(texts[2], add_special_tokens=False, verbose=False)["input_ids"][:22]
    assert not torch.any(torch.isin(ids[:, 1:-1], torch.tensor(tokenizer.all_special_ids)))
    with pytest.raises(ValueError, match="the longest has 50"):
        document_windows(tokenizer, texts, seq_len=60, max_inputs=5)
    packed = pack_inputs(tokenizer, texts, seq_len=24, max_inputs=4)
    assert packed.shape == (4, 24) and torch.all(packed[:, 0] == tokenizer.cls_token_id)
    assert torch.all(packed[:, -1] == tokenizer.sep_token_id)


def test_bert_folder_spectrum_finds_the_rank_one_head(tmp_path):
    directory = tiny_bert_folder(tmp_path / "bert")
    reviews = long_documents(tmp_path / "reviews.csv")
    out = tmp_path / "out"
    # seq_len 24 = BERT's max_position_embeddings: BERT numbers positions from 0, so all 24 are usable
    analyze_spectrum.main([str(directory), reviews, str(out), "--windows", "documents", "--max_inputs", "3"])
    summary = json.loads((out / "spectrum_summary.json").read_text())
    assert summary["seq_len"] == 24 and summary["num_inputs"] == 3 and summary["windows"] == "documents"
    assert summary["index"] == 6 and set(summary["mean_at_report_indices_per_layer"]) == {"3", "6", "12"}

    curves = {}
    with open(out / "spectrum_curves.csv") as handle:
        for row in csv.DictReader(handle):
            curves.setdefault((int(row["layer"]), int(row["head"])), []).append(
                float(row["cumulative_normalised_singular_value"])
            )
    for curve in curves.values():
        assert len(curve) == 24 and all(b >= a - 1e-6 for a, b in zip(curve, curve[1:]))
        assert curve[-1] == pytest.approx(1.0, abs=1e-6)
    # the uniform head (layer 0, head 1) is rank one: all its mass at index 1. The layer's sharp heads are not.
    assert curves[(0, 1)][0] == pytest.approx(1.0, abs=1e-6)
    assert all(curves[(0, head)][0] < 0.95 for head in (0, 2, 3))

    with open(out / "spectrum_heads.csv") as handle:
        heads = {(int(r["layer"]), int(r["head"])): r for r in csv.DictReader(handle)}
    uniform = heads[(0, 1)]
    assert float(uniform["cumulative_at_3"]) == pytest.approx(1.0, abs=1e-6)
    expected_local = sum(24 - abs(d) for d in range(-2, 3)) / 24**2
    assert float(uniform["local_mass_within_2"]) == pytest.approx(expected_local, abs=1e-5)
    assert float(uniform["special_token_mass"]) == pytest.approx(2 / 24, abs=1e-5)  # [CLS] and [SEP] of each window
    for image in ("spectrum_heatmap.png", "spectrum_curves_per_head.png", "spectrum_structure.png"):
        assert (out / image).read_bytes()[:4] == b"\x89PNG"


def test_converted_linformer_at_k_equal_n_has_the_teachers_spectrum(tmp_path):
    from experiments.spectrum import load_encoder
    from linformer_hf.conversion import convert_checkpoint

    directory = tiny_bert_folder(tmp_path / "bert")
    convert_checkpoint(str(directory), str(tmp_path / "linformer"), projected_length=24)
    bert, tokenizer = load_encoder(str(directory))
    linformer, _ = load_encoder(str(tmp_path / "linformer"))
    ids = document_windows(tokenizer, read_texts(long_documents(tmp_path / "reviews.csv")), 24, 3)
    teacher = compute_spectrum(bert, ids, special_token_ids=tokenizer.all_special_ids)
    student = compute_spectrum(linformer, ids, special_token_ids=tokenizer.all_special_ids)
    torch.testing.assert_close(student.curves, teacher.curves, atol=1e-5, rtol=0)
    torch.testing.assert_close(student.offset_mass, teacher.offset_mass, atol=1e-5, rtol=0)
    torch.testing.assert_close(student.special_mass, teacher.special_mass, atol=1e-5, rtol=0)
