"""The long-document command (experiments/long_document.py) on tiny models: progress per layer, fp32 vs int8, and the
Linformer fast path running through quantised Linear modules."""

import os
import subprocess
import sys

import pytest
import torch
from torch.ao.nn.quantized import dynamic as quantized_dynamic

from experiments import long_document
from linformer_hf import LinformerConfig, LinformerModel


def tiny_config(**overrides) -> LinformerConfig:
    settings = dict(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=64,
        max_sequence_length=64,
        projected_length=16,
        chunk_size_feed_forward=16,
    )
    settings.update(overrides)
    return LinformerConfig(**settings)


def test_progress_advances_once_per_layer_in_order_and_hooks_are_removed():
    model = long_document.build_model(tiny_config())
    input_ids = long_document.random_document(model.config)
    with torch.no_grad(), long_document.layer_progress(model, enabled=True) as finished:
        model(input_ids=input_ids)
        assert [index for index, _ in finished] == [0, 1, 2]
        times = [t for _, t in finished]
        assert times == sorted(times)
    with torch.no_grad():
        model(input_ids=input_ids)
    assert len(finished) == 3  # the hooks left with the bar
    assert all(not layer._forward_hooks for layer in model.encoder.layer)


def test_quantised_linformer_runs_its_fast_path_through_int8_linear_modules():
    config = tiny_config()
    assert config.compresses_input_first  # the default settings take the fast path
    model = long_document.build_model(config, seed=1)
    input_ids = long_document.random_document(config, seed=1)
    with torch.no_grad():
        fp32 = model(input_ids=input_ids).last_hidden_state
    quantised = long_document.quantize_int8(model)
    attention = quantised.encoder.layer[0].attention.self
    for linear in (attention.query, attention.key, attention.value, quantised.encoder.layer[0].intermediate.dense):
        assert isinstance(linear, quantized_dynamic.Linear)
    calls = []
    attention.key.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape))
    with torch.no_grad():
        int8 = quantised(input_ids=input_ids).last_hidden_state
    # The key map ran once, on the k compressed rows (the fast path), through the quantised module.
    assert calls == [torch.Size([1, config.projected_length, config.hidden_size])]
    assert not torch.allclose(int8, fp32, atol=1e-5)  # int8 arithmetic really ran
    whole, lowest = long_document.cosine(int8, fp32)
    assert whole > 0.99 and lowest > 0.95


def test_fast_path_with_padding_matches_the_plain_path_after_the_module_call_rewrite():
    # E 1 != 1 on padded rows: the bias correction (E 1 - 1) b must be right, not only the unpadded case.
    torch.manual_seed(0)
    model = LinformerModel(tiny_config(num_hidden_layers=1)).eval()
    attention = model.encoder.layer[0].attention.self
    hidden = torch.randn(2, 40, 32)
    mask = torch.ones(2, 40)
    mask[1, 25:] = 0
    e, f = attention.projections(None)
    with torch.no_grad():
        fast = attention.compress_keys_values(hidden, mask, e, f, use_fast_path=True)
        plain = attention.compress_keys_values(hidden, mask, e, f, use_fast_path=False)
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_one_command_runs_both_modes_and_summarises_against_the_targets(capsys):
    report = long_document.main(
        ["--mode", "both", "--layers", "2", "--n", "32", "--k", "8", "--chunk_size_feed_forward", "16", "--no_progress"]
        + ["--return_freed_memory"]  # mallopt is process-wide: tested in a process of its own below
    )
    assert [result.mode for result in report.results] == ["fp32", "int8"]
    for result in report.results:
        assert result.output.shape == (1, 32, 768)
        assert len(result.layer_seconds) == 2
        assert result.flops > 0 and result.peak_rss_bytes > 0
    assert report.reference_gflops > 0
    assert report.cosine_int8[0] > 0.99
    summary = capsys.readouterr().out
    assert "| fp32 |" in summary and "| int8 |" in summary and "cosine" in summary


def test_unknown_mode_is_refused_before_building():
    with pytest.raises(ValueError, match="modes must be"):
        long_document.run_long_document(tiny_config(), modes=("fp16",))


needs_cpp_compiler = pytest.mark.skipif(
    long_document.cpp_compiler_missing() is not None,
    reason=f"--compile needs inductor's C++ backend: {long_document.cpp_compiler_missing()}",
)


