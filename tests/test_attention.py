"""Properties of Linformer's attention: exact padding, reduction to RoBERTa, eager == SDPA, fast == plain path."""

import itertools

import pytest
import torch
from conftest import random_batch, randomize_projections, tiny_config
from transformers import AttentionInterface, RobertaConfig, RobertaModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.utils import logging as transformers_logging

from linformer_hf import PROJECTION_KINDS, SHARING_MODES, LinformerModel
from linformer_hf.models import modeling_linformer

ALL_VARIANTS = list(itertools.product(SHARING_MODES, PROJECTION_KINDS))
# RoBERTa's own settings, to build the RoBERTa a Linformer reduces to (from its config's dict, on every release).
ROBERTA_FIELDS = set(RobertaConfig().to_dict()) - {"model_type", "transformers_version", "architectures"}


def build(sharing="headwise", projection="linear", seed=0, **overrides):
    model = LinformerModel(tiny_config(sharing=sharing, projection=projection, **overrides)).eval()
    randomize_projections(model, seed)
    return model


def identity_projections(model):
    """E = F = I (k = n): a Linformer that must compute exactly what RoBERTa computes."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "projection" in name:
                if param.dim() == 3:  # linear E: (heads, k, n) with k = n
                    param.copy_(torch.eye(param.shape[-1]).expand_as(param))
                else:  # conv kernel of width n / k = 1
                    param.fill_(1.0)


@pytest.mark.parametrize("sharing,projection", ALL_VARIANTS)
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_outputs_at_real_positions_do_not_depend_on_right_padding(sharing, projection, attn_implementation):
    model = build(sharing, projection, attn_implementation=attn_implementation)
    n = model.config.max_sequence_length
    lengths = [9, 4]
    reference = []
    for i, length in enumerate(lengths):
        ids = random_batch(1, length, seed=i)
        out = model(ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
        reference.append(out.hidden_states)

    # The same sequences right-padded to n in one batch; the padded slots hold random real-looking tokens, so only
    # the attention mask can keep them out.
    ids = random_batch(len(lengths), n, seed=99)
    mask = torch.zeros_like(ids)
    for i, length in enumerate(lengths):
        ids[i, :length] = random_batch(1, length, seed=i)[0]
        mask[i, :length] = 1
    padded = model(ids, attention_mask=mask, output_hidden_states=True).hidden_states

    assert len(padded) == model.config.num_hidden_layers + 1
    for layer, states in enumerate(padded):
        for i, length in enumerate(lengths):
            torch.testing.assert_close(
                states[i, :length], reference[i][layer][0], rtol=1e-5, atol=1e-5, msg=f"layer {layer}, row {i}"
            )


def test_padding_invariance_is_not_vacuous():
    """Without the attention mask the padded tokens do leak into real positions (so the test above can fail)."""
    model = build()
    ids = random_batch(1, 16)
    short = model(ids[:, :9]).last_hidden_state
    unmasked = model(ids).last_hidden_state[:, :9]
    assert not torch.allclose(short, unmasked, atol=1e-3)


@pytest.mark.parametrize("sharing,projection", ALL_VARIANTS)
@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_identity_projections_reduce_to_roberta(sharing, projection, attn_implementation):
    config = tiny_config(
        sharing=sharing, projection=projection, projected_length=16, attn_implementation=attn_implementation
    )
    linformer = LinformerModel(config).eval()
    identity_projections(linformer)

    roberta_fields = {k: v for k, v in config.to_dict().items() if k in ROBERTA_FIELDS}
    roberta = RobertaModel(RobertaConfig(**roberta_fields, attn_implementation=attn_implementation)).eval()
    missing, unexpected = roberta.load_state_dict(linformer.state_dict(), strict=False)
    assert missing == []
    assert all("projection" in key for key in unexpected)  # pooling has no parameters at all

    # Rows of full length, shorter, and much shorter than n, right-padded.
    ids = random_batch(3, 16, seed=1)
    mask = torch.ones_like(ids)
    for row, length in [(1, 11), (2, 5)]:
        ids[row, length:] = config.pad_token_id
        mask[row, length:] = 0
    expected = roberta(ids, attention_mask=mask)
    actual = linformer(ids, attention_mask=mask)
    torch.testing.assert_close(actual.last_hidden_state, expected.last_hidden_state, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(actual.pooler_output, expected.pooler_output, rtol=1e-5, atol=1e-5)

    # A short unpadded input (L < n) leaves identity rows past its end empty: they must be masked too.
    expected = roberta(ids[2:, :5]).last_hidden_state
    torch.testing.assert_close(linformer(ids[2:, :5]).last_hidden_state, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sharing,projection", ALL_VARIANTS)
def test_eager_and_sdpa_agree(sharing, projection):
    eager = build(sharing, projection, attn_implementation="eager")
    sdpa = build(sharing, projection, attn_implementation="sdpa")
    sdpa.load_state_dict(eager.state_dict())
    assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
    ids = random_batch(2, 13)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    torch.testing.assert_close(
        sdpa(ids, attention_mask=mask).last_hidden_state,
        eager(ids, attention_mask=mask).last_hidden_state,
        rtol=1e-5,
        atol=1e-5,
    )


def test_sdpa_is_the_default():
    assert LinformerModel(tiny_config()).config._attn_implementation == "sdpa"


def counting(function, calls, name):
    """`function`, recording `name` and the mask's shape in `calls` each time it runs."""

    def wrapper(module, query, key, value, attention_mask, **kwargs):
        calls.append((name, tuple(attention_mask.shape)))
        return function(module, query, key, value, attention_mask, **kwargs)

    return wrapper


