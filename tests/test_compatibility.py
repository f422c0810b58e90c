"""The transformers range: folders saved with the package load without it (every family, head and attention), the
range is declared once, and an older transformers gets one line that says what to install.

The load runs here on the installed (newest) release. CI's second environment adds other releases (the floor, and the
last 4.x for the remote code) by listing their environments' python executables in LINFORMER_HF_COMPAT_PYTHONS
(separated by os.pathsep); see .ci/run.
"""

import configparser
import os
import re
import subprocess
import sys
import textwrap

import pytest
import transformers
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError
from packaging.requirements import Requirement
from packaging.version import Version

from linformer_hf.models import compat

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO, "src")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import check_transformers_versions as matrix  # noqa: E402

OTHER_PYTHONS = [path for path in os.environ.get("LINFORMER_HF_COMPAT_PYTHONS", "").split(os.pathsep) if path]


@pytest.fixture(scope="module")
def saved_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("saved")
    jobs = matrix.save_reference_folders(str(root))
    return str(root), jobs


@pytest.fixture(scope="module")
def python_without_the_package(tmp_path_factory):
    """This interpreter's packages and transformers, in a venv where linformer_hf cannot be imported."""
    return matrix.isolated_python(str(tmp_path_factory.mktemp("venv") / "env"))


def python_version_of_transformers(python):
    version = matrix.installed_transformers(python)
    assert version is not None, f"{python} cannot import transformers"
    return Version(version)


def check_loads(python, saved_folders):
    root, jobs = saved_folders
    report = matrix.load_and_compare(python, root)
    assert len(report["results"]) == jobs
    # every head of both families; Linformer under sdpa and eager, Performer under its one (eager) attention
    assert {tuple(result["job"][2:]) for result in report["results"]} == {("sdpa",), ("eager",)}
    # every Auto class each family registers, AutoModelForPreTraining (the masked LM again) included
    from linformer_hf.registration import AUTO_CLASSES

    expected = {(config.model_type, auto) for config, classes in AUTO_CLASSES.items() for auto in classes}
    assert {(result["job"][0].split("-")[0], result["job"][1]) for result in report["results"]} == expected
    assert matrix.failures(report) == []
    return report


def test_saved_folders_load_without_the_package_on_the_installed_release(python_without_the_package, saved_folders):
    report = check_loads(python_without_the_package, saved_folders)
    assert report["transformers"] == transformers.__version__


@pytest.mark.parametrize("python", OTHER_PYTHONS)
def test_saved_folders_load_without_the_package_on_other_releases(python, saved_folders):
    assert python_version_of_transformers(python).release >= Version(compat.REMOTE_CODE_MINIMUM).release
    check_loads(python, saved_folders)


@pytest.mark.parametrize("python", OTHER_PYTHONS)
def test_the_package_imports_exactly_on_the_supported_releases(python):
    """For real on another release: the package imports from the floor up, and below it says what to install."""
    installed = python_version_of_transformers(python)
    env = matrix.clean_env()
    env["PYTHONPATH"] = SRC
    completed = subprocess.run([python, "-c", "import linformer_hf"], capture_output=True, text=True, env=env)
    if installed.release >= Version(compat.PACKAGE_MINIMUM).release:
        assert completed.returncode == 0, completed.stderr[-3000:]
    else:
        assert completed.returncode != 0
        last_line = completed.stderr.strip().splitlines()[-1]
        assert last_line == "ImportError: " + compat.unsupported_transformers_message(
            installed, compat.PACKAGE_MINIMUM, "linformer_hf"
        )


def run_with_transformers_version(version, code, cwd, pythonpath=None):
    """Run `code` in a fresh process whose transformers reports `version` (what compat reads)."""
    script = f"import transformers\ntransformers.__version__ = {version!r}\n" + textwrap.dedent(code)
    env = matrix.clean_env(os.path.join(str(cwd), "modules"))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=cwd)


def test_importing_the_package_below_its_floor_is_one_line_naming_versions_and_the_fix(tmp_path):
    completed = run_with_transformers_version("4.57.6", "import linformer_hf", tmp_path, pythonpath=SRC)
    assert completed.returncode != 0
    error = completed.stderr.strip().splitlines()[-1]
    assert error == (
        f"ImportError: error: linformer_hf needs transformers>={compat.PACKAGE_MINIMUM},<{compat.BELOW}, but "
        f'transformers 4.57.6 is installed; upgrade it with: pip install "transformers>={compat.PACKAGE_MINIMUM},'
        f'<{compat.BELOW}"'
    )
    # the floor itself, its pre-releases and patches pass; the release before it does not
    for version in (f"{compat.PACKAGE_MINIMUM}.0", f"{compat.PACKAGE_MINIMUM}.0rc1", f"{compat.PACKAGE_MINIMUM}.3"):
        assert compat.unsupported_transformers_message(Version(version), compat.PACKAGE_MINIMUM, "x") is None
    assert compat.unsupported_transformers_message(Version("4.99.9"), compat.PACKAGE_MINIMUM, "x") is not None


