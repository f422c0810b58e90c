"""transformers' own common model tests (`ModelTesterMixin` of the installed release's test suite) on every head of
both families, as transformers runs them on its own models.

transformers ships these tests in its source distribution, not in the wheel. Point TRANSFORMERS_TESTS_DIR at the
`tests` folder of the installed release's sdist, e.g.

    pip download "transformers==$(python -c 'import transformers; print(transformers.__version__)')" \
        --no-binary :all: --no-deps -d /tmp/sdist && tar xzf /tmp/sdist/transformers-*.tar.gz -C /tmp/sdist
    TRANSFORMERS_TESTS_DIR=$(echo /tmp/sdist/transformers-*/tests) pytest tests/test_transformers_common.py

(`parameterized`, in the dev extra, must be importable, as for transformers' own suite). Without the variable this file
is skipped; CI sets it (.ci/run). The sdist lacks the folders two of the mixin's bases come from (tests/exporters,
tests/generation): where they are missing, empty mixins stand in, so the export and generation tests do not run.
"""

import importlib
import os
import sys
import types
import unittest

import pytest
import torch

import linformer_hf  # noqa: F401  (registers both families with the Auto classes)
from linformer_hf import LinformerConfig, PerformerConfig
from linformer_hf.models import modeling_linformer, modeling_performer

TESTS_DIR = os.environ.get("TRANSFORMERS_TESTS_DIR", "")
if not TESTS_DIR:
    pytest.skip("TRANSFORMERS_TESTS_DIR is not set (CI sets it, .ci/run)", allow_module_level=True)
if not os.path.isfile(os.path.join(TESTS_DIR, "test_modeling_common.py")):
    raise FileNotFoundError(f"TRANSFORMERS_TESTS_DIR={TESTS_DIR} holds no test_modeling_common.py")

PACKAGE = "transformers_common_tests"
PERFORMER_HEADS = modeling_performer.PERFORMER_HEADS
# Auto class -> the table of transformers.models.auto.modeling_auto that names its heads
AUTO_TABLES = {
    "AutoModel": "MODEL_MAPPING_NAMES",
    "AutoModelForMaskedLM": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "AutoModelForCausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "AutoModelForSequenceClassification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForTokenClassification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForQuestionAnswering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "AutoModelForMultipleChoice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
}


def load_common_tests() -> types.ModuleType:
    """transformers' tests/test_modeling_common.py, imported as `transformers_common_tests.test_modeling_common` (its
    relative imports resolve in that folder), with empty mixins for the folders an sdist lacks."""
    if PACKAGE not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [TESTS_DIR]
        sys.modules[PACKAGE] = package
        for folder, module, mixin in (
            ("exporters", "test_export", "ExportTesterMixin"),
            ("generation", "test_utils", "GenerationTesterMixin"),
        ):
            if os.path.isfile(os.path.join(TESTS_DIR, folder, f"{module}.py")):
                continue
            subpackage = types.ModuleType(f"{PACKAGE}.{folder}")
            subpackage.__path__ = []
            stub = types.ModuleType(f"{PACKAGE}.{folder}.{module}")
            setattr(stub, mixin, type(mixin, (), {}))
            sys.modules[subpackage.__name__], sys.modules[stub.__name__] = subpackage, stub
    common = importlib.import_module(f"{PACKAGE}.test_modeling_common")
    # The mixin recognises a head's task by its class name in transformers' Auto tables; the families' heads are
    # registered at run time, outside those tables: add them to the mixin's own copies.
    for family, heads in (("linformer", modeling_linformer.LINFORMER_HEADS), ("performer", PERFORMER_HEADS)):
        for auto_name, cls in heads.items():
            table = AUTO_TABLES[auto_name]
            setattr(common, table, {**getattr(common, table), family: cls.__name__})
    return common


common = load_common_tests()
ids_tensor = common.ids_tensor


class FamilyModelTester:
    """RoBERTa's tester's sizes (tests/models/roberta in transformers), with right-padded masks: the Linformer takes
    right padding only, and both families take only the (batch, L) 0/1 padding mask."""

    def __init__(self, parent, config_class, **family_settings):
        self.parent = parent
        self.config_class = config_class
        self.family_settings = family_settings
        self.batch_size = 13
        self.seq_length = 7
        self.is_training = True
        self.vocab_size = 99
        self.hidden_size = 32
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.intermediate_size = 37
        self.type_vocab_size = 16
        self.num_labels = 3
        self.num_choices = 4

    def get_config(self):
        return self.config_class(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            hidden_act="gelu",
            hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1,
            type_vocab_size=self.type_vocab_size,
            initializer_range=0.02,
            **self.family_settings,
        )

    def prepare_config_and_inputs_for_common(self):
        # ids 0-2 are RoBERTa's special tokens: with the padding id (1) inside a row, positions counted from input_ids
        # (which skip padding) would differ from those counted from inputs_embeds
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size - 3) + 3
        lengths = torch.randint(1, self.seq_length + 1, (self.batch_size,))
        lengths[0] = self.seq_length  # one full row
        attention_mask = (torch.arange(self.seq_length)[None, :] < lengths[:, None]).long()
        token_type_ids = ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size)
        inputs = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}
        return self.get_config(), inputs


# The one common test the Performer skips: it asks every buffer to come out of `_init_weights` as the module's
# __init__ made it, "buffers are not random usually"; FAVOR+'s random features W are a buffer drawn at random.
RANDOM_FEATURES = "the random features W are a buffer drawn at random in _init_weights (tests/test_performer.py)"


class LinformerCommonTest(common.ModelTesterMixin, unittest.TestCase):
    all_model_classes = tuple(modeling_linformer.LINFORMER_HEADS.values())
    test_resize_embeddings = True

    def setUp(self):
        # n = 16 positions, k = 4 compressed rows: the attention weights are (heads, L, k)
        self.model_tester = FamilyModelTester(
            self, LinformerConfig, max_sequence_length=16, projected_length=4, sharing="headwise"
        )
        self.model_tester.key_length = 4


class PerformerCommonTest(common.ModelTesterMixin, unittest.TestCase):
    all_model_classes = tuple(
        cls for cls in modeling_performer.PERFORMER_HEADS.values() if cls is not modeling_performer.PerformerForCausalLM
    )
    has_attentions = False  # FAVOR+ forms no attention matrix

    def setUp(self):
        self.model_tester = FamilyModelTester(self, PerformerConfig, num_random_features=16)

    @unittest.skip(reason=RANDOM_FEATURES)
    def test_init_weights_can_init_buffers(self):
        pass


class PerformerCausalLMCommonTest(common.ModelTesterMixin, common.GenerationTesterMixin, unittest.TestCase):
    all_model_classes = (modeling_performer.PerformerForCausalLM,)
    has_attentions = False

    def setUp(self):
        self.model_tester = FamilyModelTester(self, PerformerConfig, num_random_features=16, is_decoder=True)

    @unittest.skip(reason=RANDOM_FEATURES)
    def test_init_weights_can_init_buffers(self):
        pass


def skip_left_padding_variants(test_class: type, reason: str) -> None:
    """Skip the mixin's parameterized variants that pad on the left."""
    for name in dir(common.ModelTesterMixin):
        if name.startswith("test_") and "pad_left" in name:
            setattr(test_class, name, unittest.skip(reason)(lambda self: None))


skip_left_padding_variants(
    LinformerCommonTest,
    "a Linformer refuses left padding with an error: its E and F are indexed by position (tests/test_padding_side.py)",
)