@pytest.fixture
def transformers_warnings(caplog):
    """transformers' log records, which do not reach pytest's caplog unless propagated."""
    transformers_logging.enable_propagation()
    try:
        yield caplog
    finally:
        transformers_logging.disable_propagation()


@pytest.mark.parametrize("sharing", ["none", "headwise"])
def test_set_attn_implementation_switches_the_function_of_a_loaded_model(
    sharing, tmp_path, monkeypatch, transformers_warnings
):
    build(sharing).save_pretrained(tmp_path)
    model = LinformerModel.from_pretrained(tmp_path).eval()
    assert model.config._attn_implementation == "sdpa"
    calls = []
    monkeypatch.setattr(
        modeling_linformer,
        "eager_attention_forward",
        counting(modeling_linformer.eager_attention_forward, calls, "eager"),
    )
    monkeypatch.setitem(AttentionInterface._global_mapping, "sdpa", counting(sdpa_attention_forward, calls, "sdpa"))
    ids = random_batch(2, 13)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    heads = 4 if sharing == "none" else 1

    outputs = {}
    for implementation in ("sdpa", "eager", "sdpa"):
        model.set_attn_implementation(implementation)
        assert model.config._attn_implementation == implementation
        calls.clear()
        outputs.setdefault(implementation, []).append(model(ids, attention_mask=mask).last_hidden_state)
        # every layer ran the chosen function, with the additive slot mask (batch, heads or 1, 1, k)
        assert calls == [(implementation, (2, heads, 1, 8))] * model.config.num_hidden_layers

    torch.testing.assert_close(outputs["eager"][0], outputs["sdpa"][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outputs["sdpa"][1], outputs["sdpa"][0], rtol=0, atol=0)
    assert "does not support setting its attention implementation" not in transformers_warnings.text


def test_a_kernel_registered_with_the_attention_interface_is_used(tmp_path):
    """A user's own attention function, registered by name, runs in every layer and sees the additive slot mask."""
    calls = []

    def my_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        calls.append(attention_mask)
        scores = torch.matmul(query, key.transpose(2, 3)) * scaling + attention_mask
        output = torch.matmul(scores.softmax(-1), value)  # (batch, heads, L, d_h)
        return output.transpose(1, 2), None

    reference = build(projection="mean", attn_implementation="eager")
    reference.save_pretrained(tmp_path)
    ids = random_batch(2, 11)
    mask = torch.ones_like(ids)
    mask[0, 3:] = 0
    expected = reference(ids, attention_mask=mask).last_hidden_state

    AttentionInterface.register("linformer_test_attention", my_attention)
    try:
        model = LinformerModel.from_pretrained(tmp_path, attn_implementation="linformer_test_attention").eval()
        torch.testing.assert_close(model(ids, attention_mask=mask).last_hidden_state, expected, rtol=1e-5, atol=1e-5)
        assert len(calls) == model.config.num_hidden_layers
        # Bins of 2 positions, L = 11: 6 slots. Row 0 has 3 real tokens, so only its first 2 slots are reached.
        assert calls[0].shape == (2, 1, 1, 6)
        assert torch.all(calls[0][1] == 0) and torch.all(calls[0][0, ..., :2] == 0)
        assert torch.all(calls[0][0, ..., 2:] == torch.finfo(torch.float32).min)

        calls.clear()
        reference.set_attn_implementation("linformer_test_attention")
        reference(ids, attention_mask=mask)
        assert len(calls) == model.config.num_hidden_layers
    finally:
        del AttentionInterface._global_mapping["linformer_test_attention"]


@pytest.mark.parametrize("implementation", ["flash_attention_2", "flex_attention"])
def test_backends_that_cannot_take_the_slot_mask_are_refused_naming_why(implementation):
    model = build()
    with pytest.raises(ValueError, match=rf"cannot run attn_implementation='{implementation}'.*mask the compressed"):
        model.set_attn_implementation(implementation)
    assert model.config._attn_implementation == "sdpa"  # unchanged
    with pytest.raises(ValueError, match="cannot run attn_implementation"):
        build(attn_implementation=implementation)


@pytest.mark.parametrize("projection", PROJECTION_KINDS)
def test_output_attentions_is_the_contextual_mapping(projection):
    model = build("none", projection, projected_length=[8, 4, 2])
    ids = random_batch(2, 16)
    mask = torch.ones_like(ids)
    mask[1, 3:] = 0
    attentions = model(ids, attention_mask=mask, output_attentions=True).attentions
    assert len(attentions) == 3
    for layer, k in enumerate([8, 4, 2]):
        probs = attentions[layer]
        assert probs.shape == (2, 4, 16, k)  # (batch, heads, seq, k)
        torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 16))
    if projection != "linear":
        # Row 1 has 3 real tokens: with 8 bins of 2 positions only the first 2 bins are reached.
        assert torch.all(attentions[0][1, :, :, 2:] == 0)
        assert torch.all(attentions[0][1, :, :, :2] > 0)


