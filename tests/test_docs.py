"""The docs stay true to the tree: every relative link in README.md and the Markdown under docs/ (and the folders'
own READMEs) points at a file that exists, with its #anchor among that file's headings, and every path they name
under configs/, scripts/, experiments/ or benchmarks/ exists."""

import glob
import os
import re
from dataclasses import dataclass

import prefork
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(
    {
        os.path.relpath(path, REPO)
        for pattern in ("README.md", "docs/**/*.md", "*/README.md", "model_cards/*.md")
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True)
    }
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:configs|scripts|experiments|benchmarks|src/linformer_hf)/[\w.*/-]*[\w*/])")
CODE_BLOCK = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def heading_anchors(page: str) -> set[str]:
    """GitHub's anchors: headings lower-cased, punctuation dropped, spaces turned into hyphens (duplicates -1, -2)."""
    with open(os.path.join(REPO, page), encoding="utf-8") as fh:
        text = CODE_BLOCK.sub("", fh.read())
    anchors, seen = set(), {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        anchors.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return anchors


def test_pages_are_found():
    assert "README.md" in PAGES and any(page.startswith("docs/") for page in PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    with open(os.path.join(REPO, page), encoding="utf-8") as fh:
        text = fh.read()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(REPO, resolved)):
            broken.append(f"{target} (no {resolved})")
        elif anchor and resolved.endswith(".md") and anchor not in heading_anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved})")
    assert not broken, f"{page}: broken links: {broken}"


@pytest.mark.parametrize("page", PAGES)
def test_named_paths_exist(page):
    with open(os.path.join(REPO, page), encoding="utf-8") as fh:
        text = fh.read()
    missing = sorted(
        {path for path in PATH.findall(text) if not glob.glob(os.path.join(REPO, path.rstrip("/")), recursive=True)}
    )
    assert not missing, f"{page} names paths that do not exist: {missing}"


# ------------------------------------------------------------------------------------------------------------------
# The examples run as written: every ```bash command and ```python block of the README and the guides (docs/*.md; the
# records under docs/results/ are dated accounts of what was run, with the hardware it took), each in a subprocess,
# in the order a reader meets them, from a checkout-like folder beside ../shared/data (so `outputs/...` and
# `../shared/data/...` mean what they say). The work is cut by arguments appended to a command (CUT), never by an
# edit of its text; what cannot run here is listed with the reason (NOT_RUN). Hub names are local stand-ins in the
# Hub's layout: a folder named like the Hub id, which transformers takes before the Hub (offline anyway), holding a
# tiny model of that architecture. The reader's own files and folders (MODEL_DIR, my_text.txt, $T ...) are stand-ins
# too. Later examples read what earlier ones wrote (the demo's model, the fine-tuned SST-2 classifier), as a reader's
# would: run the whole list (`-k examples_run`), not one of them alone.
# ------------------------------------------------------------------------------------------------------------------

EXAMPLE_PAGES = ["README.md"] + sorted(
    os.path.relpath(path, REPO) for path in glob.glob(os.path.join(REPO, "docs", "*.md"))
)
FENCED = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
EXAMPLE_TIMEOUT_S = 300

