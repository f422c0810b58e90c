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
"""Every difference between the transformers releases the model code runs on, in one place.

The model files are copied beside saved weights for `trust_remote_code=True`, and this file with them (a sibling
import), so a folder saved with the newest transformers loads wherever its user is: the remote code from
`REMOTE_CODE_MINIMUM` (the last 4.x) through every 5.x, the installed package from `PACKAGE_MINIMUM`. Everything is
gated on the installed version, never on a failed import. Below the floor, importing this module raises one line
that names the installed version, the version needed and the pip command.

The differences, one line each (each is named again, with the same words, above the code that handles it):
- configs: from 5.4 dataclasses validated by huggingface_hub's `@strict`; before, plain classes with an `__init__`.
- auto_docstring: documents models from 5.0 and configs from 5.4; before, 4.x cannot read `X | None` annotations.
- init functions: `transformers.initialization` (skips loaded tensors) from 5.0; before, torch's own.
- attention lookup: `ALL_ATTENTION_FUNCTIONS.get_interface` from 5.1; before, indexing by name.
- forward decorators: `merge_with_config_defaults` and `capture_outputs` from 5.2; before, `check_model_inputs`.
- loaded-keys hook: `_adjust_missing_and_unexpected_keys(loading_info)` from 5.1, `(missing, unexpected)` in 5.0,
  `(missing, unexpected, loading_base_into_head)` in 4.x.
- tied weights: `_tied_weights_keys` a {target: source} dict from 5.0; before, a list of the tied keys.
- tied weights of remote code: 5.3 alone leaves them untied on the meta device (fixed in 5.4).
- attention-backend switch: allowed only where the modeling file spells the attention call as the release expects:
  `ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]` in 4.57 and 5.0, `.get_interface(` in 5.24.

This file may import only `torch`, `transformers` and their dependencies (`packaging`, `huggingface_hub`).
"""

import functools
import types
import typing

import transformers
from packaging.version import Version

# The one statement of the supported range: setup.cfg, CI and docs/compatibility.md are checked against it by
# tests/test_compatibility.py. The upper bound is the next major release, whose changes no one can test yet.
PACKAGE_MINIMUM = "5.0"
REMOTE_CODE_MINIMUM = "4.57"
BELOW = "6"

TRANSFORMERS_VERSION = Version(transformers.__version__)


def unsupported_transformers_message(installed: Version, minimum: str, what: str) -> str | None:
    """The one-line error for transformers `installed` where `what` needs `minimum`, or None when it suffices."""
    if installed.release >= Version(minimum).release:  # release only: 5.0.0.dev0 and 5.0.0rc1 count as 5.0
        return None
    requirement = f"transformers>={minimum},<{BELOW}"
    return (
        f"error: {what} needs {requirement}, but transformers {installed} is installed; "
        f'upgrade it with: pip install "{requirement}"'
    )


def check_transformers(minimum: str, what: str, installed: Version = TRANSFORMERS_VERSION) -> None:
    message = unsupported_transformers_message(installed, minimum, what)
    if message is not None:
        raise ImportError(message)


# Imported as part of the installed package (linformer_hf.models.compat) the package's floor applies; copied beside
# saved weights (transformers_modules.<folder>.compat), the remote code's.
if __name__.startswith("linformer_hf."):
    check_transformers(PACKAGE_MINIMUM, "linformer_hf")
else:
    check_transformers(REMOTE_CODE_MINIMUM, "This model's code (trust_remote_code=True)")

# Checked only once the floor is: below it, these imports are what would fail.
import torch  # noqa: E402
from huggingface_hub.dataclasses import strict, type_validator  # noqa: E402
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError  # noqa: E402
from transformers import PretrainedConfig as _PretrainedConfig  # noqa: E402
from transformers import RobertaConfig as _RobertaConfig  # noqa: E402
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as _ALL_ATTENTION_FUNCTIONS  # noqa: E402
from transformers.utils import auto_docstring as _auto_docstring  # noqa: E402

STRICT_CONFIGS = TRANSFORMERS_VERSION >= Version("5.4")

# torch.nn.Buffer (a buffer declared by assignment, as transformers' models declare theirs) is torch's from 2.5; every
# transformers release above accepts an older torch, so this is said here, once, as the floors above are.
TORCH_MINIMUM = "2.5"
if Version(torch.__version__).release < Version(TORCH_MINIMUM).release:
    raise ImportError(
        f"error: this model's code needs torch>={TORCH_MINIMUM} (torch.nn.Buffer), but torch {torch.__version__} is "
        f'installed; upgrade it with: pip install "torch>={TORCH_MINIMUM}"'
    )


