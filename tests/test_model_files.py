"""The model files as transformers lays them out: each family's modeling file holds its whole model, from the bare model
down to the attention, with no class wired in at run time, and what one family shares with the other is a marked copy
(`# Copied from ... with Linformer->Performer`, transformers' `utils/check_copies.py` convention) that must stay equal
to its source."""

import ast
import difflib
import pathlib
import re

import pytest

from linformer_hf.models import modeling_linformer, modeling_performer

MODELS = pathlib.Path(modeling_linformer.__file__).parent
COPIED_FROM = re.compile(r"^# Copied from linformer_hf\.models\.(\w+)\.(\w+)(?: with (\w+)->(\w+))?$")
FAMILIES = {"Linformer": modeling_linformer, "Performer": modeling_performer}


def top_level_definitions(path: pathlib.Path) -> dict[str, tuple[str, str]]:
    """name -> (the line above the definition, its source with decorators) for the module's functions and classes."""
    source = path.read_text()
    lines = source.splitlines(keepends=True)
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            start = min([decorator.lineno for decorator in node.decorator_list] + [node.lineno]) - 1
            above = lines[start - 1].strip() if start else ""
            found[node.name] = (above, "".join(lines[start : node.end_lineno]))
    return found


def replaced(text: str, old: str, new: str) -> str:
    """`old->new` as transformers applies it: as written, lower-case and upper-case."""
    for before, after in ((old, new), (old.lower(), new.lower()), (old.upper(), new.upper())):
        text = text.replace(before, after)
    return text


def marked_copies() -> list[tuple[str, str, str, str]]:
    """(file, name, expected source, actual source) for every marked copy in the model files."""
    copies = []
    for path in sorted(MODELS.glob("modeling_*.py")):
        for name, (above, text) in top_level_definitions(path).items():
            match = COPIED_FROM.match(above)
            if match is None:
                continue
            module, source_name, old, new = match.groups()
            source_definitions = top_level_definitions(MODELS / f"{module}.py")
            assert source_name in source_definitions, f"{path.name}: {name} is copied from a missing {source_name}"
            expected = source_definitions[source_name][1]
            if old is not None:
                expected = replaced(expected, old, new)
            copies.append((path.name, name, expected, text))
    return copies


def test_every_marked_copy_equals_its_source():
    copies = marked_copies()
    # the Performer's attention block, input checks, every head it shares with the Linformer and its auto_map
    assert len(copies) >= 9
    for file, name, expected, actual in copies:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), "expected", file))
        assert actual == expected, f"{file}: {name} differs from the code it is copied from:\n{diff}"


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_file_defines_its_path_from_model_to_attention(family):
    """Model -> Encoder -> Layer -> Attention -> SelfAttention, each a class of the family's own file that builds the
    next by name: no class is handed in through a class attribute or an argument."""
    module = FAMILIES[family]
    chain = ["Model", "Encoder", "Layer", "Attention", "SelfAttention"]
    for outer, inner in zip(chain, chain[1:]):
        cls = getattr(module, f"{family}{outer}")
        assert cls.__module__ == module.__name__
        init_source = top_level_definitions(pathlib.Path(module.__file__))[cls.__name__][1]
        assert f"{family}{inner}(config" in init_source, f"{cls.__name__} does not build {family}{inner}"
    source = pathlib.Path(module.__file__).read_text()
    for wiring in ("self_attention_class", "encoder_class", "base_model_class"):
        assert wiring not in source


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_file_imports_only_transformers_torch_and_its_own_siblings(family):
    module = FAMILIES[family]
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    relative = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level}
    assert relative == {"compat", f"configuration_{family.lower()}"}
    absolute = {
        name.split(".")[0]
        for node in ast.walk(tree)
        for name in (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and not node.level
            else []
        )
    }
    assert absolute <= {"math", "re", "typing", "torch", "transformers"}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_head_builds_the_family_model_and_calls_its_own_init_chain(family):
    """Each head is a subclass of the family's PreTrainedModel only (and GenerationMixin for the causal LM): it builds
    its modules in its own __init__ through super(), never skipping a parent's __init__."""
    module = FAMILIES[family]
    base = getattr(module, f"{family}PreTrainedModel")
    for head in getattr(module, f"{family.upper()}_HEADS").values():
        assert set(head.__bases__) - {base, getattr(module, "GenerationMixin", None)} == set(), head
        init_source = top_level_definitions(pathlib.Path(module.__file__))[head.__name__][1]
        assert "__init__(self, config" in init_source
        assert "PreTrainedModel.__init__(self" not in init_source


def test_each_transformers_difference_is_named_once_in_compat_and_above_its_code():
    """compat.py lists every difference between releases, one line each (`- name: versions, what differs`), and names
    each again, in the same words, in a one-line comment above the code that handles it."""
    from linformer_hf.models import compat

    listed = re.findall(r"^- ([a-z][\w -]+): (.+)$", compat.__doc__, re.MULTILINE)
    source = (MODELS / "compat.py").read_text()
    commented = re.findall(r"^ *# ([a-z][\w -]+): (.+)$", source, re.MULTILINE)
    names = [name for name, _ in listed]
    assert len(names) == len(set(names)) >= 8
    assert sorted(names) == sorted(name for name, _ in commented)
    for name, line in commented:
        assert re.search(r"\d\.\d", line), f"{name}: say which releases differ"