# (page, regular expression searched in an example's text): why it is not run here. Each entry must match.
NOT_RUN = {
    ("README.md", r"^bash scripts/setup_env\.sh && bash scripts/demo\.sh$"): "sets up .venv from PyPI (CI's first "
    "step); scripts/demo.sh itself runs below, as docs/training.md writes it",
    ("README.md", r"^bash scripts/setup_env\.sh && .* -m pytest -n 2 --dist loadfile tests$"): "the test suite itself",
    ("README.md", r"^pip install "): "installs packages from PyPI (CI's setup_env.sh installs .[dev])",
    ("README.md", r"v100x8_fp16\.yaml"): "8 GPUs, and the paper's corpora from the Hub",
    ("docs/pretrained.md", r"^pip install "): "installs packages from PyPI",
    ("docs/pretrained.md", r"all_minilm_l6_v2\.extract_model"): "needs the minilm extra (not in dev): the test puts a "
    "tiny BERT where it writes, outputs/minilm/all-MiniLM-L6-v2, for the commands after it",
    ("docs/pretrained.md", r"push_to_hub\.py MODEL_DIR user/repo$"): "pushes to the Hub (online, logged in); the "
    "--dry_run above it writes and checks the same folder",
    ("docs/training.md", r"^bash scripts/setup_env\.sh$"): "sets up .venv from PyPI (CI's first step)",
    ("docs/training.md", r"configs/accelerate/gpu\.yaml"): "needs a GPU (fp16)",
    ("docs/training.md", r"v100x8_fp16\.yaml"): "8 GPUs on one node or several, and the paper's corpora from the Hub",
    ("docs/training.md", r"torch_compile (layers|model)|--compile layers"): "compiles a model with inductor (a minute "
    "or more each on 2 cores), on the paper's corpora or a GPU; tests/test_compile.py compiles pretraining, "
    "fine-tuning, transfer and benchmark steps",
    ("docs/training.md", r"#SBATCH"): "a SLURM job script (sbatch, srun, scontrol)",
    ("docs/performance.md", r"torch\.compile\(model, fullgraph=True\)"): "a fragment (input_ids, attention_mask and "
    "labels are the reader's); tests/test_compile.py compiles every head with fullgraph=True",
    ("docs/performance.md", r"--preset (targets|peers)|benchmarks --peer --output_dir"): "10 minutes to hours on 2 "
    "cores; the quick preset runs the same code",
    ("docs/performance.md", r"--device cuda|experiments\.gpu_checks"): "needs a GPU",
    ("docs/pretrained.md", r"configs/accelerate/gpu\.yaml"): "needs a GPU, and roberta-base from the Hub",
    ("docs/pretrained.md", r"outputs/pretrain/books-roberta/final"): "starts from a RoBERTa pretrained on the books "
    "(hours on 2 cores); tests/test_pretraining_books.py runs the same recipe from a tiny RoBERTa",
    ("docs/training.md", r"experiments\.author_attribution compare"): "fine-tunes four models on passages of up "
    "to 4,096 tokens (hours on 2 cores), from the uptrained and the books RoBERTa; tests/test_author_attribution.py "
    "runs the same comparison on tiny models",
    ("docs/training.md", r"experiments\.author_attribution pool"): "pools the two comparisons above (hours to make on "
    "2 cores); tests/test_author_attribution.py pools stand-in compare folders",
    ("docs/training.md", r"experiments\.author_attribution rescore"): "rescores the comparisons above (hours to make "
    "on 2 cores); tests/test_author_attribution.py rescores a comparison of tiny models",
    ("docs/deployment.md", r"long_document --mode both"): "65,536 tokens through 12 layers, minutes; the quick look "
    "after it runs the same code",
}

# (page, regular expression): the arguments appended to each example it matches, to make it cheap.
CUT = {
    ("README.md", r"wikitext2_cpu\.yaml"): "--training.max_steps 2 --training.warmup_steps 0 --training.eval_steps 2 "
    "--training.checkpointing_steps 2",
    ("README.md", r"scripts/finetune\.py"): "--data.max_train_samples 16 --data.max_eval_samples 16 "
    "--training.max_steps 2",
    ("README.md", r"transfer_attention\.py"): "--lengths 32 --batch_size 2 --layer_steps 1 --warmup_steps 0 "
    "--eval_windows 1 --eval_documents 4",
    ("docs/pretrained.md", r"transfer_attention\.py"): "--lengths 32 --batch_size 2 --layer_steps 1 --warmup_steps 0 "
    "--eval_windows 1 --eval_documents 4",
    ("docs/pretrained.md", r"linformer_hf\.training\.finetune"): "--data.max_train_samples 16 "
    "--data.max_eval_samples 16 --training.max_steps 2 --training.eval_steps 2",
    # The demo evaluates 64 of its 512 validation blocks. The "longer" run (no time budget, more updates) trains on
    # the stand-in text: the demo's own first run already reads, tokenises and packs the default corpus.
    ("docs/training.md", r"^scripts/demo\.sh"): "--training.max_steps 2 --training.warmup_steps 0 "
    "--training.eval_steps 2 --data.max_eval_blocks 64",
    ("docs/training.md", r"^scripts/demo\.sh --training\.max_train_minutes null"): "--data.train_files "
    "'[my_corpus.txt]' --data.validation_files '[my_valid.txt]'",
    ("docs/training.md", r"train_tokenizer --dataset \.\./shared/data/gutenberg"): "--max_documents 2 --vocab_size 600",
    ("docs/training.md", r"configs/pretrain/books\.yaml"): "--data.datasets '[{path: ../shared/data/gutenberg, split: "
    '"train[:2]"}]\' --data.validation_datasets \'[{path: ../shared/data/gutenberg, split: "validation[:1]"}]\' '
    "--data.max_eval_blocks 2 --training.max_steps 2 --training.warmup_steps 0 --training.eval_steps 2 "
    "--training.per_device_train_batch_size 2",
    ("docs/pretrained.md", r"fit_mlm_head_books\.yaml|outputs/fit-head/minilm/final"): "--data.datasets "
    "'[{path: ../shared/data/gutenberg, split: \"train[:2]\"}]' --data.validation_datasets '[{path: "
    '../shared/data/gutenberg, split: "validation[:1]"}]\' --data.max_eval_blocks 2 --training.max_steps 2 '
    "--training.warmup_steps 0 --training.eval_steps 2 --training.per_device_train_batch_size 2 "
    "--training.gradient_accumulation_steps 1",
    ("docs/training.md", r"experiments\.author_attribution build"): "--max_authors 2 --train_per_author 2 "
    "--dev_per_author 1 --test_per_author 1",
    ("docs/training.md", r"configs/finetune/authors\.yaml"): "--training.max_steps 2 "
    "--training.per_device_train_batch_size 2 --training.per_device_eval_batch_size 2",
    ("docs/performance.md", r"--preset quick"): "--ns 64 --ks 16 --train_ns 64 --scaling_ns 64 128 --reps 1 "
    "--warmup 0 --hidden_size 32 --heads 2 --intermediate_size 64 --vocab_size 100",
}

