"""The model families: each subpackage holds one attention family's configuration and modeling files.

The two files of a family are self-contained apart from `transformers` (they are copied beside saved weights for
`trust_remote_code` loading), and everything shared by the families is imported from transformers' RoBERTa.
"""

from .lengths import max_input_length

__all__ = ["max_input_length"]
