"""Compiled and accelerator execution of both families: torch.compile(fullgraph=True) of a padded training step gives
eager's outputs, gradients and redraw schedule; on CUDA a training step makes no host-device sync."""

import contextlib
import copy
import json
import re

import pytest
import torch
from conftest import kept_for_backward, random_batch, randomize_projections, tiny_config

from linformer_hf import LinformerModel, PerformerConfig, PerformerModel


def build(family: str, num_random_features: int = 12):
    """A tiny model of the family in training mode (no dropout, so eager and compiled runs draw nothing random), with
    no pooler: its parameters would get no gradient in eager mode, and zeros compiled. `"performer-recompute"`: the
    Performer with `recompute_feature_maps=True`."""
    if family == "linformer":
        model = LinformerModel(tiny_config(num_hidden_layers=2), add_pooling_layer=False)
        randomize_projections(model)
    else:
        # A redraw every 2nd training call: the 3 calls below count 1, redraw at 2, count 3.
        config = PerformerConfig(
            vocab_size=99,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=18,
            num_random_features=num_random_features,
            feature_redraw_interval=2,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            recompute_feature_maps=family == "performer-recompute",
        )
        model = PerformerModel(config, add_pooling_layer=False)
    return model.train()


def padded_batch(device="cpu"):
    """Two rows of 16 positions, the second right-padded after 9 tokens."""
    ids = random_batch(2, 16)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    return ids.to(device), mask.to(device)


def training_step(model, ids, mask, run=None):
    """Forward (by `run`, e.g. the compiled model, else `model`) and backward of a loss over real positions; returns
    the output and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    output = (model if run is None else run)(ids, attention_mask=mask).last_hidden_state  # (batch, L, d)
    (output * mask[..., None]).square().mean().backward()
    return output.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def random_features(model):
    return [layer.attention.self.random_features.clone() for layer in model.encoder.layer]


@pytest.mark.parametrize("family", ["linformer", "performer", "performer-recompute"])
def test_fullgraph_compile_of_a_padded_training_step_equals_eager(family):
    """The `aot_eager` backend runs what `inductor` would compile (Dynamo's one graph with fullgraph=True, and
    AOTAutograd's forward and backward graphs) without generating kernels, which takes a minute on the CPU."""
    torch._dynamo.reset()
    eager = build(family)
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, fullgraph=True, backend="aot_eager")
    ids, mask = padded_batch()
    start = random_features(eager) if family != "linformer" else None

    for call in range(3):
        # After the first call the graph is reused as is: the redraw schedule is data, not a guard to recompile on.
        with torch.compiler.set_stance("fail_on_recompile" if call else "default"):
            got, got_grads = training_step(compiled_model, ids, mask, run=compiled)
        expected, expected_grads = training_step(eager, ids, mask)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=f"call {call + 1}")
        assert got_grads.keys() == expected_grads.keys()
        for name, grad in expected_grads.items():
            torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-5, msg=f"call {call + 1}: {name}")
        if family != "linformer":
            assert int(compiled_model.encoder.training_calls) == int(eager.encoder.training_calls) == call + 1
            for got_w, expected_w in zip(random_features(compiled_model), random_features(eager), strict=True):
                assert torch.equal(got_w, expected_w), f"call {call + 1}"
    if family != "linformer":  # the schedule did redraw (at call 2), so the comparison above covers a redraw
        assert all(not torch.equal(a, b) for a, b in zip(random_features(eager), start, strict=True))


def test_a_compiled_step_that_recomputes_keeps_no_feature_map():
    """With `recompute_feature_maps`, the compiled forward hands backward no (batch, heads, L, m) tensor: AOTAutograd
    recomputes FAVOR+ in the backward graph, as eager mode does. Without it, phi(Q) and phi(K) of both layers are
    kept. m = 4 d_h here, so a feature map is larger than anything else the step keeps."""
    feature_map = 2 * 4 * 16 * 32  # (batch, heads, L, m)
    kept_bytes = {}
    for family in ("performer", "performer-recompute"):
        torch._dynamo.reset()
        model = build(family, num_random_features=32)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        ids, mask = padded_batch()
        training_step(model, ids, mask, run=compiled)  # compiles
        kept = kept_for_backward(model, compiled, ids, attention_mask=mask)
        largest = max(t.numel() for t in kept)
        assert (largest < feature_map) == (family == "performer-recompute"), (family, largest)
        kept_bytes[family] = sum(t.untyped_storage().nbytes() for t in kept)
    # two layers, phi(Q) and phi(K) each, fp32
    assert kept_bytes["performer"] - kept_bytes["performer-recompute"] >= 2 * 2 * 4 * feature_map


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("family", ["linformer", "performer"])
def test_a_cuda_training_step_makes_no_host_device_sync(family):
    model = build(family).cuda()
    ids, mask = padded_batch("cuda")
    training_step(model, ids, mask)  # the first Performer call reads the count buffer once (it was never counted)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):  # Performer: calls 2 (a redraw) and 3
            training_step(model, ids, mask)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