# The example that builds the demo model every later one reads (outputs/demo/pretrain/final): run first, once.
DEMO = ("docs/training.md", r"^scripts/demo\.sh$")
# Then two lanes side by side, each page's examples in order; a page reading what another wrote shares its lane
# (deployment.md exports the classifier the README fine-tunes). LAST runs after both: it rewrites the demo's model.
LANES = [
    ["README.md", "docs/deployment.md"],
    ["docs/compatibility.md", "docs/models.md", "docs/performance.md", "docs/pretrained.md"],
]
LAST = ["docs/training.md"]


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    language: str  # "bash": one command (continuation lines joined) or a whole script; "python": one block
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def strip_comment(line: str) -> str:
    """The line without its shell comment: a `#` that starts a word outside quotes, and what follows it."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def bash_commands(page: str, first_line: int, body: str) -> list[Example]:
    if body.startswith("#!"):  # a script: one example
        return [Example(page, first_line, "bash", body)]
    commands, text, start = [], "", None
    for offset, line in enumerate(body.splitlines()):
        code = strip_comment(line).strip()
        if start is None:
            if not code:
                continue
            start = first_line + offset
        if code.endswith("\\"):
            text += code[:-1].rstrip() + " "
            continue
        commands.append(Example(page, start, "bash", text + code))
        text, start = "", None
    return commands


def page_examples(page: str) -> list[Example]:
    with open(os.path.join(REPO, page), encoding="utf-8") as fh:
        text = fh.read()
    found = []
    for block in FENCED.finditer(text):
        language, body = block.group(1), block.group(2)
        first_line = text.count("\n", 0, block.start(2)) + 1
        if language == "python":
            found.append(Example(page, first_line, "python", body))
        elif language in ("bash", "sh", "shell"):
            found.extend(bash_commands(page, first_line, body))
    return found


EXAMPLES = [example for page in EXAMPLE_PAGES for example in page_examples(page)]


def entries(table: dict, example: Example) -> list:
    return [
        value
        for (page, pattern), value in table.items()
        if page == example.page and re.search(pattern, example.text, re.M)
    ]


def test_examples_are_found_and_every_listed_one_exists():
    """The parser sees the README's commands, and each NOT_RUN / CUT entry still names an example (a changed command
    is listed again, with its reason, or runs)."""
    texts = {example.text for example in EXAMPLES}
    assert any("scripts/finetune.py --config configs/finetune/sst2.yaml" in text for text in texts)
    assert any(example.language == "python" and example.page == "README.md" for example in EXAMPLES)
    for table in (NOT_RUN, CUT, dict([(DEMO, None)])):
        for page, pattern in table:
            assert any(e.page == page and re.search(pattern, e.text, re.M) for e in EXAMPLES), (
                f"{page}: no example matches {pattern!r}: update the table"
            )
    both = [example.id for example in EXAMPLES if entries(NOT_RUN, example) and entries(CUT, example)]
    assert not both, f"listed as not run and cut: {both}"


def test_one_process_accelerate_launches_are_quiet():
    """A one-process `accelerate launch` follows a script's one-line `error:` with its own CalledProcessError
    traceback unless given --quiet: the documented ones carry it (several processes: torchrun's report instead)."""
    import yaml

    loud = []
    for example in EXAMPLES:
        for launch in re.findall(r"accelerate launch ((?:--?[\w-]+(?: (?!-)\S+)? )*)", example.text):
            config = re.search(r"--config_file (\S+)", launch)
            processes = 1
            if config:
                with open(os.path.join(REPO, config.group(1))) as fh:
                    settings = yaml.safe_load(fh)
                processes = settings.get("num_processes", 1) * settings.get("num_machines", 1)
            if processes == 1 and not re.search(r"(^| )(--quiet|-q)( |$)", launch):
                loud.append(f"{example.id}: accelerate launch {launch}")
    assert not loud, f"one-process launches without --quiet: {loud}"


def write_stand_ins(repo: str) -> dict:
    """The Hub models and the reader's own files the examples name, made small; returns the environment they add."""
    from tiny_bert import build_wordpiece_tokenizer, tiny_bert_config
    from tiny_roberta import build_tokenizer, tiny_roberta_config, wikitext_lines
    from transformers import BertForMaskedLM, BertModel, RobertaForMaskedLM, RobertaForSequenceClassification

    def roberta(folder, head=RobertaForMaskedLM, **config):
        path = os.path.join(repo, folder)
        build_tokenizer(path, model_max_length=512).save_pretrained(path)
        head(tiny_roberta_config(max_position_embeddings=514, **config)).save_pretrained(path)
        return path

    def bert(folder, head=BertForMaskedLM):
        path = os.path.join(repo, folder)
        build_wordpiece_tokenizer(path, model_max_length=512).save_pretrained(path)
        head(tiny_bert_config(max_position_embeddings=512)).save_pretrained(path)

    roberta("roberta-base")
    bert("bert-base-uncased")
    bert(os.path.join("outputs", "minilm", "all-MiniLM-L6-v2"), head=BertModel)  # what extract_model writes
    teacher = roberta("teacher-classifier", head=RobertaForSequenceClassification, num_labels=2)  # $T: best/ of a run
    lines = "\n".join(wikitext_lines(200)) + "\n"
    for name in ("my_text.txt", "my_corpus.txt", "my_valid.txt"):
        with open(os.path.join(repo, name), "w", encoding="utf-8") as fh:
            fh.write(lines)
    return {"T": teacher, "D": "../shared/data"}


@pytest.fixture(scope="module")
def docs_workspace(tmp_path_factory, request):
    """`<tmp>/repo`, the checkout's files linked in and nothing under outputs/, beside `<tmp>/shared` (this machine's
    data), with the stand-ins. Runs the demo, then starts the selected examples; returns (repo, environment,
    the examples' results by id, as futures)."""
    import shutil
    import threading
    from concurrent.futures import Future

    root = tmp_path_factory.mktemp("docs")
    repo = str(root / "repo")
    os.makedirs(os.path.join(repo, "outputs"))
    os.symlink(os.path.realpath(os.path.join(REPO, "..", "shared")), root / "shared")
    for name in os.listdir(REPO):
        if name not in (".git", "outputs", "out") and (not name.startswith(".") or name == ".venv"):
            os.symlink(os.path.join(REPO, name), os.path.join(repo, name))
    # this interpreter's folder, or the stand-ins that fork from a pre-imported one (tests/prefork.py)
    bin_dir = os.path.dirname(prefork.python_executable())
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HOME=str(root / "hf_home"),  # nothing from this machine's Hub and datasets caches
        HF_HUB_CACHE=str(root / "hf_home" / "hub"),
        HF_DATASETS_CACHE=str(root / "hf_home" / "datasets"),
        PATH=bin_dir + os.pathsep + env.get("PATH", ""),  # python, accelerate
        PYTHONPATH=os.path.join(REPO, "src") + os.pathsep + env.get("PYTHONPATH", ""),
        PYTHON=os.path.join(bin_dir, "python"),  # scripts/demo.sh's interpreter and launcher (.venv's by default)
        ACCELERATE=os.path.join(bin_dir, "accelerate"),
    )
    env.update(write_stand_ins(repo))
    demo = next(e for e in EXAMPLES if (e.page, e.text) == (DEMO[0], "scripts/demo.sh"))
    results = {demo.id: Future()}
    results[demo.id].set_result(run_example(repo, env, demo))
    if results[demo.id].result().returncode != 0:
        return repo, env, results
    shutil.copytree(os.path.join(repo, "outputs", "demo", "pretrain", "final"), os.path.join(repo, "MODEL_DIR"))

    # The selected examples start now, in the background (each test waits for its own, so each test's time is its
    # example's); a page's examples in order, the LANES side by side (two cores), then LAST.
    selected = {
        item.callspec.params["example"].id
        for item in request.session.items
        if "example" in getattr(getattr(item, "callspec", None), "params", {})
    }
    pending = {e.id: Future() for e in EXAMPLES if e.id in selected and e.id not in results and not entries(NOT_RUN, e)}

    def run_pages(pages):
        for example in [e for e in EXAMPLES if e.page in pages and e.id in pending]:
            pending[example.id].set_result(run_example(repo, env, example))

    lanes = [threading.Thread(target=run_pages, args=(pages,), daemon=True) for pages in LANES]

    def last():
        for lane in lanes:
            lane.join()
        run_pages(LAST)

    for thread in [*lanes, threading.Thread(target=last, daemon=True)]:
        thread.start()
    results.update(pending)
    return repo, env, results


