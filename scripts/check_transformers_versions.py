"""Save with the package, load without it under other transformers releases: the remote-code load matrix.

For each family (Linformer, Performer) and every Auto class it registers (its heads, and AutoModelForPreTraining
giving the masked LM), a tiny model is saved here (the package and the transformers it runs on) with its reference
outputs; then, for each release, a fresh process in an environment with that transformers and without `linformer_hf`
loads every folder with `trust_remote_code=True` (Linformer under "sdpa" and "eager", Performer under "eager", its
only attention) and compares its outputs with the references (fp32).

Each release gets a venv under --envs_dir that reuses this interpreter's installed packages through a .pth line
(torch, numpy ...; the editable install of linformer_hf is not carried over, as a path line does not process that
directory's .pth files) and installs only what differs: transformers==VERSION and the huggingface_hub, tokenizers ...
it requires, from PyPI. The venvs live outside the repository and are reused on a re-run.

Usage:
    python scripts/check_transformers_versions.py --envs_dir /tmp/transformers-envs [--versions 4.57.6 5.0.0 ...]
    python scripts/check_transformers_versions.py --python /path/to/env/bin/python   (an existing environment)
    python scripts/check_transformers_versions.py --envs_dir .ci-envs --versions "5.0.*" --setup_only
        (CI: only build the venvs, a version may be a pip pattern; prints each venv's python, one per line)

Prints one markdown row per release (whether every folder loads, the largest output difference) and exits 1 if any
release fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import venv

# The releases measured: the last 4.x, then 5.x from the first to the newest (docs/compatibility.md).
DEFAULT_VERSIONS = [
    "4.57.6",
    "5.0.0",
    "5.1.0",
    "5.2.0",
    "5.3.0",
    "5.4.0",
    "5.5.4",
    "5.9.0",
    "5.10.4",
    "5.15.1",
    "5.20.2",
    "5.22.2",
    "5.23.0",
]
TOLERANCE = 1e-6  # largest absolute output difference allowed (fp32)

# Runs in the other environment: no linformer_hf importable, only the folders' own code.
_LOAD_SCRIPT = r"""
import importlib.util, json, sys
import torch, transformers
assert importlib.util.find_spec("linformer_hf") is None, "linformer_hf is importable here"
folder_root, result_path = sys.argv[1], sys.argv[2]
references = torch.load(folder_root + "/references.pt")
results = []
for (folder, auto_name, attn), (inputs, expected) in references.items():
    try:
        auto_class = getattr(transformers, auto_name)
        model = auto_class.from_pretrained(folder_root + "/" + folder, trust_remote_code=True, attn_implementation=attn)
        model.eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        assert model.config._attn_implementation == attn, model.config._attn_implementation
        with torch.no_grad():
            outputs = model(**inputs)
        got = outputs.logits if getattr(outputs, "logits", None) is not None else outputs[0]
        difference = (got - expected).abs().max().item() if got.shape == expected.shape else float("inf")
        results.append({"job": [folder, auto_name, attn], "difference": difference, "error": None})
    except Exception as err:  # report every job, not only the first failure
        results.append({"job": [folder, auto_name, attn], "difference": None, "error": f"{type(err).__name__}: {err}"})
assert not any(name.split(".")[0] == "linformer_hf" for name in sys.modules), "linformer_hf was imported"
with open(result_path, "w") as handle:
    json.dump({"transformers": transformers.__version__, "results": results}, handle)
