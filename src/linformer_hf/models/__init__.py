"""The model families, one folder so that each family's files can import their shared siblings.

`configuration_<family>.py` and `modeling_<family>.py` are copied beside saved weights for `trust_remote_code`
loading, together with the sibling files they import relatively (transformers copies `from .x import` siblings,
not parent-relative imports): they may import only `transformers`, `torch` and each other.
Each family's modeling file holds its whole model, from the bare model down to the attention, around RoBERTa's
blocks imported from transformers; `compat.py` holds what differs between transformers releases.
"""

from .lengths import max_input_length

__all__ = ["max_input_length"]
