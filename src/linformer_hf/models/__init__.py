"""The model families, one folder so that each family's files can import their shared siblings.

`configuration_<family>.py` and `modeling_<family>.py` are copied beside saved weights for `trust_remote_code`
loading, together with the sibling files they import relatively (transformers copies `from .x import` siblings,
not parent-relative imports): they may import only `transformers`, `torch` and each other.
Each family's modeling file holds its whole model, from the bare model down to the attention, around RoBERTa's
blocks imported from transformers; `compat.py` holds what differs between transformers releases.

Why flat files written by hand rather than transformers' `modular_<family>.py` plus a generated `modeling_<family>.py`:
the generator (`utils/modular_model_converter.py`, in transformers' repository, not in its wheel or sdist) inlines
the parent's code as one release has it, and RoBERTa's code of a current release imports what 4.57-5.1 lack
(`transformers.initialization`, `capture_outputs`, ...), so a generated file could not serve the remote code of every
supported release. These files import RoBERTa's unchanged blocks instead (each release's own) and write out only what
changes (attention, layer, encoder, bare model, heads); what one family's file shares with the other's is a marked copy
(`# Copied from ...`, the convention of transformers' `utils/check_copies.py`), kept equal by tests/test_model_files.py.
"""

from .lengths import max_input_length

__all__ = ["max_input_length"]
