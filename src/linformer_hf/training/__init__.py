"""Pretraining and fine-tuning: recipes, data, training, and the commands that run them.

Commands (each runs from an installed package; ``scripts/`` holds thin wrappers):

- ``python -m linformer_hf.training.pretrain``: masked-LM pretraining on `Trainer` (`pretraining.run_pretraining`);
- ``python -m linformer_hf.training.finetune``: sequence classification on `Trainer` (`finetuning.run_finetuning`;
  its steps are the `finetuning_*` modules);
- ``python -m linformer_hf.training.train_tokenizer``: a byte-level BPE tokenizer (`tokenizer.train_bpe_tokenizer`);
- ``python -m linformer_hf.training.transfer``: attention transfer from a teacher into a converted student
  (`transfer.run_transfer`; its parts are the `transfer_*` modules).

Modules: `config` (YAML recipes as dataclasses, ``--section.key`` overrides), `data` (corpus, packing, seeded
masking), `model_setup` (Linformer or the RoBERTa baseline from a recipe), `loop` (the divergence guard of a recipe
and the teardown of a run on `Trainer`), `checkpointing` (the run directory of all three commands: output-directory
policy and lock, checkpoints with their completion marker, resume, pruning; the recipe checked on resume, the update
log), `guards` (divergence and stop signals), `validation` (data and device checks before the first update),
`compiling` (`training.torch_compile`: what is compiled, its checks, the count of compiled graphs), `errors` (the
commands' one-line `error:` report), `corpus`, `tokenizer`, `metrics`.
"""