"""


def save_reference_folders(root: str) -> int:
    """Save a tiny model of every family and head under `root`, with `references.pt`: {(folder, Auto class,
    attn_implementation): (inputs, expected output)}. Returns the number of jobs."""
    import torch

    from linformer_hf import LinformerConfig, PerformerConfig
    from linformer_hf.registration import AUTO_CLASSES

    sizes = dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    linformer_sharing = {  # the folders (key_value MLM, layerwise classifier), the other modes elsewhere
        "AutoModelForMaskedLM": dict(sharing="key_value"),
        "AutoModelForSequenceClassification": dict(sharing="layerwise", projection="conv"),
        "AutoModelForTokenClassification": dict(sharing="none"),
    }
    families = [  # every Auto class each family registers: its heads, and AutoModelForPreTraining (the masked LM)
        ("linformer", AUTO_CLASSES[LinformerConfig], ("sdpa", "eager")),
        ("performer", AUTO_CLASSES[PerformerConfig], ("eager",)),
    ]
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 99, (2, 12), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    references = {}
    for family, heads, attentions in families:
        for auto_name, model_class in heads.items():
            if family == "linformer":
                config = LinformerConfig(
                    **sizes, max_sequence_length=16, projected_length=8, **linformer_sharing.get(auto_name, {})
                )
            else:
                config = PerformerConfig(
                    **sizes, num_random_features=16, max_position_embeddings=34, is_decoder="Causal" in auto_name
                )
            torch.manual_seed(0)
            model = model_class(config).eval()
            with torch.no_grad():  # dense random projections and heads: no output is zero by a structured init
                for name, parameter in model.named_parameters():
                    if "projection" in name:
                        parameter.normal_(0.0, 0.5, generator=generator)
            folder = f"{family}-{auto_name}"
            model.save_pretrained(os.path.join(root, folder))
            inputs = {"input_ids": ids, "attention_mask": mask}
            if "MultipleChoice" in auto_name:
                inputs = {key: value[:, None].repeat(1, 3, 1) for key, value in inputs.items()}
            for attn in attentions:
                model.set_attn_implementation(attn)
                with torch.no_grad():
                    outputs = model(**inputs)
                expected = outputs.logits if getattr(outputs, "logits", None) is not None else outputs[0]
                references[(folder, auto_name, attn)] = (inputs, expected)
    torch.save(references, os.path.join(root, "references.pt"))
    return len(references)


def isolated_python(env_dir: str, transformers_version: str | None = None) -> str:
    """The python of a venv at `env_dir` that sees this interpreter's packages but not linformer_hf, with
    `transformers_version` (and what it requires that differs) installed from PyPI; None keeps this interpreter's.
    A version may be a pip pattern ("5.0.*"), then pip runs every time (it does nothing once one is there)."""
    python = os.path.join(env_dir, "bin", "python")
    if not os.path.exists(python):
        venv.EnvBuilder(with_pip=False).create(env_dir)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Every site-packages this interpreter reads, in its order (itself such a venv: its own, then the reused ones);
    # never a source folder on the path, e.g. the checkout's src/.
    reused = [path for path in sys.path if os.path.basename(path) == "site-packages" and os.path.isdir(path)]
    with open(os.path.join(site, "_reuse_dependencies.pth"), "w", encoding="utf-8") as handle:
        handle.write("".join(path + "\n" for path in reused))
    if transformers_version is not None and installed_transformers(python) != transformers_version:
        # pip sees the reused packages as installed: it adds to the venv only what the release needs otherwise, and
        # leaves this interpreter's own environment alone ("outside environment").
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", python, "install", "-q", f"transformers=={transformers_version}"],
            check=True,
            stdout=sys.stderr,  # stdout is for the results (--setup_only: the pythons)
            env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
        )
    return python


def installed_transformers(python: str) -> str | None:
    completed = subprocess.run(
        [python, "-c", "import transformers; print(transformers.__version__)"],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    return completed.stdout.strip() if completed.returncode == 0 else None


def clean_env(modules_cache: str | None = None) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env.update(HF_HUB_OFFLINE="1", PYTHONNOUSERSITE="1", TRANSFORMERS_VERBOSITY="error")
    env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if modules_cache is not None:
        env["HF_MODULES_CACHE"] = modules_cache
    return env


def load_and_compare(python: str, root: str, timeout: int = 600) -> dict:
    """Load every saved folder under `root` with `python` (a fresh process, run from a scratch directory, empty
    modules cache) and return {"transformers": version, "results": [{"job", "difference", "error"}]}."""
    with tempfile.TemporaryDirectory() as scratch:
        result_path = os.path.join(scratch, "result.json")
        completed = subprocess.run(
            [python, "-c", _LOAD_SCRIPT, os.path.abspath(root), result_path],
            cwd=scratch,
            env=clean_env(os.path.join(scratch, "modules")),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if completed.returncode != 0:
            raise RuntimeError(f"The load under {python} failed:\n{completed.stderr[-4000:]}")
        with open(result_path, encoding="utf-8") as handle:
            return json.load(handle)


def failures(report: dict, tolerance: float = TOLERANCE) -> list[str]:
    """One line per job that did not load, or whose outputs differ from the references by more than `tolerance`."""
    lines = []
    for result in report["results"]:
        job = "/".join(result["job"])
        if result["error"] is not None:
            lines.append(f"{job}: {result['error']}")
        elif not result["difference"] <= tolerance:
            lines.append(f"{job}: outputs differ by {result['difference']:.3g} > {tolerance:g}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--envs_dir", help="folder of the per-release venvs (created as needed, reused)")
    where.add_argument("--python", nargs="+", help="existing environments' python executables to load with")
    parser.add_argument("--versions", nargs="+", default=DEFAULT_VERSIONS, help="with --envs_dir: the releases")
    parser.add_argument(
        "--setup_only", action="store_true", help="with --envs_dir: build the venvs, print their python"
    )
    args = parser.parse_args(argv)
    if args.setup_only and args.envs_dir is None:
        parser.error("--setup_only builds the venvs of --envs_dir: give --envs_dir")
    for python in args.python or []:
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            parser.error(f"--python {python} is not an executable file: give an environment's bin/python")
    if args.envs_dir is not None:
        environments = [os.path.join(args.envs_dir, f"transformers-{v.replace('*', 'x')}") for v in args.versions]
    if args.setup_only:
        try:
            pythons = [isolated_python(env, version) for env, version in zip(environments, args.versions, strict=True)]
        except subprocess.CalledProcessError as err:
            print(
                f"error: {err.cmd[-1]} could not be installed (pip's message is above); check the version",
                file=sys.stderr,
            )
            return 2
        print("\n".join(os.path.abspath(python) for python in pythons))
        return 0

    import transformers

    with tempfile.TemporaryDirectory() as root:
        jobs = save_reference_folders(root)
        print(f"saved with transformers {transformers.__version__}: {jobs} jobs (family, head, attention)", flush=True)
        print("| transformers | loads, same outputs | largest difference |\n| --- | --- | --- |")
        failed = False
        for index, environment in enumerate(args.python or environments):
            try:
                python = environment if args.python else isolated_python(environment, args.versions[index])
                report = load_and_compare(python, root)
            except (subprocess.CalledProcessError, RuntimeError) as err:  # this release fails; measure the others
                version = args.versions[index] if args.envs_dir else environment
                print(f"| {version} | no (not loaded) | - |", flush=True)
                print(f"    {str(err).splitlines()[-1] if str(err) else type(err).__name__}", file=sys.stderr)
                failed = True
                continue
            problems = failures(report)
            differences = [r["difference"] for r in report["results"] if r["difference"] is not None]
            largest = f"{max(differences):.2g}" if differences else "-"
            print(f"| {report['transformers']} | {'no' if problems else 'yes'} | {largest} |", flush=True)
            for line in problems[:10]:
                print(f"    {line}", file=sys.stderr)
            failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
