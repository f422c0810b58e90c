"""Shared helpers for the training tests: tiny recipes on the real data in ../shared/data."""

import contextlib
import os
import signal
import socket
import subprocess
import sys

from prefork import python_executable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "..", "shared", "data")
WIKITEXT = os.path.join(DATA, "wikitext-2", "valid.txt")
SST2_TRAIN = os.path.join(DATA, "sst2", "train.tsv")
SST2_DEV = os.path.join(DATA, "sst2", "dev.tsv")
IMDB = os.path.join(DATA, "imdb", "train.csv")
TINY_MODEL = os.path.join(REPO, "configs", "model", "tiny_test.yaml")

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
for key, value in OFFLINE_ENV.items():
    os.environ.setdefault(key, value)


def script_env(**extra):
    env = dict(os.environ)
    env.update(OFFLINE_ENV)
    src = os.path.join(REPO, "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_script(args, timeout=300, **env):
    return subprocess.run(
        [python_executable(), *args], cwd=REPO, env=script_env(**env), capture_output=True, text=True, timeout=timeout
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_pretrain_overrides(tokenizer_dir, output_dir, **training):
    """Overrides (as a flat dict) for a tiny pretraining run on WikiText-2 validation text."""
    out = {
        "model.model_type": "linformer",
        "model.config_file": TINY_MODEL,
        "tokenizer.name_or_path": str(tokenizer_dir),
        "data.train_files": [WIKITEXT],
        "data.block_size": 64,
        "data.validation_split_percentage": 5,
        "data.max_eval_blocks": 48,
        "training.output_dir": str(output_dir),
        "training.per_device_train_batch_size": 8,
        "training.per_device_eval_batch_size": 16,
        "training.warmup_steps": 2,
        "training.logging_steps": 1,
        "training.learning_rate": 2e-3,
        "training.max_grad_norm": 1.0,
    }
    out.update({f"training.{k}": v for k, v in training.items()})
    return out


def sst2_head(path, rows: int, label: int | None = None) -> str:
    """The header and the first `rows` SST-2 training sentences written to `path` (reading all 67,349 would dominate a
    test), every label replaced by `label` when given; returns the path."""
    with open(SST2_TRAIN, encoding="utf-8") as fh:
        header, *lines = [line for _, line in zip(range(rows + 1), fh)]
    if label is not None:
        lines = [line.rsplit("\t", 1)[0] + f"\t{label}\n" for line in lines]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(header + "".join(lines))
    return str(path)


def tiny_finetune_overrides(pretrained_dir, train_file, output_dir, overrides: dict | None = None) -> dict:
    """Overrides (as a flat dict) for a tiny SST-2 fine-tuning run scored on SST-2 dev, updated with `overrides`."""
    out = {
        "model.pretrained": str(pretrained_dir),
        "data.task": "sst2",
        "data.train_file": str(train_file),
        "data.validation_file": SST2_DEV,
        "data.max_seq_length": 32,
        "training.output_dir": str(output_dir),
    }
    return {**out, **(overrides or {})}


def as_argv(overrides):
    import json

    argv = []
    for key, value in overrides.items():
        argv += [f"--{key}", json.dumps(value) if not isinstance(value, str) else value]
    return argv


def load_script(name):
    """Import scripts/<name>.py (or, for the research commands, experiments.<name>) as a module, to call its
    main(argv) in-process (faster than a subprocess)."""
    import importlib
    import importlib.util

    if not os.path.exists(os.path.join(REPO, "scripts", f"{name}.py")):
        return importlib.import_module(f"experiments.{name}")
    spec = importlib.util.spec_from_file_location(f"script_{name}", os.path.join(REPO, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_hub_dataset(folder, splits: dict, config_name: str | None = None, features=None) -> str:
    """A dataset repository's layout, as the Hub serves one: ``{split}-0000i-of-0000n.parquet`` shards (under
    ``config_name/`` when given) and a README whose YAML declares every config in the folder and its splits.
    ``splits`` maps a split to its shards, each a list of rows (dicts); ``features`` (datasets.Features) types them,
    e.g. a ClassLabel with the label names, kept in the parquet metadata as the Hub's files keep it. Call it once per
    config of a multi-config dataset. Returns the folder, which ``load_dataset(folder, config_name)`` reads."""
    import glob

    from datasets import Dataset

    where = os.path.join(folder, config_name) if config_name else str(folder)
    os.makedirs(where, exist_ok=True)
    for split, shards in splits.items():
        for i, rows in enumerate(shards):
            name = f"{split}-{i:05d}-of-{len(shards):05d}.parquet"
            Dataset.from_list(rows, features=features).to_parquet(os.path.join(where, name))
    entries = []
    configs = [c for c in sorted(os.listdir(folder)) if os.path.isdir(os.path.join(folder, c))]
    for config, prefix in [(c, f"{c}/") for c in configs] + [("default", "")]:
        split_names = sorted({os.path.basename(f).split("-0")[0] for f in glob.glob(f"{folder}/{prefix}*.parquet")})
        if split_names:
            lines = [f"  - split: {split}\n    path: {prefix}{split}-*.parquet" for split in split_names]
            entries.append(f"- config_name: {config}\n  data_files:\n" + "\n".join(lines))
    with open(os.path.join(folder, "README.md"), "w") as fh:
        fh.write("---\nconfigs:\n" + "\n".join(entries) + "\n---\n")
    return str(folder)


def hub_cache_model(cache, repo_id: str, folder, names=None, commit: str = "0" * 40) -> str:
    """``folder``'s files (or ``names`` of them) laid out in the Hub cache ``cache`` as a download of ``repo_id`` leaves
    them (``models--<org>--<name>/refs/main``, ``snapshots/<commit>/``: huggingface_hub's layout, plain files for the
    blobs' links), so that offline (the tests' default) transformers and huggingface_hub find ``repo_id`` there once
    ``huggingface_hub.constants.HF_HUB_CACHE`` is ``cache``. Returns the snapshot folder."""
    import shutil

    repo = os.path.join(str(cache), "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as fh:
        fh.write(commit)
    snapshot = os.path.join(repo, "snapshots", commit)
    os.makedirs(snapshot, exist_ok=True)
    for name in names if names is not None else os.listdir(folder):
        shutil.copy(os.path.join(str(folder), name), snapshot)
    return snapshot


def save_tiny_pretrained_linformer(out, n: int = 256, k: int = 32, layers: int = 2, **config) -> str:
    """A tiny LinformerForMaskedLM (width 32) and a byte-level BPE tokenizer of 1,000 tokens trained on WikiText-2,
    saved in ``out`` as pretraining saves them: a model folder to fine-tune. Returns the folder."""
    import torch

    from linformer_hf import LinformerConfig, LinformerForMaskedLM
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    tok = train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(out), vocab_size=1000, model_max_length=n)
    torch.manual_seed(0)
    settings = dict(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        max_sequence_length=n,
        projected_length=k,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    settings.update(config)
    LinformerForMaskedLM(LinformerConfig(**settings)).save_pretrained(out)
    return str(out)


def stoppable_child(folder, exit_code: int = 0, stops_after: int = 1):
    """A script standing in for a training run, started as ``python child.py NAME``: it writes "NAME started" to the
    events file, and on each SIGTERM or SIGINT "NAME got SIGxxx", exiting with ``exit_code`` at the ``stops_after``-th;
    unstopped, it sleeps 60 s and writes "NAME ran to its end". Returns (script, events)."""
    events, child = folder / "events", folder / "child.py"
    child.write_text(
        "import signal, sys, time\n"
        f"events = open({str(events)!r}, 'a')\n"
        "got = []\n"
        "def stop(signum, frame):\n"
        "    got.append(signum)\n"
        "    events.write(f'{sys.argv[1]} got {signal.Signals(signum).name}\\n'); events.flush()\n"
        f"    if len(got) >= {stops_after}:\n"
        f"        sys.exit({exit_code})\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "events.write(f'{sys.argv[1]} started\\n'); events.flush()\n"
        "deadline = time.monotonic() + 60\n"
        "while time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "events.write(f'{sys.argv[1]} ran to its end\\n')\n"
    )
    return child, events


def signal_this_process_once_started(events, *signums: int) -> None:
    """From a thread: send each of ``signums`` to this (the driver's) process once the child has written that it
    started, and each later one once the child has written that it got the one before."""
    import signal
    import threading
    import time

    def send():
        for i, signum in enumerate(signums):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                events.exists() and events.read_text().count("\n") >= 1 + i and "started" in events.read_text()
            ):
                time.sleep(0.05)
            os.kill(os.getpid(), signal.Signals(signum))

    threading.Thread(target=send, daemon=True).start()


@contextlib.contextmanager
def claimed_by_another_driver(folder, *names: str):
    """For the block's length, a process standing in for another experiment driver that is running the runs
    ``names`` of ``folder`` (`experiments.child_process.claim_runs`); killed at the end, as a driver may be."""
    import sys

    script = (
        "import sys\n"
        "from experiments.child_process import claim_runs\n"
        "with claim_runs(sys.argv[1], sys.argv[2:]):\n"
        "    print('claimed', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    driver = subprocess.Popen(
        [sys.executable, "-c", script, str(folder), *names],
        cwd=REPO,
        env=script_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout.readline().strip() == "claimed"
        yield driver
    finally:
        driver.kill()
        driver.wait()


LOCK_HOLDER = """
import sys, time
from linformer_hf.training.checkpointing import RunLock
RunLock.acquire(sys.argv[1])
print("locked", flush=True)
time.sleep(600)
"""


@contextlib.contextmanager
def lock_held_by_another_process(out):
    """A live process holding `out`'s run lock, SIGKILLed (its lock left behind, as a crash leaves it) on exit."""
    holder = subprocess.Popen(  # a real interpreter: the lock names its pid
        [sys.executable, "-c", LOCK_HOLDER, str(out)], env=script_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