@pytest.mark.parametrize("sharing", ["headwise", "key_value", "layerwise"])
@pytest.mark.parametrize("projection", ["linear", "mean", "conv"])
def test_fast_path_matches_plain_path_with_gradients(sharing, projection):
    model = build(sharing, projection)
    attention = model.encoder.layer[1].attention.self
    with torch.no_grad():  # non-zero biases, so the (E 1) b term is exercised
        attention.key.bias.normal_()
        attention.value.bias.normal_()
    hidden = torch.randn(3, 14, 32)
    mask = torch.ones(3, 14)
    mask[1, 9:] = 0
    mask[2, 2:] = 0
    shared = model.encoder.shared_projection

    results = {}
    for fast in (True, False):
        model.zero_grad()
        x = hidden.clone().requires_grad_()
        output, _ = attention(x, mask, shared, use_fast_path=fast)
        # only real positions: padded queries are free to differ in nothing, but we test what users consume
        loss = (output * mask[..., None]).square().sum()
        loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results[fast] = (output, x.grad, grads)

    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[True][1], results[False][1], rtol=1e-5, atol=1e-5)
    assert results[True][2].keys() == results[False][2].keys()
    for name in results[True][2]:
        torch.testing.assert_close(results[True][2][name], results[False][2][name], rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.parametrize(
    "sharing, projected_length",
    [("headwise", 8), ("key_value", 8), ("layerwise", 8), ("headwise", [8, 4, 2]), ("key_value", [4, 8, 2])],
)
def test_what_the_encoder_prepares_once_for_all_layers_matches_each_layer_alone_with_gradients(
    sharing, projected_length
):
    """The slot masks and bias corrections the encoder makes once per forward (for every layer at once, or layer by
    layer when k differs) give the outputs and gradients of layers that make their own (E, F, b get theirs)."""
    model = build(sharing, "linear", projected_length=projected_length).train()
    with torch.no_grad():  # non-zero biases, so the (E 1 - 1) b corrections are exercised
        for layer in model.encoder.layer:
            layer.attention.self.key.bias.normal_()
            layer.attention.self.value.bias.normal_()
    hidden = torch.randn(3, 14, 32)
    mask = torch.ones(3, 14)
    mask[1, 9:] = 0
    mask[2, 2:] = 0
    encoder = model.encoder

    def each_layer_alone(x):
        for layer in encoder.layer:
            x = layer(x, mask, **encoder.shared_layer_inputs())
        return x

    results = {}
    for name, forward in (("prepared", lambda x: encoder(x, mask).last_hidden_state), ("alone", each_layer_alone)):
        model.zero_grad()
        x = hidden.clone().requires_grad_()
        output = forward(x)
        (output * mask[..., None]).square().sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results[name] = (output, x.grad, grads)

    prepared, alone = results["prepared"], results["alone"]
    torch.testing.assert_close(prepared[0], alone[0])
    torch.testing.assert_close(prepared[1], alone[1])
    assert prepared[2].keys() == alone[2].keys()
    assert any("projection" in name for name in prepared[2])
    for name in prepared[2]:
        torch.testing.assert_close(prepared[2][name], alone[2][name], msg=name)


def test_hooked_key_value_maps_are_called_as_modules_with_the_same_result():
    """Plain `nn.Linear` maps of compressed rows are applied as their weight (all of (E 1) b comes from the encoder's
    corrections); a hooked (or replaced) map is called as a module (it adds b once, the corrections the rest): the
    hooks run, and the output is the same."""
    model = build("headwise", "linear")
    with torch.no_grad():  # non-zero biases, so the two ways of adding (E 1) b differ if either is wrong
        for layer in model.encoder.layer:
            layer.attention.self.key.bias.normal_()
            layer.attention.self.value.bias.normal_()
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        plain = model(ids, attention_mask=mask).last_hidden_state
    calls = []
    hooks = [
        layer.attention.self.value.register_forward_hook(lambda module, inputs, output: calls.append(output.shape))
        for layer in model.encoder.layer
    ]
    try:
        with torch.no_grad():
            hooked = model(ids, attention_mask=mask).last_hidden_state
    finally:
        for hook in hooks:
            hook.remove()
    assert calls == [torch.Size([2, 8, 32])] * model.config.num_hidden_layers  # on the k compressed rows
    torch.testing.assert_close(hooked, plain)


def test_short_inputs_use_only_the_first_columns_of_e():
    model = build("headwise", "linear")
    ids = random_batch(1, 6)
    before = model(ids).last_hidden_state
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.self.key_projection.weight[:, :, 6:] += 1.0
    torch.testing.assert_close(model(ids).last_hidden_state, before)
    with torch.no_grad():
        # one entry, not a whole column: a column shift moves every compressed key alike, which softmax ignores
        model.encoder.layer[0].attention.self.key_projection.weight[:, 0, 5] += 1.0
    assert not torch.allclose(model(ids).last_hidden_state, before)


def test_input_longer_than_n_is_an_error_naming_n():
    model = build()
    with pytest.raises(ValueError, match=r"max_sequence_length n=16.*truncation=True"):
        model(random_batch(1, 17))


@pytest.mark.parametrize("bad_mask_shape", [(2, 10), (2, 1, 12, 12), (2, 1, 1, 12)])
def test_mask_of_the_wrong_shape_is_an_error_not_dropped(bad_mask_shape):
    model = build()
    with pytest.raises(ValueError, match="attention_mask must be a \\(batch, sequence_length\\) padding mask"):
        model(random_batch(2, 12), attention_mask=torch.ones(bad_mask_shape))


@pytest.mark.parametrize("dtype", [torch.long, torch.int32, torch.bool, torch.float32, torch.float16])
def test_a_padding_mask_of_any_dtype_gives_the_same_outputs(dtype):
    model = build()
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    expected = model(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(model(ids, attention_mask=mask.to(dtype)).last_hidden_state, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "convention,values",
    [
        ("additive, 0 for tokens and -inf for padding", (0.0, float("-inf"))),
        ("additive, 0 for tokens and the dtype's minimum for padding", (0.0, torch.finfo(torch.float32).min)),
        ("soft weights", (1.0, 0.5)),
        ("segment ids", (1, 2)),
    ],
)
def test_a_mask_in_another_convention_is_an_error_saying_which_convention_this_model_takes(convention, values):
    model = build()
    ids = random_batch(2, 12)
    mask = torch.full(ids.shape, values[0])
    mask[1, 5:] = values[1]
    with pytest.raises(ValueError, match=r"must hold 1 for real tokens and 0 for padding .* but it holds"):
        model(ids, attention_mask=mask)


def test_fully_padded_row_stays_finite():
    model = build()
    ids = random_batch(2, 8)
    mask = torch.ones_like(ids)
    mask[1] = 0
    out = model(ids, attention_mask=mask).last_hidden_state
    assert torch.isfinite(out).all()


def is_right_padded(row: list[int]) -> bool:
    """No real token after padding: the row is its tokens, then its padding (no padding, or all padding, included)."""
    return row == sorted(row, reverse=True)


@pytest.mark.parametrize("dtype", [torch.long, torch.bool, torch.float32])
def test_a_padding_mask_is_taken_exactly_when_it_is_right_padding(dtype):
    """Property over random masks: left padding (or a hole of padding before a token) is refused before any work,
    with the fix; right padding, no padding and rows of padding only are taken."""
    model = build()
    embedded = []
    model.embeddings.register_forward_pre_hook(lambda module, args: embedded.append(1))
    ids = random_batch(3, 10)
    generator = torch.Generator().manual_seed(0)
    refused = 0
    for trial in range(60):
        if trial % 2:  # right-padded rows of random lengths, 0 (all padding) to 10 (none)
            lengths = torch.randint(0, 11, (3,), generator=generator)
            mask = (torch.arange(10) < lengths[:, None]).long()
        else:
            mask = torch.randint(0, 2, (3, 10), generator=generator)
        expected_ok = all(is_right_padded(row) for row in mask.tolist())
        embedded.clear()
        if expected_ok:
            model(ids, attention_mask=mask.to(dtype))
            continue
        refused += 1
        with pytest.raises(ValueError, match=r"padding before real tokens .*tokenizer\.padding_side = \"right\""):
            model(ids, attention_mask=mask.to(dtype))
        assert not embedded  # refused before the embeddings
    assert refused > 10


def test_refusing_left_padding_is_not_vacuous(monkeypatch):
    """With the check bypassed, a left-padded row's real tokens get other outputs than the same tokens unpadded (E and
    F are indexed by position), while the right-padded row's are exact."""
    model = build()
    ids = random_batch(1, 9)
    alone = model(ids).last_hidden_state[0]  # (9, d)
    monkeypatch.setattr(LinformerModel, "check_padding_side", lambda self, mask: None)
    pad = torch.full((1, 5), model.config.pad_token_id)
    left = model(torch.cat([pad, ids], 1), attention_mask=torch.tensor([[0] * 5 + [1] * 9])).last_hidden_state[0, 5:]
    right = model(torch.cat([ids, pad], 1), attention_mask=torch.tensor([[1] * 9 + [0] * 5])).last_hidden_state[0, :9]
    torch.testing.assert_close(right, alone, rtol=1e-5, atol=1e-5)
    assert (left - alone).norm() / alone.norm() > 1e-3  # 100 times the tolerance the right-padded row meets


def test_output_attentions_from_the_config():
    model = build(attn_implementation="eager", output_attentions=True)
    attentions = model(random_batch(1, 5)).attentions
    assert len(attentions) == 3 and attentions[0].shape == (1, 4, 5, 8)


def test_chunked_feed_forward_gives_the_same_outputs():
    """RoBERTa's `chunk_size_feed_forward` is honoured, not ignored."""
    model = build()
    ids = random_batch(2, 12)
    expected = model(ids).last_hidden_state
    model.config.chunk_size_feed_forward = 4
    chunked = LinformerModel(model.config).eval()
    chunked.load_state_dict(model.state_dict())
    assert chunked.encoder.layer[0].chunk_size_feed_forward == 4
    torch.testing.assert_close(chunked(ids).last_hidden_state, expected)


def roberta_with_weights_of(linformer):
    """The RoBERTa of the Linformer's settings, holding its weights (all but E, F), in eval mode."""
    fields = {k: v for k, v in linformer.config.to_dict().items() if k in ROBERTA_FIELDS}
    roberta = RobertaModel(RobertaConfig(**fields)).eval()
    roberta.load_state_dict(linformer.state_dict(), strict=False)
    return roberta


@pytest.mark.parametrize("sharing", SHARING_MODES)
def test_strided_init_is_roberta_on_inputs_of_at_most_k_tokens_and_compresses_longer_ones(sharing):
    """n = 16, k = 8: an input of L <= 8 tokens (padded or not) keeps one slot per token, so the Linformer is the
    RoBERTa with its weights; at L = 16, positions p and p + 8 share a slot and it is not."""
    from linformer_hf.models.modeling_linformer import LinformerProjection, strided_projection

    expected = strided_projection(16, 8)
    assert torch.equal(expected[:, :8], torch.eye(8)) and torch.equal(expected[:, 8:], torch.eye(8))
    config = tiny_config(sharing=sharing, projection_init="strided")
    linformer = LinformerModel(config).eval()
    projections = [m for m in linformer.modules() if isinstance(m, LinformerProjection)]
    assert projections and all(torch.equal(p.weight, expected.expand_as(p.weight)) for p in projections)
    roberta = roberta_with_weights_of(linformer)

    short = random_batch(2, 8, seed=5)
    mask = torch.ones_like(short)
    mask[1, 5:] = 0
    torch.testing.assert_close(
        linformer(short, attention_mask=mask).last_hidden_state,
        roberta(short, attention_mask=mask).last_hidden_state,
        rtol=1e-5,
        atol=1e-5,
    )
    full = random_batch(2, 16, seed=6)
    assert not torch.allclose(linformer(full).last_hidden_state, roberta(full).last_hidden_state, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("sharing", SHARING_MODES)
def test_neighbour_average_init_averages_bins_and_is_roberta_when_k_equals_n(sharing):
    from linformer_hf.models.modeling_linformer import LinformerProjection, neighbour_average_projection

    model = LinformerModel(tiny_config(sharing=sharing, projection_init="neighbour_average")).eval()
    expected = neighbour_average_projection(16, 8)
    assert torch.equal(expected[0], torch.tensor([0.5, 0.5] + [0.0] * 14))
    projections = [m for m in model.modules() if isinstance(m, LinformerProjection)]
    assert projections and all(torch.equal(p.weight, expected.expand_as(p.weight)) for p in projections)

    config = tiny_config(sharing=sharing, projected_length=16, projection_init="neighbour_average")
    linformer = LinformerModel(config).eval()
    roberta = roberta_with_weights_of(linformer)
    ids = random_batch(2, 16, seed=4)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    torch.testing.assert_close(
        linformer(ids, attention_mask=mask).last_hidden_state,
        roberta(ids, attention_mask=mask).last_hidden_state,
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "sharing,projection",
    [("headwise", "linear"), ("key_value", "linear"), ("headwise", "mean"), ("none", "conv"), ("none", "linear")],
)
def test_under_autocast_sdpa_gets_one_dtype_and_a_mask_it_can_fuse(sharing, projection, monkeypatch):
    """Under bf16 autocast with fp32 weights, the compressed keys, values and slot mask reach SDPA in the queries'
    dtype, the mask's slots contiguous: otherwise SDPA's fused kernels refuse them and its fp32 math path runs (on an
    H100 a Linformer step took 2x RoBERTa-SDPA's time so). Fast path, pooling and the plain per-head path."""
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, **kwargs):
        seen.append((query.dtype, key.dtype, value.dtype, attn_mask.dtype, attn_mask.stride(-1)))
        return sdpa(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    model = build(sharing, projection, attn_implementation="sdpa")
    ids = random_batch(2, 16)
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert len(seen) == model.config.num_hidden_layers
    assert set(seen) == {(torch.bfloat16,) * 4 + (1,)}
    assert torch.isfinite(out).all()