# auto_docstring: documents models from 5.0 and configs from 5.4; before, 4.x cannot read `X | None` annotations.
def auto_docstring(obj=None, **options):
    """transformers' `auto_docstring` (same arguments) where the installed release can document `obj`: models and
    their forwards from 5.0 (4.x cannot read `X | None` annotations), configs from 5.4 (it refuses them before). On
    earlier releases the docstring stays as written, with `custom_intro` above it."""

    def decorate(obj):
        is_config = isinstance(obj, type) and issubclass(obj, _PretrainedConfig)
        if TRANSFORMERS_VERSION >= Version("5.4" if is_config else "5.0"):
            return _auto_docstring(obj, **options)
        obj.__doc__ = "\n".join(text.strip("\n") for text in (options.get("custom_intro"), obj.__doc__) if text)
        return obj

    return decorate if obj is None else decorate(obj)


# configs: from 5.4 dataclasses validated by huggingface_hub's `@strict`; before, plain classes with an `__init__`.
if STRICT_CONFIGS:
    RobertaConfig = _RobertaConfig
    config_class = strict
else:

    class RobertaConfig(_RobertaConfig):
        """RoBERTa's config with the hooks a family's config overrides, which dataclass configs (5.4) introduced."""

        def __post_init__(self, **kwargs):
            pass

        def validate_architecture(self):
            pass

    def _field_type(hint):
        # `int | None`: older huggingface_hub's type_validator knows only typing.Union
        return typing.Union[typing.get_args(hint)] if isinstance(hint, types.UnionType) else hint  # noqa: UP007

    def config_class(cls):
        """What `@strict` gives a dataclass config from 5.4, for the plain config classes before: keyword arguments
        for the class's own annotated fields (defaults from the class body), then `__post_init__`, then validation,
        with `@strict`'s errors: a field's type (the allowed values of a Literal too, also on assignment) raises
        `StrictDataclassFieldValidationError`, `validate_architecture` `StrictDataclassClassValidationError`."""
        annotations = cls.__dict__.get("__annotations__", {})
        defaults = {name: cls.__dict__[name] for name in annotations if name in cls.__dict__}
        field_types = {name: _field_type(hint) for name, hint in typing.get_type_hints(cls).items() if name in defaults}
        parent_init = cls.__mro__[1].__init__

        def check_field(name, value):
            try:
                type_validator(name, value, field_types[name])
            except (TypeError, ValueError) as err:
                raise StrictDataclassFieldValidationError(field=name, cause=err) from err

        @functools.wraps(parent_init)
        def __init__(self, **kwargs):
            for name, default in defaults.items():
                kwargs.setdefault(name, list(default) if isinstance(default, list) else default)
            self._fields_unchecked = True  # the parent's __init__ and __post_init__ may pass through unset values
            parent_init(self, **kwargs)
            self.__post_init__()
            del self._fields_unchecked
            self.validate()

        def __setattr__(self, name, value):
            if name in field_types and not self.__dict__.get("_fields_unchecked", False):
                check_field(name, value)
            super(cls, self).__setattr__(name, value)

        def validate(self):
            for name in field_types:
                check_field(name, getattr(self, name))
            try:
                self.validate_architecture()
            except (TypeError, ValueError) as err:
                raise StrictDataclassClassValidationError(validator="validate_architecture", cause=err) from err

        cls.__init__ = __init__
        cls.__setattr__ = __setattr__
        cls.validate = validate
        return cls


# init functions: `transformers.initialization` (skips loaded tensors) from 5.0; before, torch's own.
if TRANSFORMERS_VERSION >= Version("5.0"):
    from transformers import initialization as init
else:

    class init:  # noqa: N801  (stands in for the module `transformers.initialization`)
        """torch's in-place init functions, as `transformers.initialization` names them (4.x runs `_init_weights`
        only for modules that a checkpoint did not fill, so there is no loaded tensor to skip)."""

        normal_ = staticmethod(torch.nn.init.normal_)
        constant_ = staticmethod(torch.nn.init.constant_)
        zeros_ = staticmethod(torch.nn.init.zeros_)
        ones_ = staticmethod(torch.nn.init.ones_)

        @staticmethod
        @torch.no_grad()
        def copy_(tensor, other):
            return tensor.copy_(other)


