"""The shell scripts of experiments/: each parses, is listed in experiments/README.md, and refuses to start without
the teacher it needs, naming the variable to set (they run for hours; a mistake should show before any work)."""

import glob
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(glob.glob(os.path.join(REPO, "experiments", "*.sh")))


def test_every_script_is_listed_in_the_experiments_readme():
    with open(os.path.join(REPO, "experiments", "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    assert SCRIPTS
    for script in SCRIPTS:
        assert f"`{os.path.basename(script)}`" in readme, script


@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_every_script_parses(script):
    result = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "script, variable",
    [("gpu_evidence.sh", "MINILM"), ("distillation_evidence.sh", "MINILM"), ("pretrained_evidence.sh", "TEACHER")],
)
def test_a_script_without_its_teacher_stops_before_any_work_and_names_the_variable(script, variable, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MINILM", "TEACHER")}
    env["WORK"] = str(tmp_path / "work")
    result = subprocess.run(
        ["bash", os.path.join(REPO, "experiments", script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode != 0
    assert variable in result.stderr
    assert not os.path.exists(env["WORK"])  # nothing was written


@pytest.mark.parametrize(
    "setting, named",
    [
        ("VARIANT_TASK=mnli", "VARIANT_TASK must be sst2, qnli or imdb"),
        ("VARIANT_RUNS=k128-typo", "VARIANT_RUNS"),
        ("PROJECTION_INIT=stride", "PROJECTION_INIT must be neighbour_average, strided or random"),
    ],
)
def test_the_variants_phase_refuses_a_bad_setting_before_any_work(setting, named, tmp_path):
    name, value = setting.split("=")
    env = dict(os.environ, TEACHER=str(tmp_path / "no-teacher"), WORK=str(tmp_path / "work"), **{name: value})
    result = subprocess.run(
        ["bash", os.path.join(REPO, "experiments", "pretrained_evidence.sh"), "variants"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert named in result.stderr
    # no conversion, transfer or fine-tune was started
    assert not os.path.exists(env["WORK"]) or os.listdir(env["WORK"]) == []


@pytest.mark.parametrize("parallel", ["0", "four", "-2"])
def test_the_gpu_script_refuses_a_parallelism_that_would_hang_or_fail(parallel, tmp_path):
    env = dict(os.environ, MINILM=str(tmp_path), WORK=str(tmp_path / "work"), PARALLEL=parallel)
    result = subprocess.run(
        ["bash", os.path.join(REPO, "experiments", "gpu_evidence.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert "PARALLEL must be the number of runs at once" in result.stderr
    assert not os.path.exists(env["WORK"])


def test_the_variants_phase_accepts_every_projection_init_the_converter_knows(tmp_path):
    """The script checks PROJECTION_INIT itself (a typo should fail before a teacher's fine-tune, not after); its list
    must stay the package's."""
    from linformer_hf.conversion import PROJECTION_INITS

    for init in PROJECTION_INITS:
        env = dict(
            os.environ, TEACHER=str(tmp_path), WORK=str(tmp_path / init), PROJECTION_INIT=init, VARIANT_TASK="mnli"
        )
        result = subprocess.run(
            ["bash", os.path.join(REPO, "experiments", "pretrained_evidence.sh"), "variants"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        # past the PROJECTION_INIT check, stopped by the next one
        assert "PROJECTION_INIT" not in result.stderr, (init, result.stderr)
        assert "VARIANT_TASK must be" in result.stderr, (init, result.stderr)


def _shell_function(script: str, name: str) -> str:
    with open(os.path.join(REPO, "experiments", script), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}()"))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    return "\n".join(lines[start : end + 1])


@pytest.mark.parametrize(
    "function, holds, flags",
    [
        ("continue_transfer", [], ""),
        ("continue_transfer", ["distillation.json"], "--overwrite_output_dir"),
        ("continue_transfer", ["distillation.json", "checkpoint-50/"], "--resume latest"),
        ("continue_transfer", ["checkpoints/step_0000050/"], "--resume latest"),
        ("continue_finetune", [], ""),
        ("continue_finetune", ["results.json"], "--training.overwrite_output_dir true"),
        ("continue_finetune", ["checkpoint-8/"], "--training.resume_from_checkpoint latest"),
    ],
)
def test_a_killed_run_is_resumed_from_the_checkpoints_its_command_writes(function, holds, flags, tmp_path):
    """pretrained_evidence.sh decides per folder whether to resume or start over: a transfer killed after its
    checkpoint-N (the Trainer's layout) must be resumed, not overwritten."""
    folder = tmp_path / "run"
    for entry in holds:
        path = folder / entry
        if entry.endswith("/"):
            path.mkdir(parents=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
    source = _shell_function("pretrained_evidence.sh", function)
    result = subprocess.run(
        ["bash", "-c", f'{source}\n{function} "$1"', "bash", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == flags
