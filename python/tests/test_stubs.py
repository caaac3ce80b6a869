"""The extension's type stubs describe it as it is: every name and method they declare exists,
and every name the extension exports has a stub."""

import ast
import pathlib

import pact
from pact import _pact

STUBS = pathlib.Path(pact.__file__).with_name("_pact.pyi")


def declared():
    tree = ast.parse(STUBS.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = [i.name for i in node.body if isinstance(i, ast.FunctionDef)]
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = []
        elif isinstance(node, ast.AnnAssign):
            out[node.target.id] = []
    return out


def test_every_stub_name_and_method_exists():
    missing = [f"{name}.{m}" if m else name
               for name, methods in declared().items()
               for m in ([None] if not hasattr(pact, name) else
                         [m for m in methods if not hasattr(getattr(pact, name), m)])]
    assert missing == []


def test_every_extension_name_has_a_stub():
    exported = {n for n in dir(_pact) if not n.startswith("_")}
    assert exported - set(declared()) == set()
