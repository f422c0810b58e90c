"""LinformerConfig: defaults, derived fields, serialisation and the errors for impossible settings."""

import pytest
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig

from linformer_hf import LinformerConfig


def test_defaults_follow_the_paper_and_fairseq():
    config = LinformerConfig()
    assert (config.max_sequence_length, config.projected_length) == (512, 128)
    assert config.sharing == "headwise" and config.projection == "linear"
    assert config.max_position_embeddings == 514  # n + RoBERTa's offset of pad_token_id + 1 = 2
    assert not config.is_decoder


def test_max_position_embeddings_follows_n_unless_given():
    assert LinformerConfig(max_sequence_length=4096, projected_length=256).max_position_embeddings == 4098
    assert LinformerConfig(max_sequence_length=128, max_position_embeddings=600).max_position_embeddings == 600


def test_round_trip_through_json_and_auto_config(tmp_path):
    config = LinformerConfig(
        num_hidden_layers=3, max_sequence_length=64, projected_length=[32, 16, 8], sharing="key_value"
    )
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is LinformerConfig
    for field in ("max_sequence_length", "projected_length", "sharing", "projection", "max_position_embeddings"):
        assert getattr(loaded, field) == getattr(config, field)
    assert [loaded.projected_length_of_layer(i) for i in range(3)] == [32, 16, 8]


@pytest.mark.parametrize(
    "settings,message",
    [
        (dict(projected_length=600), "`projected_length` k=600 is larger than `max_sequence_length` n=512"),
        (dict(projected_length=0), "`projected_length` \\(k\\) must be a positive integer"),
        (dict(projected_length=[64, 0]), "must be a positive integer"),
        (dict(max_sequence_length=0), "`max_sequence_length` \\(n\\) must be a positive integer"),
        (
            dict(sharing="heads"),
            "'sharing' expected one of \\('none', 'headwise', 'key_value', 'layerwise'\\), got heads",
        ),
        (dict(projection="avg"), "'projection' expected one of \\('linear', 'mean', 'max', 'conv'\\), got avg"),
        (dict(projected_length=[64, 64, 64]), "has 3 entries but `num_hidden_layers` is 2"),
        (dict(projected_length=[64, 32], sharing="layerwise"), "per-layer list, but `sharing='layerwise'`"),
        (dict(projection="mean", projected_length=100), "must be a multiple of `projected_length` k=100"),
        (dict(max_position_embeddings=100), "`max_position_embeddings`=100 is too small"),
        (
            dict(projection_init="xavier"),
            "'projection_init' expected one of \\('random', 'neighbour_average', 'strided'\\)",
        ),
        (dict(is_decoder=True), "Linformer cannot be a decoder"),
        (dict(add_cross_attention=True), "Linformer cannot be a decoder"),
        (dict(num_hidden_layers=0), "`num_hidden_layers` must be at least 1"),
    ],
)
def test_impossible_settings_fail_at_construction_naming_the_field(settings, message):
    settings = dict(dict(num_hidden_layers=2), **settings)
    with pytest.raises(StrictDataclassError, match=message):
        LinformerConfig(**settings)


def test_wrong_types_are_rejected_by_the_strict_dataclass():
    with pytest.raises(StrictDataclassError, match="sharing"):
        LinformerConfig(sharing=3)


def test_a_bad_option_in_a_saved_config_fails_at_load_naming_the_field(tmp_path):
    """An edited config.json is validated by the same strict types as the constructor."""
    LinformerConfig(num_hidden_layers=2).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(path.read_text().replace('"sharing": "headwise"', '"sharing": "per_head"'))
    with pytest.raises(StrictDataclassError, match="'sharing' expected one of .*got per_head"):
        AutoConfig.from_pretrained(tmp_path)


def test_assigning_a_bad_option_is_rejected():
    config = LinformerConfig(num_hidden_layers=2)
    with pytest.raises(StrictDataclassError, match="'projection' expected one of"):
        config.projection = "median"
    assert config.projection == "linear"


SMALL = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    max_sequence_length=16,
    projected_length=8,
)


def test_settings_changed_after_the_config_was_built_are_checked_when_a_model_is_made(tmp_path):
    """from_pretrained's keyword overrides and assignments had only each field's type checked: a decoder, an n past
    the position table or a k > n went through, and failed later with an index error, or silently (a Linformer asked
    to be causal stayed bidirectional)."""
    from transformers import AutoModel

    from linformer_hf import LinformerModel

    LinformerModel(LinformerConfig(**SMALL)).save_pretrained(tmp_path)
    with pytest.raises(StrictDataclassError, match="Linformer cannot be a decoder"):
        AutoModel.from_pretrained(tmp_path, is_decoder=True)
    with pytest.raises(StrictDataclassError, match=r"`max_position_embeddings`=18 is too small .* n \+ 2 = 34"):
        AutoModel.from_config(AutoConfig.from_pretrained(tmp_path, max_sequence_length=32))
    config = AutoConfig.from_pretrained(tmp_path)
    config.max_sequence_length = 4
    with pytest.raises(StrictDataclassError, match="k=8 is larger than `max_sequence_length` n=4"):
        LinformerModel(config)
    assert isinstance(AutoModel.from_pretrained(tmp_path, hidden_dropout_prob=0.3), LinformerModel)  # a valid change


def test_the_position_table_follows_the_pad_id():
    """RoBERTa numbers positions from pad_token_id + 1: with a pad id of 10, n + 2 rows were too few, and inputs
    near n failed with an index error."""
    import torch

    from linformer_hf import LinformerModel

    config = LinformerConfig(**{**SMALL, "pad_token_id": 10})
    assert config.max_position_embeddings == 16 + 11
    ids = torch.randint(11, 99, (1, 16))
    assert LinformerModel(config).eval()(ids).last_hidden_state.shape == (1, 16, 32)
    assert LinformerConfig(**{**SMALL, "pad_token_id": 0}).max_position_embeddings == 18  # never below n + 2
    # a table of n + 2 (RoBERTa's pad id) with pad id 10 holds 7 tokens: a longer input is refused with the fix
    short = LinformerModel(LinformerConfig(**{**SMALL, "pad_token_id": 10, "max_position_embeddings": 18})).eval()
    assert short(ids[:, :7]).last_hidden_state.shape == (1, 7, 32)
    with pytest.raises(ValueError, match="exceeds the 7 positions .* max_position_embeddings >= 27"):
        short(ids)