# ------------------------------------------------------------------------------------------------------------------
# The training commands' option (`training.torch_compile`, training/compiling.py): what is compiled, how often, and
# that a compiled update equals an eager one. `aot_eager` runs dynamo's and AOTAutograd's graphs without generating
# kernels (seconds, where inductor takes a minute on 2 busy cores); one test compiles with inductor.
# ------------------------------------------------------------------------------------------------------------------


def compiled_by(target: str, model, backend):
    """What runs a training step of `model` under the option `target`: the whole model compiled, or its layers."""
    from linformer_hf.training.compiling import compile_layers

    if target == "model":
        return torch.compile(model, backend=backend)
    compile_layers(model, backend=backend)
    return model


def padded_batch_of_length(length: int, seed: int):
    """Two rows of `length` positions, the second with its last 3 padded."""
    ids = random_batch(2, length, seed=seed)
    mask = torch.ones_like(ids)
    mask[1, length - 3 :] = 0
    return ids, mask


@pytest.mark.parametrize("target", ["model", "layers"])
@pytest.mark.parametrize("family", ["linformer", "performer"])
def test_steps_of_one_shape_compile_once_and_a_new_length_once_more(family, target):
    """Graphs compiled per training step, counted by the backend: the steps at one length compile one graph (with
    `layers`, one for all the layers); the second length compiles once more, as a graph dynamic in the length, which
    every later length reuses."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    model = build(family)
    run = compiled_by(target, model, counter)
    graphs = []
    for step, length in enumerate([16, 16, 16, 12, 12, 10, 7, 16]):
        ids, mask = padded_batch_of_length(length, seed=step)
        training_step(model, ids, mask, run=run)
        graphs.append(counter.frame_count)
    assert graphs == [1, 1, 1, 2, 2, 2, 2, 2]


def test_compiled_layers_under_inductor_give_eager_outputs_and_gradients():
    """The default backend: inductor's generated kernels (C++ on a CPU) for each layer, one compilation for both."""
    from torch._dynamo.utils import counters

    from linformer_hf.training.compiling import compile_layers, compiled_graphs

    torch._dynamo.reset()
    counters.clear()
    eager = build("linformer")
    compiled = copy.deepcopy(eager)
    compile_layers(compiled)
    ids, mask = padded_batch()
    for call in range(2):
        got, got_grads = training_step(compiled, ids, mask)
        expected, expected_grads = training_step(eager, ids, mask)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=f"call {call + 1}")
        assert got_grads.keys() == expected_grads.keys()
        for name, grad in expected_grads.items():
            torch.testing.assert_close(got_grads[name], grad, rtol=1e-3, atol=1e-5, msg=f"call {call + 1}: {name}")
    assert compiled_graphs() == 1


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    """A tiny Linformer (n = 64) and a tokenizer trained on real text, saved as pretraining saves them."""
    from training_utils import WIKITEXT

    from linformer_hf import LinformerForMaskedLM
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    out = tmp_path_factory.mktemp("pretrained")
    tok = train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(out), vocab_size=1000, model_max_length=64)
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tok),
        num_hidden_layers=2,
        max_sequence_length=64,
        projected_length=16,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    LinformerForMaskedLM(config).save_pretrained(out)
    return str(out)


