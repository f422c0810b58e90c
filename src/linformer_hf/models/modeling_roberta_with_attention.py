# Copyright 2026 The linformer-hf Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""RoBERTa around a given self-attention: the one skeleton shared by the model families of this package.

A family (Linformer, Performer) writes only its self-attention module; everything else is RoBERTa's, imported from
`transformers`: embeddings, the attention output block, feed-forward, pooler, LM and classification heads, and the
heads' forwards. Parameter names match RoBERTa's (`roberta.encoder.layer.0.attention.self.query.weight`, ...), so a
RoBERTa checkpoint loads into any family with only the family's own tensors missing.

A self-attention module plugged in here is built as `SelfAttention(config, layer_idx)` and called as
`self_attention(hidden_states, attention_mask, **kwargs)` with hidden_states (batch, L, d) and attention_mask
(batch, L) holding 1.0 for real tokens and 0.0 for padding, and `layer_tensors` among the kwargs when its encoder's
`layer_inputs` made tensors for it; it returns `(output (batch, L, d), weights or None)`.

This file is copied beside saved weights with the family's modeling file (a sibling import), so it may import only
`torch`, `transformers` and its siblings; what differs between transformers releases comes from `compat.py`.
"""

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPooling, CausalLMOutput, MaskedLMOutput
from transformers.models.roberta.modeling_roberta import (
    RobertaClassificationHead,
    RobertaEmbeddings,
    RobertaForMaskedLM,
    RobertaForMultipleChoice,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaIntermediate,
    RobertaLMHead,
    RobertaOutput,
    RobertaPooler,
    RobertaPreTrainedModel,
    RobertaSelfOutput,
)
from transformers.pytorch_utils import apply_chunking_to_forward
from transformers.utils.generic import can_return_tuple

from .compat import PreTrainedModelCompat, auto_docstring, model_forward, tied_weights


def check_padding_mask(attention_mask: torch.Tensor, input_shape: torch.Size) -> None:
    """Refuse a mask that is not the (batch, L) padding mask of 1 (token) / 0 (padding) that tokenizers return."""
    if attention_mask.shape != input_shape:
        raise ValueError(
            f"attention_mask must be a (batch, sequence_length) padding mask of shape {tuple(input_shape)}, "
            f"got shape {tuple(attention_mask.shape)}. This model takes the 2-D mask of 1 (token) / 0 (padding) "
            "that tokenizers return."
        )
    if attention_mask.dtype == torch.bool or torch.compiler.is_compiling() or torch.jit.is_tracing():
        # Compiled and traced graphs skip the value check: a data-dependent branch would break them.
        return
    if attention_mask.device.type != "cpu":
        # Reading an accelerator tensor's values is a host-device sync that stalls every call (and
        # `torch._assert_async` would abort the CUDA context rather than raise). The check runs where reading is free:
        # on the CPU, where a tokenizer's mask and any mask a user builds by hand start out.
        return
    # One elementwise pass: an additive (0 / -inf) or soft mask read as `!= 0` would silently let padding in.
    invalid = (attention_mask != 0) & (attention_mask != 1)
    if invalid.any():
        raise ValueError(
            "attention_mask must hold 1 for real tokens and 0 for padding (the mask tokenizers return; a bool mask "
            f"means True = token), but it holds {attention_mask[invalid][0].item()!r}. An additive mask (0 for "
            "tokens, -inf for padding) converts with `(mask == 0).long()`; a mask where 1 or True marks padding, "
            "with `1 - mask` or `~mask`."
        )


def check_token_ids(config, input_ids: torch.Tensor | None, token_type_ids: torch.Tensor | None) -> None:
    """Refuse ids the embedding tables have no row for, with the sizes, instead of an index error (CPU) or a device
    assert (GPU) inside the embedding. Checked on CPU tensors only: on an accelerator it would wait for the device on
    every forward; there the training scripts check the tokenizer against the model before any work."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return
    for name, ids, field in (
        ("input_ids", input_ids, "vocab_size"),
        ("token_type_ids", token_type_ids, "type_vocab_size"),
    ):
        if ids is None or ids.device.type != "cpu" or ids.numel() == 0:
            continue
        size, low, high = getattr(config, field), int(ids.min()), int(ids.max())
        if low < 0 or high >= size:
            raise ValueError(
                f"{name} holds {high if high >= size else low}, but the model's {field} is {size} (ids 0 to "
                f"{size - 1}): the inputs come from another tokenizer than the model's. Use the tokenizer saved with "
                f"the model"
                + ("; a single-segment model takes no token_type_ids." if field == "type_vocab_size" else ".")
            )


