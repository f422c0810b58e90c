"""How this project studies its models: replication of the paper, attention spectrum, FAVOR+ error, long documents
and long inputs, probes, int8, GPU checks. Not installed with `linformer_hf`: run from a checkout's root, e.g.
`python -m experiments.replication --plan configs/replication/quick.yaml` (see experiments/README.md)."""
