"""The malloc setting the training guide gives for CPU training: glibc honours it (large blocks stop being faulted in
again at every step) and it changes no result."""

import glob
import json
import os
import platform
import re
import subprocess
import sys

import pytest

from experiments import cpu_malloc
from experiments.cpu_malloc import SETTINGS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUNABLES = SETTINGS["heap (mmap_max=0, trim_threshold=16 GiB)"]

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="GLIBC_TUNABLES is glibc's"
)

# Three training steps of a tiny Linformer whose logits (2 x 2,048 positions x 4,000 tokens, 66 MB) are over glibc's
# largest mmap threshold (32 MB); then a 64 MB block allocated and freed five times, counting the page faults.
CHILD = """
import json, resource, torch
from linformer_hf import LinformerConfig, LinformerForMaskedLM
torch.manual_seed(0)
model = LinformerForMaskedLM(LinformerConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=64, vocab_size=4000, max_sequence_length=2048, projected_length=16))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(5, 4000, (2, 2048))
losses = []
for _ in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); optimizer.step(); optimizer.zero_grad()
    losses.append(loss.item())
torch.ones(2**24).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    torch.ones(2**24).sum()  # (16 M,) float32: 64 MB
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"losses": losses, "faults": faults}))
"""


def run_child(tunables):
    # glibc's malloc on 4 KB pages alone: no tunables, MALLOC_* variables or PyTorch's huge-page allocation from the
    # caller (`python -m experiments.long_document` sets THP_MEM_ALLOC_ENABLE=1 for its own process and children)
    ignored = ("GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE")
    env = {k: v for k, v in os.environ.items() if k not in ignored and not k.startswith("MALLOC_")}
    env.update({"OMP_NUM_THREADS": "1", **({"GLIBC_TUNABLES": tunables} if tunables else {})})
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, capture_output=True, text=True, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_docs_give_the_setting_that_was_measured():
    documented = {}
    for page in ["README.md", *glob.glob("docs/**/*.md", root_dir=REPO, recursive=True)]:
        with open(os.path.join(REPO, page), encoding="utf-8") as fh:
            for setting in re.findall(r"GLIBC_TUNABLES=([^\s`]+)", fh.read()):
                documented.setdefault(setting, []).append(page)
    assert "docs/training.md" in documented.get(TUNABLES, []), "the training guide gives the setting"
    assert list(documented) == [TUNABLES], f"other settings than experiments/cpu_malloc.py's: {documented}"


def test_the_setting_keeps_large_blocks_mapped_and_changes_no_result():
    default, heap = run_child(None), run_child(TUNABLES)
    # by default each 64 MB block is a fresh mmap: 16,384 pages faulted in, five times
    assert default["faults"] > 5 * 10_000, default
    assert heap["faults"] < default["faults"] / 20, (heap, default)  # a misspelt tunable is ignored silently
    assert heap["losses"] == default["losses"]  # bit for bit: malloc decides where tensors live, not what they hold


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--steps", "-1"]])
def test_counts_below_one_are_refused_by_the_parser_before_any_run(argv, capsys, monkeypatch):
    monkeypatch.setattr(cpu_malloc.subprocess, "run", lambda *a, **k: pytest.fail("a child ran"))
    with pytest.raises(SystemExit) as stop:
        cpu_malloc.main(argv)
    assert stop.value.code == 2
    assert f"argument {argv[0]}: must be >= 1, got {argv[1]}" in capsys.readouterr().err


def test_a_failed_child_is_one_line_naming_the_model_and_the_setting(monkeypatch):
    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback ...\nRuntimeError: out of memory\n")
    monkeypatch.setattr(cpu_malloc.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(SystemExit) as stop:
        cpu_malloc.main(["--rounds", "1", "--steps", "1"])
    assert stop.value.code == (
        "error: the roberta-sdpa n=512 step under malloc setting 'default' failed (1): RuntimeError: out of memory"
    )


def test_only_the_named_shapes_run_and_the_table_shows_resident_memory_after_the_warm_up_and_the_last_step(
    monkeypatch, capsys
):
    ran = []

    def fake_run(cmd, env, **kwargs):
        shape = json.loads(cmd[cmd.index("--child") + 1])
        ran.append((shape["model_type"], env.get("GLIBC_TUNABLES")))
        grown = 9.0 if env.get("GLIBC_TUNABLES") else 2.8
        result = dict(step_s=1.0, user_s=1.0, sys_s=0.1, faults=10, max_rss_gb=grown, rss_warm_gb=2.0,
                      rss_last_gb=grown, last_loss=1.5)  # fmt: skip
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(result) + "\n", stderr="")

    monkeypatch.setattr(cpu_malloc.subprocess, "run", fake_run)
    cpu_malloc.main(["--rounds", "1", "--steps", "1", "--models", "bert (all-MiniLM-L6-v2) n=512"])
    assert ran == [("bert", None), ("bert", TUNABLES)]
    out = capsys.readouterr().out
    assert "bert (all-MiniLM-L6-v2) n=512 (8,192 tokens a step" in out and "roberta" not in out
    assert "| 2.00 -> 2.80 |" in out and "| 2.00 -> 9.00 |" in out


def test_each_step_draws_a_fresh_mask_the_same_under_every_setting(monkeypatch):
    """The LM head's blocks must change size from step to step, as in pretraining (a fixed mask hid the heap's
    growth), while every setting sees the same masks (so the losses can be compared bit for bit)."""
    import torch

    counts = []
    real_where = torch.where

    def counting_where(condition, *args):
        counts.append(int(condition.sum()))
        return real_where(condition, *args)

    monkeypatch.setattr(torch, "where", counting_where)
    tiny = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=300)
    first = cpu_malloc.child("bert", n=64, k=None, tokens=256, width=tiny, steps=3)
    masks_first, counts[:] = list(counts), []
    second = cpu_malloc.child("bert", n=64, k=None, tokens=256, width=tiny, steps=3)
    assert len(masks_first) == 6 and len(set(masks_first)) > 1  # 3 warm-up + 3 timed steps, masks of several sizes
    assert counts == masks_first and first["last_loss"] == second["last_loss"]
    assert first["rss_warm_gb"] > 0 and first["rss_last_gb"] > 0