@pytest.fixture
def fresh_accelerate_state():
    """Accelerate keeps its first compile settings (and precision) for the whole process: each run here starts anew."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def weights(folder, auto_class="AutoModelForMaskedLM"):
    import transformers

    return getattr(transformers, auto_class).from_pretrained(folder).state_dict()


def assert_same_weights(got: dict, expected: dict):
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-6, msg=name)


def pretrain(pretrained_dir, output_dir, fresh_state=True, **training):
    """3 updates of the tiny recipe (dropout off, so eager and compiled runs draw nothing random), in a new Accelerate
    state where `fresh_state`."""
    from accelerate.state import AcceleratorState
    from training_utils import tiny_pretrain_overrides

    from linformer_hf.training.config import PretrainRecipe, load_recipe
    from linformer_hf.training.pretraining import run_pretraining

    overrides = tiny_pretrain_overrides(pretrained_dir, output_dir, max_steps=3, **training)
    overrides.update({"data.max_train_blocks": 48, "data.max_eval_blocks": 16})
    overrides["model.config"] = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    if fresh_state:
        AcceleratorState._reset_state(reset_partial_state=True)
    # A compiled run sets dynamo's capture of data-dependent output sizes for its process: not for the later tests.
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False):
        return run_pretraining(load_recipe(PretrainRecipe, None, extra=overrides), show_progress=False)


@pytest.fixture(scope="module")
def eager_pretraining(pretrained_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eager_pretraining")
    return pretrain(pretrained_dir, out), str(out / "final")


@pytest.mark.parametrize("target", ["model", "layers"])
def test_compiled_pretraining_updates_equal_eager_ones_and_compile_once(
    target, pretrained_dir, eager_pretraining, tmp_path, fresh_accelerate_state
):
    """Losses of every update, the final weights and evaluation equal the eager run's; the first update compiles one
    graph (the whole model with the LM head at the masked positions, or one for all layers) and no later update
    compiles, though each masks a different number of positions."""
    expected, expected_final = eager_pretraining
    got = pretrain(pretrained_dir, tmp_path, torch_compile=target, torch_compile_backend="aot_eager")
    assert list(got["train_losses"]) == [1, 2, 3]
    for step, loss in expected["train_losses"].items():
        assert got["train_losses"][step] == pytest.approx(loss, rel=1e-5), step
    assert got["final_eval"]["eval_loss"] == pytest.approx(expected["final_eval"]["eval_loss"], rel=1e-5)
    assert_same_weights(weights(got["final_dir"]), weights(expected_final))
    assert got["compile"]["first_update_graphs"] == 1
    assert got["compile"]["later_update_graphs"] == 0
    assert got["compile"]["first_update_seconds"] > 0
    assert "compile" not in expected
    log = [json.loads(line) for line in open(tmp_path / "train_log.jsonl")]
    assert [r["graphs"] for r in log if r.get("event") == "compiled"] == [1]


def finetune(pretrained_dir, output_dir, train_file, **training):
    """4 updates of tiny SST-2 batches (dropout off; at most 32 tokens, which every batch of 8 reaches here)."""
    from accelerate.state import AcceleratorState
    from training_utils import tiny_finetune_overrides

    from linformer_hf.training.config import FinetuneRecipe, load_recipe
    from linformer_hf.training.finetuning import run_finetuning

    settings = {
        "model.config": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
        "data.max_train_samples": 32,
        "data.max_eval_samples": 16,
        "training.max_steps": 4,
        "training.per_device_train_batch_size": 8,
        "training.learning_rate": 1e-3,
        "training.logging_steps": 1,
        "training.eval_steps": 4,
        **{f"training.{key}": value for key, value in training.items()},
    }
    recipe = load_recipe(
        FinetuneRecipe, None, extra=tiny_finetune_overrides(pretrained_dir, train_file, output_dir, settings)
    )
    AcceleratorState._reset_state(reset_partial_state=True)
    return run_finetuning(recipe, show_progress=False)


@pytest.fixture(scope="module")
def eager_finetuning(pretrained_dir, tmp_path_factory):
    """The eager run both compiled fine-tunings are compared with (run once), and its training file."""
    from training_utils import sst2_head

    out = tmp_path_factory.mktemp("eager_finetuning")
    train = sst2_head(out / "train.tsv", 64)
    return finetune(pretrained_dir, out / "eager", train), train


@pytest.mark.parametrize("target", ["model", "layers"])
def test_compiled_finetuning_updates_equal_eager_ones(
    target, pretrained_dir, eager_finetuning, tmp_path, fresh_accelerate_state
):
    """Trainer's own option (the whole model) and the layers compiled in place: the logged loss of every update and
    the kept model's weights equal the eager run's, and the updates compile one graph, at the first."""
    expected, train = eager_finetuning
    got = finetune(pretrained_dir, tmp_path / target, train, torch_compile=target, torch_compile_backend="aot_eager")
    assert list(got["train_losses"]) == list(expected["train_losses"]) == [1, 2, 3, 4]
    for step, loss in expected["train_losses"].items():
        assert got["train_losses"][step] == pytest.approx(loss, rel=1e-5), step
    assert got["best"]["accuracy"] == expected["best"]["accuracy"]
    auto = "AutoModelForSequenceClassification"
    assert_same_weights(weights(got["best_dir"], auto), weights(expected["best_dir"], auto))
    # The first update compiles one graph (and none after it: the classification head's config is set beforehand)
    assert got["compile"]["first_update_graphs"] == 1 and got["compile"]["first_update_seconds"] > 0
    assert got["compile"]["later_update_graphs"] == 0
    assert "compile" not in expected


@pytest.mark.parametrize(
    "training,message",
    [
        ({"torch_compile": "encoder"}, "training.torch_compile must be no, model or layers, got 'encoder'"),
        ({"torch_compile_mode": "max-autotune"}, "training.torch_compile_mode='max-autotune' is set but"),
        ({"torch_compile": False, "torch_compile_backend": "aot_eager"}, "is set but training.torch_compile is no"),
        ({"torch_compile": "layers", "torch_compile_backend": "inductr"}, "'inductr' is not a torch.compile backend"),
        ({"torch_compile": "model", "torch_compile_mode": "fast"}, "training.torch_compile_mode must be one of"),
        (
            {"torch_compile": "model", "torch_compile_mode": "max-autotune", "torch_compile_backend": "aot_eager"},
            "is an option of the inductor backend",
        ),
    ],
)
@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_compile_options_that_cannot_work_are_refused_when_the_recipe_is_read(
    command, training, message, pretrained_dir, tmp_path
):
    from training_utils import SST2_TRAIN, tiny_finetune_overrides, tiny_pretrain_overrides

    from linformer_hf.training.config import ConfigError, FinetuneRecipe, PretrainRecipe, load_recipe

    if command == "pretrain":
        recipe, overrides = PretrainRecipe, tiny_pretrain_overrides(tmp_path, tmp_path / "out", **training)
    else:
        overrides = tiny_finetune_overrides(pretrained_dir, SST2_TRAIN, tmp_path / "out")
        recipe = FinetuneRecipe
        overrides.update({f"training.{key}": value for key, value in training.items()})
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_recipe(recipe, None, extra=overrides)


def test_a_bare_false_is_no_and_the_default_leaves_compiling_to_accelerate(tmp_path):
    from training_utils import tiny_pretrain_overrides

    from linformer_hf.training.config import PretrainRecipe, load_recipe
    from linformer_hf.training.pretraining import compile_plugin

    read = load_recipe(PretrainRecipe, None, extra=tiny_pretrain_overrides(tmp_path, tmp_path / "out"))
    assert read.training.torch_compile is None and compile_plugin(read.training) == {}
    overrides = tiny_pretrain_overrides(tmp_path, tmp_path / "out", torch_compile=False)
    read = load_recipe(PretrainRecipe, None, extra=overrides)
    assert read.training.torch_compile == "no"
    assert compile_plugin(read.training)["dynamo_plugin"].backend == "NO"  # an Accelerate config cannot compile it


def test_cuda_graphs_off_cuda_and_inductor_without_a_cpp_compiler_are_refused(monkeypatch):
    from linformer_hf.training.compiling import check_compile_device
    from linformer_hf.training.config import ConfigError

    with pytest.raises(ConfigError, match="captures CUDA graphs, which need a CUDA device"):
        check_compile_device("model", "reduce-overhead", None, "cpu")
    check_compile_device("model", "max-autotune-no-cudagraphs", None, "cpu")  # a C++ compiler is here
    check_compile_device("no", "reduce-overhead", None, "cpu")  # nothing compiled, nothing checked
    for target in ("model", "layers"):  # the cudagraphs backend: on a CPU, torch skips it and runs the graph uncompiled
        with pytest.raises(ConfigError, match=re.escape(f"backend='cudagraphs' {CUDA_GRAPHS_OFF_CUDA}")):
            check_compile_device(target, None, "cudagraphs", "cpu")
        check_compile_device(target, None, "cudagraphs", "cuda:0")

    from torch._inductor import cpp_builder, exc

    def missing():
        raise exc.InvalidCxxCompiler()

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", missing)
    with pytest.raises(ConfigError, match="CPU backend needs a C\\+\\+ compiler.*Or set training.torch_compile no"):
        check_compile_device("layers", None, None, "cpu")
    check_compile_device("layers", None, "aot_eager", "cpu")  # generates no C++


CUDA_GRAPHS_OFF_CUDA = (
    "captures CUDA graphs, which need a CUDA device (this run is on cpu, where it would run the model uncompiled): use "
    "inductor or aot_eager there."
)


@pytest.mark.parametrize("command", ["pretrain", "finetune", "transfer", "benchmark"])
def test_the_cudagraphs_backend_on_the_cpu_is_refused_before_any_work(command, pretrained_dir, tmp_path, capsys):
    """The cudagraphs backend on a CPU: torch logs one line ("skipping cudagraphs due to cpu device") and runs the
    traced graph uncompiled, so each command ran, uncompiled, without a word. Now each command that takes the option
    refuses it, naming the option and what works, with exit status 2 and before any work: no output folder made
    (pretraining and transfer checked it only after claiming the folder, and, for transfer, loading the models)."""
    import yaml
    from training_utils import REPO, as_argv, tiny_finetune_overrides, tiny_pretrain_overrides

    out = tmp_path / "out"
    if command == "pretrain":
        from linformer_hf.training.config import apply_overrides
        from linformer_hf.training.pretrain import main

        overrides = tiny_pretrain_overrides(pretrained_dir, out, torch_compile="model", max_steps=4)
        recipe = tmp_path / "recipe.yaml"
        recipe.write_text(yaml.safe_dump(apply_overrides({}, overrides)))
        argv, flag = (
            ["--config", str(recipe), "--training.torch_compile_backend", "cudagraphs"],
            "training.torch_compile",
        )
    elif command == "finetune":
        from linformer_hf.training.finetune import main

        overrides = tiny_finetune_overrides(pretrained_dir, tmp_path / "train.tsv", out)
        overrides.update({"training.torch_compile": "layers", "training.torch_compile_backend": "cudagraphs"})
        overrides["training.max_steps"] = 2
        (tmp_path / "train.tsv").write_text("sentence\tlabel\nfine\t1\nbad\t0\n")
        argv = ["--config", f"{REPO}/configs/finetune/sst2.yaml", *as_argv(overrides)]
        flag = "training.torch_compile"
    elif command == "transfer":
        from linformer_hf.training.transfer import main

        (tmp_path / "text.txt").write_text("Some text to transfer on.\n")
        argv = ["--teacher", pretrained_dir, "--student", pretrained_dir, "--text_files", str(tmp_path / "text.txt")]
        argv += ["--output_dir", str(out), "--torch_compile", "layers", "--torch_compile_backend", "cudagraphs"]
        flag = "--torch_compile"
    else:
        from benchmarks.cli import main

        argv = ["--preset", "quick", "--device", "cpu", "--compile", "model", "--compile_backend", "cudagraphs"]
        argv += ["--ns", "16", "--ks", "8", "--train_ns", "--scaling_ns", "--reps", "1", "--output_dir", str(out)]
        flag = "compile"
    capsys.readouterr()
    with pytest.raises(SystemExit) if command in ("transfer", "benchmark") else contextlib.nullcontext() as exited:
        status = main([*argv, "--no_progress"] if command in ("pretrain", "finetune") else argv)
    status = exited.value.code if exited is not None else status
    error = capsys.readouterr().err
    assert status == 2 and f"{flag}_backend='cudagraphs' {CUDA_GRAPHS_OFF_CUDA}" in error, error
    assert "Traceback" not in error and not out.exists()


def test_a_run_compiles_as_asked_in_a_process_that_set_up_accelerate_without_compiling(pretrained_dir, tmp_path):
    """Accelerate keeps the first Accelerator's compile settings for the process, but TrainingArguments starts a fresh
    Accelerate state for each run: a run asking to compile after an Accelerator without compiling still compiles."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        Accelerator()  # no compiling
        torch._dynamo.reset()  # an earlier test's graph of the same model would be reused, and counted as none
        got = pretrain(pretrained_dir, tmp_path, False, torch_compile="model", torch_compile_backend="aot_eager")
        assert got["compile"]["first_update_graphs"] == 1  # "compile": the run's Accelerator compiles the model
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


def test_an_accelerator_that_will_not_compile_as_asked_is_refused():
    """The guard for a state Accelerate keeps (a shared, pre-configured one): asking for other compile settings than
    it applies is an error naming the backend it has, not a silently uncompiled run."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import TorchDynamoPlugin

    from linformer_hf.training.compiling import check_accelerator_compiles
    from linformer_hf.training.config import ConfigError

    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        accelerator = Accelerator()
        check_accelerator_compiles(accelerator, "no")
        with pytest.raises(ConfigError, match="already set up Accelerate with the compile backend no"):
            check_accelerator_compiles(accelerator, "inductor")
        later = Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="aot_eager"))  # the state keeps "no"
        with pytest.raises(ConfigError, match="compile backend no"):
            check_accelerator_compiles(later, "aot_eager")
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
