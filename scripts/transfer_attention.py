#!/usr/bin/env python
"""Attention transfer: make a converted Linformer behave like its teacher; see linformer_hf.training.transfer.

Example (MiniLM, k = 128 at n = 512, on IMDB reviews):
    python scripts/convert_to_linformer.py /tmp/minilm /tmp/minilm-k128 --projected_length 128 --sharing key_value
    accelerate launch scripts/transfer_attention.py --teacher /tmp/minilm --student /tmp/minilm-k128 \
        --output_dir /tmp/minilm-k128-transferred --dataset csv --data_files ../shared/data/imdb/train.csv \
        --lengths 32 128 512 --layer_steps 300
"""

from linformer_hf.training.transfer import main

if __name__ == "__main__":
    main()