def test_loading_the_remote_code_below_its_floor_is_one_line_naming_versions_and_the_fix(saved_folders, tmp_path):
    root, _ = saved_folders
    load = f"""
        import importlib.util
        assert importlib.util.find_spec("linformer_hf") is None
        transformers.AutoModelForMaskedLM.from_pretrained({root!r} + "/linformer-AutoModelForMaskedLM",
                                                          trust_remote_code=True)
    """
    # the isolated venv's python: linformer_hf is not importable there
    python = matrix.isolated_python(str(tmp_path / "env"))
    script = "import transformers\ntransformers.__version__ = '4.56.2'\n" + textwrap.dedent(load)
    env = matrix.clean_env(str(tmp_path / "modules"))
    completed = subprocess.run([python, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert completed.returncode != 0
    error = completed.stderr.strip().splitlines()[-1]
    requirement = f"transformers>={compat.REMOTE_CODE_MINIMUM},<{compat.BELOW}"
    assert error == (
        f"ImportError: error: This model's code (trust_remote_code=True) needs {requirement}, but transformers "
        f'4.56.2 is installed; upgrade it with: pip install "{requirement}"'
    )


def test_the_supported_range_is_declared_once():
    """compat.py states the range; setup.cfg, CI and the docs agree with it."""
    setup = configparser.ConfigParser()
    setup.read(os.path.join(REPO, "setup.cfg"))
    requirements = [Requirement(line) for line in setup["options"]["install_requires"].splitlines() if line.strip()]
    (declared,) = [str(r.specifier) for r in requirements if r.name == "transformers"]
    assert set(declared.split(",")) == {f">={compat.PACKAGE_MINIMUM}", f"<{compat.BELOW}"}
    (torch_declared,) = [str(r.specifier) for r in requirements if r.name == "torch"]
    assert torch_declared == f">={compat.TORCH_MINIMUM}"

    with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as handle:
        ci = handle.read()
    assert "compat.PACKAGE_MINIMUM" in ci and "compat.REMOTE_CODE_MINIMUM" in ci  # CI installs what compat states

    with open(os.path.join(REPO, "docs", "compatibility.md"), encoding="utf-8") as handle:
        docs = handle.read()
    assert f"transformers>={compat.PACKAGE_MINIMUM},<{compat.BELOW}" in docs
    assert f"transformers>={compat.REMOTE_CODE_MINIMUM},<{compat.BELOW}" in docs
    assert f"| torch | `>={compat.TORCH_MINIMUM}`" in docs
    # every release of the measured matrix is a row of the docs' table
    for version in matrix.DEFAULT_VERSIONS:
        assert re.search(rf"^\| {re.escape(version)} \|", docs, re.MULTILINE), version


@pytest.mark.skipif(compat.STRICT_CONFIGS, reason="dataclass configs (5.4+): @strict validates; CI's floor runs this")
def test_plain_configs_validate_as_strict_ones():
    """Below 5.4 configs are plain classes: compat.config_class gives them the checks @strict gives from 5.4."""
    from linformer_hf import LinformerConfig, PerformerConfig

    with pytest.raises(StrictDataclassFieldValidationError, match="'sharing' expected one of"):
        LinformerConfig(sharing="sideways")
    with pytest.raises(StrictDataclassClassValidationError, match="projected_length"):
        LinformerConfig(max_sequence_length=16, projected_length=32)
    with pytest.raises(StrictDataclassFieldValidationError, match="'kernel' expected one of"):
        PerformerConfig(kernel="cosine")
    config = PerformerConfig()
    with pytest.raises(StrictDataclassFieldValidationError, match="num_random_features"):
        config.num_random_features = "many"
    config = LinformerConfig(max_sequence_length=64, projected_length=[8, 16], num_hidden_layers=2)
    assert config.max_position_embeddings == 66 and config.sharing == "headwise"
    assert LinformerConfig.from_dict(config.to_dict()).projected_length == [8, 16]
    assert PerformerConfig(kernel="relu").kernel_epsilon == 1e-3
