"""The transformers contract: Auto classes, save/load, remote code, tied and shared weights, checkpointing,
pipelines, Trainer, dtypes and torch.compile."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from conftest import (
    CHECKPOINTING_METHODS,
    SHARED_DATA,
    enable_checkpointing,
    random_batch,
    randomize_projections,
    tiny_config,
)
from packaging.version import Version
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    RobertaTokenizer,
    Trainer,
    TrainingArguments,
    pipeline,
)

import linformer_hf
from linformer_hf import (
    LinformerConfig,
    LinformerForMaskedLM,
    LinformerForMultipleChoice,
    LinformerForSequenceClassification,
    LinformerModel,
)

HEADS = {name: (getattr(transformers, name), model_class) for name, model_class in linformer_hf.LINFORMER_HEADS.items()}


def example_inputs(model_class, batch_size=2, seq_len=12):
    ids = random_batch(batch_size, seq_len)
    mask = torch.ones_like(ids)
    mask[-1, seq_len // 2 :] = 0
    if model_class is LinformerForMultipleChoice:  # (batch, choices, seq)
        return {"input_ids": ids[:, None].repeat(1, 3, 1), "attention_mask": mask[:, None].repeat(1, 3, 1)}
    return {"input_ids": ids, "attention_mask": mask}


def first_output(outputs):
    return outputs.logits if hasattr(outputs, "logits") and outputs.logits is not None else outputs[0]


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE tokenizer trained offline on real text (WikiText-2), as RoBERTa's."""
    with open(os.path.join(SHARED_DATA, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()][:3000]
    return RobertaTokenizer().train_new_from_iterator(lines, vocab_size=400)


def config_for(tokenizer, **overrides):
    ids = dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    ids.update(overrides)
    return tiny_config(**ids)


def test_import_registers_every_auto_class():
    config = tiny_config()
    for auto_name, (auto_class, model_class) in HEADS.items():
        assert type(auto_class.from_config(config)) is model_class, auto_name
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

    assert TOKENIZER_MAPPING[LinformerConfig] in (RobertaTokenizer, (RobertaTokenizer, None), (None, RobertaTokenizer))


@pytest.mark.parametrize("auto_name", list(HEADS))
def test_save_and_load_round_trip_for_every_head(auto_name, tmp_path):
    auto_class, model_class = HEADS[auto_name]
    model = model_class(tiny_config(sharing="key_value")).eval()
    randomize_projections(model)
    inputs = example_inputs(model_class)
    expected = first_output(model(**inputs))
    model.save_pretrained(tmp_path)

    assert (tmp_path / "model.safetensors").exists()
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"] == linformer_hf.models.modeling_linformer.auto_map()
    assert (tmp_path / "modeling_linformer.py").exists() and (tmp_path / "configuration_linformer.py").exists()

    loaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(loaded) is model_class
    for name, tensor in model.state_dict().items():  # the weights are exact...
        assert torch.equal(loaded.state_dict()[name], tensor), name
    # ...the outputs need not be bit-identical: CPU BLAS kernels may differ with memory alignment (seen: 2e-9).
    torch.testing.assert_close(first_output(loaded(**inputs)), expected, rtol=0, atol=1e-6)


def test_remote_code_loads_every_head_in_a_process_that_never_imports_the_package(tmp_path):
    """What a Hub user gets: `trust_remote_code=True` on a folder, no linformer_hf installed or imported."""
    references = {}
    for auto_name, (_, model_class) in HEADS.items():
        model = model_class(tiny_config(sharing="layerwise", projection="conv")).eval()
        randomize_projections(model)
        model.save_pretrained(tmp_path / auto_name)
        inputs = example_inputs(model_class)
        references[auto_name] = (inputs, first_output(model(**inputs)).detach())
    torch.save(references, tmp_path / "references.pt")

    script = textwrap.dedent(
        f"""
        import sys, torch, transformers
        references = torch.load({str(tmp_path / "references.pt")!r})
        for auto_name, (inputs, expected) in references.items():
            auto_class = getattr(transformers, auto_name)
            model = auto_class.from_pretrained({str(tmp_path)!r} + "/" + auto_name, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            out = model(**inputs)
            got = out.logits if getattr(out, "logits", None) is not None else out[0]
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)  # another process: thread-order rounding
            model.set_attn_implementation("eager")  # the copied module uses the attention interface too
            assert model.config._attn_implementation == "eager"
            out = model(**inputs)
            got = out.logits if getattr(out, "logits", None) is not None else out[0]
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            print("loaded", auto_name, type(model).__name__)
        assert not any(m.startswith("linformer_hf") for m in sys.modules), "the package was imported"
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("loaded") == len(HEADS)


def pretraining_families():
    """Each family's masked LM and a tiny model of it, with E, F (Linformer) away from their initial values."""
    from test_performer import tiny_performer

    from linformer_hf import PerformerForMaskedLM

    def linformer():
        model = LinformerForMaskedLM(tiny_config(sharing="layerwise", projection="conv")).eval()
        randomize_projections(model)
        return model

    return [
        pytest.param(linformer, id="linformer"),
        pytest.param(lambda: PerformerForMaskedLM(tiny_performer()).eval(), id="performer"),
    ]


@pytest.mark.parametrize("make_model", pretraining_families())
def test_pretraining_auto_class_gives_the_masked_lm_as_for_roberta(make_model, tmp_path):
    """transformers maps RoBERTa's AutoModelForPreTraining to its masked LM (`MODEL_FOR_PRETRAINING_MAPPING`); so does
    the registration, also for a folder saved before (no AutoModelForPreTraining in its `auto_map`). The masked LM's
    own Auto class stays AutoModelForMaskedLM: the one transformers records for it, the model card's and fill-mask's."""
    from linformer_hf.hub import AUTO_CLASS_OF, PIPELINE_TAGS

    model = make_model()
    masked_lm = type(model)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"]["AutoModelForPreTraining"] == saved["auto_map"]["AutoModelForMaskedLM"]
    inputs = example_inputs(masked_lm)
    expected = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()(**inputs).logits

    loaded = transformers.AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    assert type(loaded) is masked_lm
    torch.testing.assert_close(loaded(**inputs).logits, expected, rtol=0, atol=1e-6)
    assert type(transformers.AutoModelForPreTraining.from_config(model.config)) is masked_lm

    del saved["auto_map"]["AutoModelForPreTraining"]  # as saved before AutoModelForPreTraining was registered
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = transformers.AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    assert type(loaded) is masked_lm
    torch.testing.assert_close(loaded(**inputs).logits, expected, rtol=0, atol=1e-6)

    assert masked_lm._auto_class == "AutoModelForMaskedLM"
    assert AUTO_CLASS_OF[masked_lm.__name__] == "AutoModelForMaskedLM"
    assert PIPELINE_TAGS[masked_lm.__name__] == "fill-mask"


@pytest.mark.parametrize("make_model", pretraining_families())
def test_remote_code_pretraining_auto_class_gives_the_masked_lm(make_model, tmp_path):
    """`AutoModelForPreTraining` with `trust_remote_code=True` on a saved folder, the package never imported."""
    model = make_model()
    model.save_pretrained(tmp_path / "model")
    torch.save(example_inputs(type(model)), tmp_path / "inputs.pt")
    script = textwrap.dedent(
        f"""
        import sys, torch, transformers
        folder, inputs = {str(tmp_path / "model")!r}, torch.load({str(tmp_path / "inputs.pt")!r})
        masked_lm = transformers.AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
        loaded = transformers.AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True).eval()
        assert type(loaded).__module__.startswith("transformers_modules"), type(loaded).__module__
        assert type(loaded).__name__ == {type(model).__name__!r}, type(loaded).__name__
        torch.testing.assert_close(loaded(**inputs).logits, masked_lm(**inputs).logits, rtol=0, atol=1e-6)
        assert not any(m.startswith("linformer_hf") for m in sys.modules), "the package was imported"
        print("loaded")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "loaded"


def test_lm_head_is_tied_through_save_load_and_resize(tmp_path):
    model = LinformerForMaskedLM(tiny_config())
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert loaded.lm_head.decoder.weight is loaded.roberta.embeddings.word_embeddings.weight
    loaded.resize_token_embeddings(120)
    assert loaded.lm_head.decoder.weight is loaded.roberta.embeddings.word_embeddings.weight
    assert loaded.lm_head.decoder.weight.shape == (120, 32)
    assert loaded(random_batch(1, 5, vocab_size=120)).logits.shape == (1, 5, 120)
    # Training the embedding moves the output layer too
    with torch.no_grad():
        loaded.roberta.embeddings.word_embeddings.weight[7] += 1.0
    torch.testing.assert_close(loaded.lm_head.decoder.weight[7], loaded.roberta.embeddings.word_embeddings.weight[7])


@pytest.mark.parametrize("sharing", ["layerwise", "key_value"])
def test_shared_projections_survive_save_load_and_stay_shared(sharing, tmp_path):
    model = LinformerModel(tiny_config(sharing=sharing)).eval()
    randomize_projections(model)
    projection_keys = [key for key in model.state_dict() if "projection" in key]
    expected_count = 1 if sharing == "layerwise" else model.config.num_hidden_layers
    assert len(projection_keys) == expected_count  # one tensor per sharing group, not per use
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    ids = random_batch(2, 10)
    torch.testing.assert_close(loaded(ids).last_hidden_state, model(ids).last_hidden_state, rtol=0, atol=0)

    # Still one parameter: changing it changes every layer's keys and values.
    layer0 = loaded.encoder.layer[0].attention.self
    key_projection, value_projection = layer0.projections(loaded.encoder.shared_projection)
    assert key_projection is value_projection
    if sharing == "layerwise":
        for layer in loaded.encoder.layer:
            assert layer.attention.self.projections(loaded.encoder.shared_projection)[0] is key_projection


def test_frozen_projections_do_not_train_but_are_saved(tmp_path):
    model = LinformerForMaskedLM(tiny_config(freeze_projections=True))
    frozen = {name: t.clone() for name, t in model.state_dict().items() if "projection" in name}
    assert len(frozen) == 2 * model.config.num_hidden_layers  # E and F of every layer, in the state dict
    assert not any("projection" in name for name, _ in model.named_parameters())  # nothing an optimizer can see
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = random_batch(2, 12)
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert not any("projection" in name for name, _ in loaded.named_parameters())
    for trained in (model, loaded):
        state = trained.state_dict()
        for name, value in frozen.items():
            torch.testing.assert_close(state[name], value, rtol=0, atol=0)


@pytest.mark.parametrize("use_reentrant, every_n_layers", [(False, 1), (True, 1), (True, 2)])
@pytest.mark.parametrize("method", CHECKPOINTING_METHODS)
@pytest.mark.parametrize(
    "sharing, projection",
    [
        ("none", "linear"),
        ("headwise", "linear"),
        ("key_value", "linear"),
        ("layerwise", "linear"),
        ("layerwise", "mean"),
    ],
)
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(
    sharing, projection, method, use_reentrant, every_n_layers
):
    """Reentrant too (DeepSpeed's kind), and with some layers checkpointed and others not. Before: the per-forward
    compression inputs made once for all layers carried their graph into every checkpointed layer, and a reentrant
    backward failed with "backward through the graph a second time" for every sharing but "none"."""
    model = LinformerForMaskedLM(tiny_config(sharing=sharing, projection=projection)).train()  # dropout 0
    randomize_projections(model)  # dense E, F: every slot reached, every entry with a gradient
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0

    def loss_and_grads():
        model.zero_grad()
        loss = model(ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads()
    checkpointed_calls = enable_checkpointing(model, method, use_reentrant, every_n_layers)
    loss_ckpt, grads_ckpt = loss_and_grads()
    # every layer ran checkpointed, or layers 0 and 2 of 3
    assert len(checkpointed_calls) == len(range(0, model.config.num_hidden_layers, every_n_layers))
    torch.testing.assert_close(loss_ckpt, loss)
    assert grads_ckpt.keys() == grads.keys() == {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("projection" in name for name in grads) == (projection == "linear")
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], msg=name)


def test_return_dict_false_and_hidden_states():
    model = LinformerForSequenceClassification(tiny_config(num_labels=3)).eval()
    ids = random_batch(2, 9)
    labels = torch.tensor([0, 2])
    as_dict = model(ids, labels=labels, output_hidden_states=True, output_attentions=True)
    as_tuple = model(ids, labels=labels, output_hidden_states=True, output_attentions=True, return_dict=False)
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], as_dict.loss)
    torch.testing.assert_close(as_tuple[1], as_dict.logits)
    assert len(as_dict.hidden_states) == model.config.num_hidden_layers + 1
    torch.testing.assert_close(as_tuple[2][-1], as_dict.hidden_states[-1])
    assert as_dict.attentions[0].shape == (2, 4, 9, 8)  # (batch, heads, seq, k)


def test_cross_attention_inputs_are_refused():
    model = LinformerModel(tiny_config())
    with pytest.raises(ValueError, match="encoder only"):
        model(random_batch(1, 5), encoder_hidden_states=torch.randn(1, 5, 32))


def test_fill_mask_and_text_classification_pipelines(tokenizer, tmp_path):
    model = LinformerForMaskedLM(config_for(tokenizer, max_sequence_length=64, projected_length=16))
    model.save_pretrained(tmp_path / "mlm")
    tokenizer.save_pretrained(tmp_path / "mlm")
    fill = pipeline("fill-mask", model=str(tmp_path / "mlm"), device="cpu")
    predictions = fill(f"The team won the {tokenizer.mask_token} in 1998.", top_k=3)
    assert len(predictions) == 3 and all(p["token"] < len(tokenizer) for p in predictions)
    scores = [p["score"] for p in predictions]
    assert scores == sorted(scores, reverse=True)

    classifier_model = LinformerForSequenceClassification(
        config_for(tokenizer, max_sequence_length=64, projected_length=16, num_labels=2)
    )
    classify = pipeline("text-classification", model=classifier_model, tokenizer=tokenizer, device="cpu")
    long_and_short = ["A fine film.", "It was long and dull and nothing happened for two hours at all, sadly."]
    results = classify(long_and_short, batch_size=2)  # padded batch
    singles = [classify(text)[0] for text in long_and_short]
    for batched, single in zip(results, singles, strict=True):
        assert batched["label"] == single["label"]
        assert batched["score"] == pytest.approx(single["score"], abs=1e-5)


def test_auto_tokenizer_loads_from_a_linformer_model_folder(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    LinformerForMaskedLM(config_for(tokenizer)).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    # Through 5.5 (5.9 no longer), transformers gives a model type it does not know itself the generic
    # TokenizersBackend of tokenizer.json, whatever was registered: the same tokenizer, under another class.
    assert isinstance(loaded, RobertaTokenizer) or Version(transformers.__version__) < Version("5.9")
    text = ["A Linformer reads the same tokens.", "Short"]
    assert loaded(text).input_ids == tokenizer(text).input_ids


def _train_one_step(model, dataset, collator, per_device_batch, accumulation, tmp_path):
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=per_device_batch,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        seed=0,
        data_seed=0,
        dataloader_drop_last=True,
        save_strategy="no",
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.train()
    logs = next(entry for entry in trainer.state.log_history if "loss" in entry)
    return logs["loss"], logs["grad_norm"]


class _ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def test_trainer_gradient_accumulation_matches_the_larger_batch_for_mlm(tokenizer, tmp_path):
    """MLM micro-batches hold different numbers of masked tokens: the loss must be normalised over the whole
    accumulated batch (num_items_in_batch), not averaged per micro-batch."""
    texts = [line for line in open(os.path.join(SHARED_DATA, "wikitext-2", "valid.txt")) if len(line) > 80][:8]
    rows = [tokenizer(text, truncation=True, max_length=32) for text in texts]
    # Labels fixed once (no random masking) so both runs see the same targets; uneven counts per micro-batch.
    dataset = []
    for i, row in enumerate(rows):
        labels = [-100] * len(row["input_ids"])
        for position in range(1, 2 + 3 * (i % 4)):
            labels[position] = row["input_ids"][position]
        dataset.append(dict(row, labels=labels))
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)  # pads; we override its labels below

    def collate(features):
        batch = collator([{k: v for k, v in f.items() if k != "labels"} for f in features])
        width = batch["input_ids"].shape[1]
        batch["labels"] = torch.tensor([f["labels"] + [-100] * (width - len(f["labels"])) for f in features])
        return batch

    config = config_for(tokenizer, max_sequence_length=32, projected_length=8)
    results = []
    for batch_size, accumulation in [(8, 1), (4, 2), (2, 4)]:
        torch.manual_seed(0)
        model = LinformerForMaskedLM(config)
        results.append(_train_one_step(model, _ListDataset(dataset), collate, batch_size, accumulation, tmp_path))
    (loss, grad_norm), *accumulated = results
    for acc_loss, acc_grad_norm in accumulated:
        assert acc_loss == pytest.approx(loss, rel=1e-4)
        assert acc_grad_norm == pytest.approx(grad_norm, rel=1e-4)


def test_trainer_gradient_accumulation_matches_the_larger_batch_for_classification(tmp_path):
    ids = random_batch(8, 10)
    dataset = [
        {"input_ids": ids[i], "attention_mask": torch.ones(10, dtype=torch.long), "labels": i % 2} for i in range(8)
    ]
    results = []
    for batch_size, accumulation in [(8, 1), (2, 4)]:
        torch.manual_seed(0)
        model = LinformerForSequenceClassification(tiny_config(num_labels=2))
        results.append(_train_one_step(model, _ListDataset(dataset), None, batch_size, accumulation, tmp_path))
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-4)
    assert results[1][1] == pytest.approx(results[0][1], rel=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights(dtype, tmp_path):
    model = LinformerForMaskedLM(tiny_config(projection="max")).eval()
    model.save_pretrained(tmp_path)
    half = AutoModelForMaskedLM.from_pretrained(tmp_path, dtype=dtype).eval()
    assert all(p.dtype == dtype for p in half.parameters())
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    logits = half(ids, attention_mask=mask).logits
    assert logits.dtype == dtype and torch.isfinite(logits).all()
    expected = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(logits.float(), expected, rtol=0.05, atol=0.05)


def _padded_batch():
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return ids, mask


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an accelerator beside the CPU")
@pytest.mark.parametrize("sharing", ["headwise", "layerwise"])
def test_layers_placed_on_different_devices_give_the_same_outputs(sharing):
    """A device map over several accelerators (`device_map="auto"`) puts layers on different devices, and accelerate's
    hooks move each layer's inputs to its own: the encoder must not stack the E, F and biases of all layers at once."""
    hooks = pytest.importorskip("accelerate.hooks")
    model = LinformerModel(tiny_config(sharing=sharing)).eval()
    randomize_projections(model)
    ids, mask = _padded_batch()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        model.to("cuda")
        hooks.add_hook_to_module(model.encoder.layer[1].to("cpu"), hooks.AlignDevicesHook("cpu", io_same_device=True))
        placed = model(ids.cuda(), attention_mask=mask.cuda()).last_hidden_state
    torch.testing.assert_close(placed.cpu(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sharing", ["headwise", "layerwise", "none"])
def test_a_device_map_that_offloads_layers_is_an_error_naming_the_fix(sharing, tmp_path):
    """accelerate's offloading hooks bring a weight in only when its own module runs; a Linformer layer reads E, F and
    the key/value biases as tensors. Said before any work, instead of an error about the meta device from inside (or,
    with sharing="none", outputs computed with a slot mask made from the meta device's E)."""
    pytest.importorskip("accelerate")
    LinformerModel(tiny_config(sharing=sharing)).save_pretrained(tmp_path / "model")
    device_map = {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "encoder.layer.2": "cpu"}
    device_map.update({"pooler": "cpu", **({"encoder.shared_projection": "cpu"} if sharing == "layerwise" else {})})
    offloaded = LinformerModel.from_pretrained(
        tmp_path / "model", device_map=device_map, offload_folder=str(tmp_path / "offload")
    )
    assert offloaded.encoder.layer[1].attention.self.key.weight.device.type == "meta"  # offloaded, as meant
    ids, mask = _padded_batch()
    with pytest.raises(
        ValueError,
        match=r"Linformer's layer 1 hold weights on the meta device: offloaded by a device_map.*Give every layer",
    ):
        offloaded(ids, attention_mask=mask)


def test_a_device_map_that_offloads_layers_of_max_pooling_gives_the_same_outputs(tmp_path):
    """Max pooling reads no weight outside a module's forward: offloaded layers work, and are not refused."""
    pytest.importorskip("accelerate")
    model = LinformerModel(tiny_config(projection="max")).eval()
    model.save_pretrained(tmp_path / "model")
    device_map = {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "encoder.layer.2": "cpu"}
    offloaded = LinformerModel.from_pretrained(
        tmp_path / "model", device_map={**device_map, "pooler": "cpu"}, offload_folder=str(tmp_path / "offload")
    )
    ids, mask = _padded_batch()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(offloaded(ids, attention_mask=mask).last_hidden_state, expected)


def test_torch_compile_gives_the_same_outputs():
    model = LinformerForSequenceClassification(tiny_config(num_labels=2)).eval()
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    expected = model(ids, attention_mask=mask).logits
    compiled = torch.compile(model)
    torch.testing.assert_close(compiled(ids, attention_mask=mask).logits, expected, rtol=1e-4, atol=1e-5)


def test_logits_for_labels_only_gives_the_same_loss_gradients_and_logits():
    model = LinformerForMaskedLM(tiny_config()).train()
    ids = random_batch(3, 12)
    mask = torch.ones_like(ids)
    mask[2, 5:] = 0
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, [1, 7, 8]], labels[2, 4] = 5, torch.tensor([6, 7, 8]), 9

    def run(**kwargs):
        model.zero_grad()
        out = model(ids, attention_mask=mask, labels=labels, **kwargs)
        out.loss.backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    full, full_grads = run()
    sparse, sparse_grads = run(logits_for_labels_only=True)
    torch.testing.assert_close(sparse.loss, full.loss)
    torch.testing.assert_close(sparse.logits, full.logits[labels != -100])
    assert sparse.logits.shape == (5, model.config.vocab_size)
    for name in full_grads:
        torch.testing.assert_close(sparse_grads[name], full_grads[name], msg=name)
    with pytest.raises(ValueError, match="needs `labels`"):
        model(ids, logits_for_labels_only=True)


@pytest.mark.parametrize("projection", ["linear", "conv"])
def test_projection_init_starts_new_projections_and_never_overwrites_loaded_ones(projection, tmp_path):
    from linformer_hf.models.modeling_linformer import LinformerProjection, neighbour_average_projection

    config = tiny_config(projection=projection, projection_init="neighbour_average")
    model = LinformerModel(config)
    projections = [m for m in model.modules() if isinstance(m, LinformerProjection)]
    expected = neighbour_average_projection(16, 8) if projection == "linear" else torch.full((2,), 0.5)
    assert projections and all(torch.equal(p.weight, expected.expand_as(p.weight)) for p in projections)

    randomize_projections(model)  # "trained"
    trained = {k: v.clone() for k, v in model.state_dict().items() if "projection" in k}
    model.save_pretrained(tmp_path)
    loaded = LinformerModel.from_pretrained(tmp_path)
    assert loaded.config.projection_init == "neighbour_average"
    for key, value in trained.items():
        assert torch.equal(loaded.state_dict()[key], value), key


def _save_then_edit_config(tmp_path, saved, edited):
    model = LinformerForMaskedLM(tiny_config(**saved))
    randomize_projections(model)
    model.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    config.update(edited)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    "saved,edited,named",
    [
        (dict(sharing="headwise"), dict(sharing="key_value"), "key_projection.weight"),
        (dict(sharing="layerwise"), dict(sharing="none"), "shared_projection.weight"),
        (dict(projection="linear"), dict(projection="max"), "value_projection.weight"),
    ],
)
@pytest.mark.parametrize("auto_class", [AutoModel, AutoModelForMaskedLM])
def test_a_config_edited_after_saving_is_an_error_naming_the_projection_weights(
    saved, edited, named, auto_class, tmp_path
):
    """The trained E, F of the checkpoint cannot go into the model the edited config describes: refuse to load."""
    _save_then_edit_config(tmp_path, saved, edited)
    with pytest.raises(ValueError, match=rf"do not fit its config.*{named}.*edited in config.json, or passed"):
        auto_class.from_pretrained(tmp_path)


def test_a_checkpoint_without_projection_weights_warns_that_e_and_f_start_untrained(tmp_path, caplog):
    """No projection weights at all: a RoBERTa checkpoint (fine) or a pooling Linformer whose config was edited to
    learned projections (not fine); the two cannot be told apart from the weights, so it loads and says so loudly."""
    from transformers.utils import logging as transformers_logging

    _save_then_edit_config(tmp_path, dict(projection="mean"), dict(projection="linear"))
    transformers_logging.enable_propagation()
    try:
        model = AutoModelForMaskedLM.from_pretrained(tmp_path)
    finally:
        transformers_logging.disable_propagation()
    assert model.config.projection == "linear"
    assert "has no projection weights" in caplog.text and "key_projection.weight" in caplog.text
    assert "start from projection_init='random', untrained" in caplog.text

    caplog.clear()
    model.save_pretrained(tmp_path / "resaved")
    transformers_logging.enable_propagation()
    try:
        AutoModelForMaskedLM.from_pretrained(tmp_path / "resaved")  # a consistent checkpoint: no warning
    finally:
        transformers_logging.disable_propagation()
    assert "LOAD REPORT" not in caplog.text and "projection" not in caplog.text


@pytest.mark.parametrize("family", ["linformer", "performer"])
@pytest.mark.parametrize("argument", ["input_ids", "inputs_embeds"])
def test_an_unbatched_input_is_an_error_naming_the_shape_and_the_fix(family, argument):
    if family == "linformer":
        model = LinformerModel(tiny_config()).eval()
    else:
        config = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
        model = linformer_hf.PerformerModel(linformer_hf.PerformerConfig(num_random_features=16, **config)).eval()
    ids = random_batch(1, 10)
    inputs = {"input_ids": ids[0]} if argument == "input_ids" else {"inputs_embeds": torch.randn(10, 32)}
    with pytest.raises(ValueError, match=rf"{argument} must be of shape .*got \(10,( 32)?\).*\[None\]"):
        model(**inputs)
    model(**({"input_ids": ids} if argument == "input_ids" else {"inputs_embeds": torch.randn(1, 10, 32)}))  # batched