@needs_cpp_compiler
def test_compiled_layers_match_eager_on_a_padded_batch_with_one_graph_per_block_and_per_layer_progress():
    from torch._dynamo.utils import counters

    config = tiny_config()
    model = long_document.build_model(config, seed=2)
    input_ids = torch.randint(3, config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(2))
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 40:], attention_mask[1, 40:] = config.pad_token_id, 0  # the second document is padded
    with torch.no_grad():
        eager = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    long_document.compile_layers(model)
    graphs_before = counters["stats"]["unique_graphs"]
    with torch.inference_mode(), long_document.layer_progress(model, enabled=True) as finished:
        compiled = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        assert [index for index, _ in finished] == [0, 1, 2]  # the hooks on the layers still run, in order
    # Two graphs (attention block, feed-forward chunk) serve all three layers: compiled, and not once per layer.
    assert counters["stats"]["unique_graphs"] - graphs_before == 2
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
    # The padding did reach the compiled graph: the padded document's real tokens differ from an unmasked run.
    with torch.inference_mode():
        unmasked = model(input_ids=input_ids).last_hidden_state
    assert not torch.allclose(unmasked[1, :40], compiled[1, :40], atol=1e-3)

    long_document.uncompile_layers(model)
    assert all("forward" not in vars(layer.attention) for layer in model.encoder.layer)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, eager)


@needs_cpp_compiler
def test_command_with_compile_warms_up_and_the_timed_pass_compiles_nothing(capsys):
    report = long_document.main(
        ["--mode", "both", "--layers", "2", "--n", "32", "--k", "8", "--chunk_size_feed_forward", "16"]
        + ["--no_progress", "--no_reference", "--compile", "--return_freed_memory"]
    )
    fp32, int8 = report.results
    assert fp32.compiled and not int8.compiled
    assert fp32.compile_seconds is not None and fp32.compile_seconds >= 0
    assert fp32.graphs_compiled_during_pass == 0  # the warm-up compiled with the pass's exact arguments
    assert len(fp32.layer_seconds) == 2
    assert report.cosine_int8[0] > 0.99  # int8 ran the eager, quantised layers on the same model
    assert "compiled" in capsys.readouterr().out


def test_compile_without_the_fp32_mode_is_refused_before_building():
    with pytest.raises(ValueError, match="compile applies to the fp32 pass"):
        long_document.run_long_document(tiny_config(), modes=("int8",), compile=True)


def test_bad_command_lines_are_one_error_line_before_any_work(tmp_path, capsys):
    """A missing folder, a folder of another model type, k > n or a zero count: exit 2 and one `error:` line, no
    traceback from huggingface_hub or the config dataclass. A Performer folder is told what the experiment takes
    (before: to convert a RoBERTa or BERT checkpoint, which makes no Linformer of a Performer)."""
    from transformers import RobertaConfig, RobertaModel

    from linformer_hf import PerformerConfig, PerformerModel

    RobertaModel(
        RobertaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    ).save_pretrained(tmp_path / "roberta")
    PerformerModel(
        PerformerConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    ).save_pretrained(tmp_path / "performer")
    performer_error = (
        "holds a Performer (model_type 'performer'): this experiment times a Linformer only (its E and F, the int8 "
        "path). Give a saved Linformer folder"
    )
    cases = {
        ("--model_dir", str(tmp_path / "missing")): "not a saved model folder",
        ("--model_dir", str(tmp_path / "roberta")): "holds a 'roberta' model, not a Linformer",
        ("--model_dir", str(tmp_path / "performer")): performer_error,
        ("--n", "256", "--k", "512"): "--k 512 exceeds --n 256",
        ("--layers", "0"): "must be >= 1",
        ("--n", "1000", "--chunk_size_feed_forward", "300"): "must divide n=1000",
    }
    for argv, message in cases.items():
        with pytest.raises(SystemExit) as exit_info:
            long_document.main([*argv, "--no_reference", "--no_progress", "--return_freed_memory"])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err
        assert message in error
        assert "performer" not in argv[-1] or "convert a RoBERTa" not in error


KEEP_FREED_PROBE = """
import resource, sys, torch
from experiments.long_document import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory() is None
torch.ones(1)
faults = []
for _ in range(8):  # a fresh 256 MB activation each time, as each layer of a long document allocates
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(64 * 2**20)
    del x
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[1:]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt and minor-fault counts: glibc on Linux")
def test_keep_freed_memory_lets_later_activations_reuse_pages_without_faults():
    """Without it, glibc unmaps each freed 256 MB block and the next one is faulted in again (65,536 pages); with it,
    the freed block is reused. In a fresh process: mallopt is process-wide."""

    def later_faults(mode):
        out = subprocess.run(
            [sys.executable, "-c", KEEP_FREED_PROBE, mode],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "THP_MEM_ALLOC_ENABLE": "0"},
        )
        return int(out.stdout.split()[-1])

    default, kept = later_faults("default"), later_faults("keep")
    assert default > 6 * 50_000  # seven blocks of 65,536 pages faulted in again
    assert kept < default / 4  # at most a block or so while the heap settles


def test_importing_the_module_leaves_the_allocator_settings_alone():
    """The huge-page setting is the command's, not its importers': set at import, it leaked into every later test of
    the same pytest worker and into their subprocesses."""
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    probe = "import os, experiments.long_document; print(os.environ.get('THP_MEM_ALLOC_ENABLE'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split()[-1] == "None"
