"""Which architectures vLLM registers to a class implementing ``SupportsEagle3``,
read from the wheel's source with ``ast`` (nothing imported): the answer for the
classes that do not import in the test environment (their multimodal
dependencies are not installed), where vLLM's own ``supports_eagle3`` cannot ask.

``python tests/support/vllm_eagle3_scan.py SITE-PACKAGES/vllm`` prints the
architectures without it, the list ``speculators_kimi/served_verifiers.py``
holds (for a new vLLM release)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

REGISTRIES = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS")
PROTOCOL = "SupportsEagle3"
MODELS = "vllm.model_executor.models"


def registered(vllm: Path) -> dict[str, tuple[str, str]]:
    """Architecture -> (module, class) of vLLM's text and multimodal registries."""
    tree = ast.parse((vllm / "model_executor/models/registry.py").read_text())
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if getattr(target, "id", None) in REGISTRIES and isinstance(
            node.value, ast.Dict
        ):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                assert key is not None  # no ``**mapping`` in vLLM's registries
                module, name = ast.literal_eval(value)
                full = module if module.startswith("vllm.") else f"{MODELS}.{module}"
                out[ast.literal_eval(key)] = (full, name)
    return out


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Subscript):  # Generic[...]
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def _absolute(node: ast.ImportFrom, module: str, package: bool) -> str:
    """The absolute module a ``from ... import`` in ``module`` reads."""
    if not node.level:
        return node.module or ""
    parts = module.split(".") if package else module.split(".")[:-1]
    parts = parts[: len(parts) - node.level + 1]
    return ".".join([*parts, *filter(None, [node.module])])


def eagle3_architectures(vllm: Path) -> dict[str, bool]:
    """Each registered architecture: whether its class has ``SupportsEagle3`` among
    its bases, followed through classes, aliases and imports within vLLM."""

    @cache
    def parsed(module: str) -> tuple[ast.Module, bool] | None:
        stem = vllm.parent / module.replace(".", "/")
        for path, package in (
            (stem.with_suffix(".py"), False),
            (stem / "__init__.py", True),
        ):
            if path.is_file():
                return ast.parse(path.read_text()), package
        return None

    @cache
    def implements(module: str, name: str) -> bool:
        if name == PROTOCOL:
            return True
        found = parsed(module)
        if found is None:
            return False
        tree, package = found
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return any(
                    (base := _base_name(b)) is not None and implements(module, base)
                    for b in node.bases
                )
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Name)
                and any(getattr(t, "id", None) == name for t in node.targets)
            ):
                return implements(module, node.value.id)
        for imported in ast.walk(tree):
            if not isinstance(imported, ast.ImportFrom):
                continue
            for alias in imported.names:
                if (alias.asname or alias.name) == name:
                    source = _absolute(imported, module, package)
                    return source.startswith("vllm.") and implements(source, alias.name)
        return False

    return {arch: implements(m, c) for arch, (m, c) in registered(vllm).items()}


if __name__ == "__main__":
    import sys

    found = eagle3_architectures(Path(sys.argv[1]))
    print("\n".join(sorted(arch for arch, yes in found.items() if not yes)))
