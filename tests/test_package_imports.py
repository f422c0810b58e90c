"""The package's modules import each other without a circle (imports inside functions count: a circle there is a
module that can only be read together with the others)."""

import ast
import os

PACKAGE = os.path.join(os.path.dirname(__file__), os.pardir, "src", "linformer_hf")


def module_names() -> dict[str, str]:
    """Dotted module name -> file, for every module of the package (a package by its ``__init__.py``)."""
    modules = {}
    root = os.path.dirname(os.path.abspath(PACKAGE))
    for folder, _, files in os.walk(os.path.abspath(PACKAGE)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, root)[: -len(".py")].replace(os.sep, ".")
                modules[dotted.removesuffix(".__init__")] = path
    return modules


def imports_between_modules() -> dict[str, set[str]]:
    """Which of the package's modules each module imports, anywhere in its code."""
    modules = module_names()
    graph = {}
    for module, path in modules.items():
        here = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
        imported = set()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                imported |= {source} | {f"{source}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        graph[module] = {name for name in imported if name in modules and name != module}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports (its modules in order), or None."""
    state: dict[str, str] = {}  # "open" while its imports are followed, then "done"
    path: list[str] = []

    def follow(module):
        state[module] = "open"
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return path[path.index(imported) :] + [imported]
            if imported not in state:
                circle = follow(imported)
                if circle:
                    return circle
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state:
            circle = follow(module)
            if circle:
                return circle
    return None


def test_the_package_imports_form_no_circle():
    graph = imports_between_modules()
    assert "linformer_hf.training.transfer_losses" in graph["linformer_hf.training.distillation"]  # imports are seen
    circle = find_circle(graph)
    assert circle is None, " -> ".join(circle)


def test_a_circle_is_found():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
