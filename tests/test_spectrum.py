"""Spectrum analysis of P (the paper's Figure 1): exact on known matrices, consistent shapes, files written."""

import csv
import json
import os
import sys

import pytest
import torch
import transformers
from tiny_roberta import build_tokenizer, randomize_all, tiny_roberta_config

from linformer_hf import LinformerConfig, LinformerModel
from linformer_hf.research.spectrum import Spectrum, compute_spectrum, cumulative_spectrum, pack_inputs, read_texts

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import analyze_spectrum  # noqa: E402

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


def test_spectrum_index_default_is_a_quarter_of_r():
    spectrum = Spectrum(curves=torch.ones(1, 1, 512), num_inputs=1, seq_len=512, model_name="x")
    with pytest.raises(ValueError, match="e.g. 128"):
        spectrum.at_index(600)