def auto_map_for(config_class: type, heads: dict[str, type]) -> dict[str, str]:
    """What `trust_remote_code=True` needs to load every head from a saved folder (file names as copied there).

    transformers records only the saved class in `auto_map`; a family's folder must load as any of its heads.
    """
    entries = {"AutoConfig": f"{config_class.__module__.rsplit('.', 1)[-1]}.{config_class.__name__}"}
    entries.update({auto: f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}" for auto, cls in heads.items()})
    return entries


class RobertaAttentionWith(nn.Module):
    """The family's self-attention followed by RoBERTa's output block (dense, dropout, residual, LayerNorm)."""

    def __init__(self, config, layer_idx: int, self_attention_class: type[nn.Module]):
        super().__init__()
        self.self = self_attention_class(config, layer_idx)
        self.output = RobertaSelfOutput(config)

    def forward(self, hidden_states, attention_mask, **kwargs):
        attention_output, attn_weights = self.self(hidden_states, attention_mask, **kwargs)
        return self.output(attention_output, hidden_states), attn_weights


class RobertaLayerWith(GradientCheckpointingLayer):
    """A RoBERTa layer whose self-attention is the family's.

    `layer_tensors`, tensors the encoder made for this forward (`RobertaEncoderWith.layer_inputs`), come in as
    positional arguments, and go on to the self-attention as its `layer_tensors`: under gradient checkpointing only
    positional tensors enter the checkpoint as its inputs. One passed as a keyword would bring its graph (shared by all
    layers) into each layer's recomputation, which reentrant checkpointing (`use_reentrant=True`, as DeepSpeed's) runs
    as a backward of its own: the second layer's would walk that graph again and fail ("backward through the graph a
    second time").
    """

    def __init__(self, config, layer_idx: int, self_attention_class: type[nn.Module]):
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward  # as RoBERTa: 0 = the whole sequence at once
        self.attention = RobertaAttentionWith(config, layer_idx, self_attention_class)
        self.intermediate = RobertaIntermediate(config)
        self.output = RobertaOutput(config)

    def forward(self, hidden_states, attention_mask, *layer_tensors, **kwargs):
        if layer_tensors:
            kwargs["layer_tensors"] = layer_tensors
        attention_output, _ = self.attention(hidden_states, attention_mask, **kwargs)
        # (batch, L, d); the feed-forward may run in chunks along the sequence to bound its (L x d_ff) activations
        return apply_chunking_to_forward(self.feed_forward_chunk, self.chunk_size_feed_forward, 1, attention_output)

    def feed_forward_chunk(self, attention_output):
        return self.output(self.intermediate(attention_output), attention_output)


class RobertaEncoderWith(nn.Module):
    """The stack of layers. A family subclass sets `self_attention_class`, and may hand every layer extra inputs
    (state the encoder owns and all layers share) through `shared_layer_inputs`, and per-forward inputs (tensors
    passed positionally, and keyword arguments) through `layer_inputs`."""

    self_attention_class: type[nn.Module]

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList(
            [RobertaLayerWith(config, i, self.self_attention_class) for i in range(config.num_hidden_layers)]
        )

    def shared_layer_inputs(self) -> dict:
        return {}

    def layer_inputs(self, hidden_states, attention_mask) -> list[tuple[tuple[torch.Tensor, ...], dict]]:
        """The extra inputs of each layer for this forward, as (tensors, keyword arguments): by default the shared
        ones, no tensors. A family may add what depends only on the mask and its parameters, made once here for all
        layers instead of in every layer: as tensors, which reach the self-attention positionally (`RobertaLayerWith`
        says why)."""
        return [((), self.shared_layer_inputs())] * len(self.layer)

    def forward(self, hidden_states, attention_mask, **kwargs) -> BaseModelOutput:
        for layer_module, (tensors, inputs) in zip(self.layer, self.layer_inputs(hidden_states, attention_mask)):
            hidden_states = layer_module(hidden_states, attention_mask, *tensors, **inputs, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


@auto_docstring(
    custom_intro="""
    What every family shares: RoBERTa's weight names and init, gradient checkpointing, hidden-state capture.

    A family subclass sets `config_class`, `_can_record_outputs["attentions"]` when its attention has weights to
    return, the attention backends it supports, and overrides `save_pretrained` to record its full `auto_map`.
    """
)
class RobertaWithAttentionPreTrainedModel(PreTrainedModelCompat, RobertaPreTrainedModel):
    base_model_prefix = "roberta"  # as RoBERTa (and XLM-R, CamemBERT): RoBERTa checkpoints map key for key
    supports_gradient_checkpointing = True
    # Not a vLLM/TGI backend model: that also asks for tensor-parallel plans and logits slicing.
    _supports_attention_backend = False
    _no_split_modules = ["RobertaEmbeddings", "RobertaLayerWith"]
    _can_record_outputs = {"hidden_states": RobertaLayerWith}


@auto_docstring(
    custom_intro="""
    The bare encoder: RoBERTa's embeddings and pooler around the family's encoder (`encoder_class`).
    """
)
class RobertaWithAttentionModel(RobertaWithAttentionPreTrainedModel):
    encoder_class: type[RobertaEncoderWith]

    def __init__(self, config, add_pooling_layer: bool = True):
        r"""
        add_pooling_layer (`bool`, *optional*, defaults to `True`):
            Whether to add RoBERTa's pooler (a dense layer and tanh over the first token's output); the heads that read
            only the per-token outputs are built without it.
        """
        super().__init__(config)
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = RobertaEmbeddings(config)
        self.encoder = self.encoder_class(config)
        self.pooler = RobertaPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def check_input_length(self, seq_len: int) -> None:
        """Refuse inputs longer than the position table (RoBERTa numbers positions from padding_idx + 1)."""
        longest = self.config.max_position_embeddings - (self.config.pad_token_id + 1)
        if seq_len > longest:
            raise ValueError(
                f"Input length {seq_len} exceeds the {longest} positions this model has "
                f"(max_position_embeddings={self.config.max_position_embeddings}). Truncate the input, e.g. "
                f"tokenizer(..., truncation=True, max_length={longest})."
            )

    def check_padding_side(self, attention_mask: torch.Tensor) -> None:
        """Refuse padding this family cannot take. Attention that reads positions only through the embeddings takes
        padding on either side: nothing to check."""

    @model_forward
    @auto_docstring
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            1 for real tokens, 0 for padding (int, float or bool with True for tokens); any other value is an error
            (checked for a mask on the CPU: reading an accelerator's mask would stall every call). Only this 2-D
            padding mask is accepted: the efficient attentions form no (L x L) score matrix to mask.
        """
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if encoder_hidden_states is not None or encoder_attention_mask is not None:
            raise ValueError(
                f"{type(self).__name__} is an encoder only: it has no cross-attention (`encoder_hidden_states`)."
            )
        input_shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        self.check_input_length(input_shape[1])
        if attention_mask is not None:
            check_padding_mask(attention_mask, input_shape)
            self.check_padding_side(attention_mask)

        check_token_ids(self.config, input_ids, token_type_ids)
        embedding_output = self.embeddings(
            input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
        )
        if attention_mask is None:
            if input_ids is not None and input_ids.device.type == "cpu":  # reads ids: a sync elsewhere, as above
                self.warn_if_padding_and_no_attention_mask(input_ids, None)
            attention_mask = torch.ones(input_shape, device=embedding_output.device)
        mask = (attention_mask != 0).to(embedding_output.dtype)  # (batch, L): 1.0 token, 0.0 padding

        encoder_outputs = self.encoder(embedding_output, mask, **kwargs)
        sequence_output = encoder_outputs.last_hidden_state
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=pooled_output)


# Task heads: RoBERTa's modules and forwards, built around the family's bare model (`base_model_class`). Their
# losses do not take `num_items_in_batch`, so Trainer must scale them for gradient accumulation itself
# (`accepts_loss_kwargs = False`); the LM heads' losses do take it.


@auto_docstring(
    custom_intro="""
    The family's bare model with RoBERTa's masked language modeling head on top.
    """
)
class RobertaWithAttentionForMaskedLM(RobertaWithAttentionPreTrainedModel, RobertaForMaskedLM):
    base_model_class: type[RobertaWithAttentionModel]
    _tied_weights_keys = tied_weights(
        {"lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight", "lm_head.decoder.bias": "lm_head.bias"}
    )

    def __init__(self, config):
        RobertaWithAttentionPreTrainedModel.__init__(self, config)
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        logits_for_labels_only: bool = False,
        **kwargs,
    ) -> MaskedLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Token ids to predict at masked positions, -100 elsewhere. The loss is the mean over labelled tokens, or
            their sum divided by `num_items_in_batch` when given (as `Trainer` does under gradient accumulation).
        logits_for_labels_only (`bool`, defaults to `False`):
            A pretraining speed-up: run the LM head only where `labels != -100` (about 15% of positions under MLM)
            and return logits of shape `(num_labelled, vocab_size)` in that order. The loss is unchanged. By default
            logits cover every position, as RoBERTa's.
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        sequence_output = outputs.last_hidden_state  # (batch, L, d)
        if logits_for_labels_only:
            if labels is None:
                raise ValueError("`logits_for_labels_only=True` needs `labels` to say which positions to score.")
            labelled = labels != -100
            sequence_output, labels = sequence_output[labelled], labels[labelled]  # (num_labelled, d), (num_labelled,)
        logits = self.lm_head(sequence_output)  # (batch, L, vocab) or (num_labelled, vocab)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring(
    custom_intro="""
    Next-token prediction with RoBERTa's LM head, for a family whose attention can be causal (`is_decoder`).

    There is no key/value cache: `generate` re-reads the whole prefix at every step (`use_cache=False`).
    """
)
class RobertaWithAttentionForCausalLM(RobertaWithAttentionPreTrainedModel, GenerationMixin):
    base_model_class: type[RobertaWithAttentionModel]
    _tied_weights_keys = tied_weights(
        {"lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight", "lm_head.decoder.bias": "lm_head.bias"}
    )

    def __init__(self, config):
        if not config.is_decoder:
            raise ValueError(
                f"{type(self).__name__} needs `is_decoder=True` in its config: a bidirectional encoder sees the "
                "tokens it is asked to predict, so next-token training would learn to copy them."
            )
        super().__init__(config)
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No cache: every step reads the whole prefix. No position_ids either: generate counts from 0, while RoBERTa's
        # embeddings number positions themselves from padding_idx + 1 (skipping padding).
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> CausalLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The input ids (-100 where no loss is wanted); the loss shifts them so position i predicts token i + 1.
        """
        kwargs.pop("use_cache", None)  # no cache to use: every call reads the whole prefix
        kwargs.pop("past_key_values", None)
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (batch, L, vocab)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


@auto_docstring(
    custom_intro="""
    The family's bare model with RoBERTa's sequence classification/regression head on top (a linear layer over the first
    token's output), e.g. for GLUE tasks.
    """
)
class RobertaWithAttentionForSequenceClassification(
    RobertaWithAttentionPreTrainedModel, RobertaForSequenceClassification
):
    base_model_class: type[RobertaWithAttentionModel]
    accepts_loss_kwargs = False

    def __init__(self, config):
        RobertaWithAttentionPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.classifier = RobertaClassificationHead(config)
        self.post_init()


@auto_docstring(
    custom_intro="""
    The family's bare model with RoBERTa's multiple choice head on top (a linear layer over the pooled output and a
    softmax), e.g. for RocStories/SWAG tasks.
    """
)
class RobertaWithAttentionForMultipleChoice(RobertaWithAttentionPreTrainedModel, RobertaForMultipleChoice):
    base_model_class: type[RobertaWithAttentionModel]
    accepts_loss_kwargs = False

    def __init__(self, config):
        RobertaWithAttentionPreTrainedModel.__init__(self, config)
        self.roberta = self.base_model_class(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()


@auto_docstring(
    custom_intro="""
    The family's bare model with RoBERTa's token classification head on top (a linear layer over every token's output),
    e.g. for named-entity recognition.
    """
)
class RobertaWithAttentionForTokenClassification(RobertaWithAttentionPreTrainedModel, RobertaForTokenClassification):
    base_model_class: type[RobertaWithAttentionModel]
    accepts_loss_kwargs = False

    def __init__(self, config):
        RobertaWithAttentionPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        classifier_dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


@auto_docstring(
    custom_intro="""
    The family's bare model with RoBERTa's extractive question answering head on top (a linear layer over every token's
    output computing span start and end logits), e.g. for SQuAD.
    """
)
class RobertaWithAttentionForQuestionAnswering(RobertaWithAttentionPreTrainedModel, RobertaForQuestionAnswering):
    base_model_class: type[RobertaWithAttentionModel]
    accepts_loss_kwargs = False

    def __init__(self, config):
        RobertaWithAttentionPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = self.base_model_class(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


__all__ = [
    "RobertaAttentionWith",
    "RobertaEncoderWith",
    "RobertaLayerWith",
    "RobertaWithAttentionForCausalLM",
    "RobertaWithAttentionForMaskedLM",
    "RobertaWithAttentionForMultipleChoice",
    "RobertaWithAttentionForQuestionAnswering",
    "RobertaWithAttentionForSequenceClassification",
    "RobertaWithAttentionForTokenClassification",
    "RobertaWithAttentionModel",
    "RobertaWithAttentionPreTrainedModel",
    "auto_map_for",
    "check_padding_mask",
]
