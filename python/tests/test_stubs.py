"""The type stubs describe the package as it is: every name and method they declare exists."""

import ast
import pathlib

import pact

STUBS = pathlib.Path(pact.__file__).with_name("__init__.pyi")


def test_every_stub_name_and_method_exists():
    tree = ast.parse(STUBS.read_text())
    missing = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            if not hasattr(pact, node.name):
                missing.append(node.name)
                continue
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and not hasattr(getattr(pact, node.name), item.name):
                        missing.append(f"{node.name}.{item.name}")
    assert missing == []


def test_every_public_name_has_a_stub():
    declared = {n.name for n in ast.parse(STUBS.read_text()).body
                if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    declared |= {t.id for n in ast.parse(STUBS.read_text()).body if isinstance(n, ast.AnnAssign)
                 for t in [n.target]}
    assert set(pact.__all__) - declared == set()