def run_example(repo: str, env: dict, example: Example):
    import subprocess

    if example.language == "python":
        argv = [prefork.python_executable(), "-c", example.text]
    else:
        argv = ["bash", "-c", " ".join([example.text, *entries(CUT, example)])]
    try:
        return subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        output = [
            text.decode(errors="replace") if isinstance(text, bytes) else text for text in (err.stdout, err.stderr)
        ]
        return subprocess.CompletedProcess(argv, f"timed out after {EXAMPLE_TIMEOUT_S} s", *output)


def test_every_page_has_a_lane():
    assert sorted(page for lane in [*LANES, LAST] for page in lane) == EXAMPLE_PAGES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: example.id)
def test_examples_run(example, docs_workspace):
    """The example exits 0, as written (plus CUT's arguments), or is listed in NOT_RUN with the reason."""
    if entries(NOT_RUN, example):
        pytest.skip(f"not run: {entries(NOT_RUN, example)[0]}")
    result = docs_workspace[2][example.id].result()  # run in the background since the fixture started it
    command = " ".join([example.text, *entries(CUT, example)]) if example.language == "bash" else example.text
    assert result.returncode == 0, (
        f"{example.id} exited {result.returncode}:\n{command}\n--- stdout (end)\n{(result.stdout or '')[-3000:]}\n"
        f"--- stderr (end)\n{(result.stderr or '')[-3000:]}"
    )


