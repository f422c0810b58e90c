#!/usr/bin/env python
"""Pretrain RoBERTa and Linformer variants under one recipe, fine-tune them, and report (paper Fig. 3 / Table 2).

    python scripts/replicate_paper.py --plan configs/replication/quick.yaml   # < 10 min on 2 CPU cores
    python scripts/replicate_paper.py --plan configs/replication/full.yaml    # the docs/results.md run

Plan keys can be overridden as --key value (YAML values), e.g. --output_dir outputs/replication/try2 --seeds [1,2],
and entries of a mapping with a dotted key, e.g. --pretrain.seed 43.
An interrupted plan resumes: runs whose result file exists are not repeated. Results: <output_dir>/results.json,
results.md and perplexity.png.
"""

import argparse
import sys

import yaml

from linformer_hf.training.config import ConfigError
from linformer_hf.research.replication import load_plan, run_plan


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", required=True, help="configs/replication/*.yaml")
    args, rest = parser.parse_known_args(argv)
    if len(rest) % 2 or not all(key.startswith("--") for key in rest[::2]):
        parser.error("plan overrides come in pairs: --key value")
    overrides = {key[2:]: yaml.safe_load(value) for key, value in zip(rest[::2], rest[1::2])}
    try:
        plan = load_plan(args.plan, overrides)
        results = run_plan(plan)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(open(f"{plan.output_dir}/results.md", encoding="utf-8").read())
    print(f"total {results['total_seconds'] / 60:.1f} min; results in {plan.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
