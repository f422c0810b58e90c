"""A dataset by Hub name, or from a local folder in a Hub dataset's layout, read from a cache that is its own.

`datasets` (5.2 measured) caches a local folder whose README declares its configs, as a Hub dataset repository does,
under the folder's name and the README's text alone, not the files it holds. Another folder of the same name and
README, or the same folder rebuilt, is then read from the first one's cache without a word: a folder of 7 rows loads
as the 3 rows of another (`tests/test_hub_datasets.py`). Naming the README's data files explicitly makes the cache key
their paths and modification times, as it is for a folder without a README. Streams and Hub names are read as
`datasets` reads them: a stream is not cached, and a Hub dataset is cached by its commit.
"""

from __future__ import annotations

import os


def load_hub_dataset(path: str, name: str | None = None, **kwargs):
    """`datasets.load_dataset(path, name, **kwargs)`, with a local folder's data files named so that its cache is
    its own (the module docstring)."""
    from datasets import load_dataset, load_dataset_builder

    if os.path.isdir(path) and kwargs.get("data_files") is None and not kwargs.get("streaming"):
        builder = load_dataset_builder(path, name, cache_dir=kwargs.get("cache_dir"))
        kwargs["data_files"] = builder.config.data_files
    return load_dataset(path, name, **kwargs)