def test_a_documented_launch_that_fails_shows_its_error_line_alone(docs_workspace):
    """The README's fine-tuning launch given a bad value: the user sees the script's one `error:` line, last, and no
    traceback (without --quiet accelerate adds its CalledProcessError traceback, 10 lines, after it)."""
    repo, env, results = docs_workspace
    example = next(e for e in EXAMPLES if e.page == "README.md" and "scripts/finetune.py" in e.text)
    assert "--quiet" in example.text
    too_long = " --data.max_seq_length 64 --training.output_dir outputs/finetune/too-long"  # the demo's n is 32
    bad = Example(example.page, example.line, "bash", example.text + too_long)
    result = run_example(repo, env, bad)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[-1] == (
        "error: data.max_seq_length=64 is larger than the model's longest input n=32: set --data.max_seq_length 32 "
        "or less (null: the model's n), or fine-tune a model with a larger n."
    )


def test_the_experiments_readme_says_which_modules_are_commands():
    """experiments/README.md says `python -m experiments.<module> --help`: every module its table names has a command
    line, but those it calls libraries, which have none (`--help` printed nothing and exited 0)."""
    with open(os.path.join(REPO, "experiments", "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    said = re.search(r"the libraries ((?:`\w+`(?:, | and |,?\s+and\s+|,?\s+)?)+)have no command line", readme)
    libraries = set(re.findall(r"`(\w+)`", said.group(1))) if said else set()
    # the table's first column: its modules (a .sh script is not matched)
    listed = {name for row in re.findall(r"^\| (.+?) \|", readme, re.M) for name in re.findall(r"`(\w+)`", row)}
    assert libraries <= listed
    for name in sorted(listed):
        with open(os.path.join(REPO, "experiments", f"{name}.py"), encoding="utf-8") as fh:
            command = 'if __name__ == "__main__":' in fh.read()
        assert command != (name in libraries), f"experiments/{name}.py: {'a command' if command else 'no command'}"