# attention lookup: `ALL_ATTENTION_FUNCTIONS.get_interface` from 5.1; before, indexing by name.
def attention_function(implementation: str | None, eager: typing.Callable) -> typing.Callable:
    """The attention function registered for `implementation` (`eager` for "eager" or None)."""
    if TRANSFORMERS_VERSION >= Version("5.1"):
        return _ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager)
    return eager if implementation in (None, "eager") else _ALL_ATTENTION_FUNCTIONS[implementation]


# forward decorators: `merge_with_config_defaults` and `capture_outputs` from 5.2; before, `check_model_inputs`.
if TRANSFORMERS_VERSION >= Version("5.2"):
    from transformers.utils.generic import merge_with_config_defaults
    from transformers.utils.output_capturing import capture_outputs

    def model_forward(forward):
        """The base model's forward decorators: config defaults for the output flags, and output capturing."""
        return merge_with_config_defaults(capture_outputs(forward))

else:
    from transformers.utils.generic import check_model_inputs as model_forward


# tied weights: `_tied_weights_keys` a {target: source} dict from 5.0; before, a list of the tied keys.
def tied_weights(tied: dict[str, str]):
    """`_tied_weights_keys` of a head from its {tied key: source key} map (5.0), as the installed release takes it."""
    return tied if TRANSFORMERS_VERSION >= Version("5.0") else list(tied)


class PreTrainedModelCompat:
    """The per-release hooks of a family's `PreTrainedModel` (a mixin placed before it).

    `check_loaded_keys(missing_keys, unexpected_keys, mismatched_keys)` runs once `from_pretrained` has matched a
    checkpoint's tensors to the model, through the hook of the installed release (its signature changed twice).
    `mismatched_keys` is the set of (key, saved shape, model shape) from 5.1 on; before, transformers itself refuses a
    size mismatch, and the set is empty."""

    def check_loaded_keys(self, missing_keys, unexpected_keys, mismatched_keys) -> None:
        pass

    # loaded-keys hook: `(loading_info)` from 5.1, `(missing, unexpected)` in 5.0, `(missing, unexpected, ...)` in 4.x.
    if TRANSFORMERS_VERSION >= Version("5.1"):

        def _adjust_missing_and_unexpected_keys(self, loading_info):
            super()._adjust_missing_and_unexpected_keys(loading_info)
            self.check_loaded_keys(
                loading_info.missing_keys, loading_info.unexpected_keys, loading_info.mismatched_keys
            )

    elif TRANSFORMERS_VERSION >= Version("5.0"):

        def _adjust_missing_and_unexpected_keys(self, missing_keys, unexpected_keys):
            missing_keys, unexpected_keys = super()._adjust_missing_and_unexpected_keys(missing_keys, unexpected_keys)
            self.check_loaded_keys(missing_keys, unexpected_keys, set())
            return missing_keys, unexpected_keys

    else:

        def _adjust_missing_and_unexpected_keys(self, missing_keys, unexpected_keys, *args):
            missing_keys, unexpected_keys = super()._adjust_missing_and_unexpected_keys(
                missing_keys, unexpected_keys, *args
            )
            self.check_loaded_keys(missing_keys, unexpected_keys, set())
            return missing_keys, unexpected_keys

    # tied weights of remote code: 5.3 alone leaves them untied on the meta device (fixed in 5.4).
    if Version("5.3") <= TRANSFORMERS_VERSION < Version("5.4"):

        def mark_tied_weights_as_initialized(self, loading_info):
            # 5.3 drops the tied weights of remote code from the missing keys here, so they are never tied and stay on
            # the meta device (fixed in 5.4, which keeps them): keep them.
            tied_and_missing = loading_info.missing_keys & self.all_tied_weights_keys.keys()
            super().mark_tied_weights_as_initialized(loading_info)
            loading_info.missing_keys |= tied_and_missing

    # attention-backend switch: allowed if the modeling file spells the call as 4.57-5.0 (`[...]`) or 5.24 (`get_`) do.
    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # The families dispatch through `attention_function` on every release, so switching is always possible.
        return True


__all__ = [
    "BELOW",
    "PACKAGE_MINIMUM",
    "REMOTE_CODE_MINIMUM",
    "STRICT_CONFIGS",
    "TORCH_MINIMUM",
    "TRANSFORMERS_VERSION",
    "PreTrainedModelCompat",
    "RobertaConfig",
    "attention_function",
    "auto_docstring",
    "check_transformers",
    "config_class",
    "init",
    "model_forward",
    "tied_weights",
    "unsupported_transformers_message",
]
