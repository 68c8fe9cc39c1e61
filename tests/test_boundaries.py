"""The shape of the house (STYLE.md): the engine never imports Qt or the studio, panels never
import panels, models never import views, the sandbox and the store never import the trial
runner (import-linter contracts in pyproject.toml); and secrets are recognised, and the
redaction mark written, in `engine.redact` alone."""

import ast
import socket
import subprocess
import sys
import threading
from pathlib import Path

from engine.redact import MARK

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = [
    "engine never imports Qt or the studio",
    "studio models never import studio views",
    "studio panels never import one another",
    "the sandbox and the store never import the trial runner",
    "the engine never imports its command line",
    "an eval body's context never imports the trial that runs it",
    "harnesses never import the trial runner",
]


def test_import_contracts_hold():
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    for name in CONTRACTS:  # a contract dropped from pyproject.toml no longer holds anything
        assert f"{name} KEPT" in result.stdout, result.stdout


def test_the_engine_imports_without_qt():
    code = (
        "import sys, pkgutil, importlib\n"
        "for name in ('PySide6', 'pyqtgraph', 'studio'):\n"
        "    sys.modules[name] = None  # importing it now raises ImportError\n"
        "import engine\n"
        "for m in pkgutil.walk_packages(engine.__path__, 'engine.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of a module that are code, not docstrings."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def test_the_redaction_mark_is_written_once():
    """Every other module says `redact.MARK`: the studio's badges, the gateway's errors and the
    record all name one mark, whatever it becomes."""
    escaped = MARK.replace("[", "\\[").replace("]", "\\]")  # as a regular expression
    found = [f"{path.relative_to(ROOT)}:{line}"
             for folder in ("engine", "studio") for path in sorted((ROOT / folder).rglob("*.py"))
             if path != ROOT / "engine" / "redact.py"
             for line, text in _strings(ast.parse(path.read_text(), str(path)))
             if MARK in text or escaped in text]
    assert not found, f"write engine.redact.MARK instead of the literal mark: {found}"


def test_the_gateways_own_texts_pass_the_one_redactor(tmp_path):
    """What the gateway writes itself (a 502's reason, its log) is redacted by the Redactor,
    not by a weaker search for the brokered values: a key after a terminal colour code, which
    only the Redactor's patterns know, goes too."""
    from engine.sandbox.gateway import BrokeredSecret, GatewayHost, GatewaySpec

    key = "sk-proj-ABCDEFGH12345678abcdefgh"
    upstream = socket.create_server(("127.0.0.1", 0))
    port = upstream.getsockname()[1]

    def answer() -> None:  # a status line h11 refuses, quoted whole in httpx's error
        conn, _ = upstream.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 2x0 \x1b[32m" + key.encode() + b" real-value-123\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    host = GatewayHost()
    try:
        gateway = host.start(GatewaySpec(
            socket_path=tmp_path / "g.sock", allow=["plain.example.test"],
            secrets=[BrokeredSecret(name="K", placeholder="p-K", value="real-value-123",
                                    hosts=["api.example.test"])],
            resolve={"plain.example.test": f"127.0.0.1:{port}"}))
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(gateway.spec.socket_path))
            sock.sendall(b"GET http://plain.example.test/x HTTP/1.1\r\n"
                         b"Host: plain.example.test\r\n\r\n")
            out = b"".join(iter(lambda: sock.recv(65536), b""))
        gateway.close()
    finally:
        host.close()
        upstream.close()
    assert out.startswith(b"HTTP/1.1 502") and b"illegal status line" in out, out
    assert key.encode() not in out and b"real-value-123" not in out, out
    assert out.count(MARK.encode()) == 2, out
