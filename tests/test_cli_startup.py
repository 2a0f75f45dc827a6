"""`forensics.cli.main` has typer build only the command the command line invokes: what every
command prints (help, usage errors) and its exit code are those of the whole app."""
from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest
import typer.main

from forensics import cli

NAMES = sorted(typer.main.get_command(cli.app).commands)   # type: ignore[attr-defined]


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["forensics", *argv])
    monkeypatch.setattr(sys.modules["__main__"], "__package__", None)   # the program is named by argv[0], not pytest
    monkeypatch.setenv("COLUMNS", "100")
    buf = io.StringIO()
    with redirect_stdout(buf), redirect_stderr(buf):
        try:
            cli.main()
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    return code, buf.getvalue()


@pytest.mark.parametrize("argv", [[n, "--help"] for n in NAMES] + [[n] for n in NAMES]
                         + [["--color", "never", "ranks", "--help"], ["--color=never", "rules", "list", "--help"],
                            ["nosuch"], ["--help"], ["last-10s", "--window"], ["rules", "check", "--help"]])
def test_a_command_reads_as_in_the_whole_app(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    real = typer.main.get_command

    def counting(app: typer.Typer) -> object:
        built.append(len(app.registered_commands) + len(app.registered_groups))
        return real(app)

    monkeypatch.setattr(typer.main, "get_command", counting)
    monkeypatch.setattr(typer.main.Typer, "__call__", lambda self, *a, **k: counting(self)(*a, **k))
    code, text = _main(argv, monkeypatch)
    pruned = list(built)
    with monkeypatch.context() as m:   # the same command line with every command built
        m.setattr(cli, "_only_invoked", lambda argv: None)
        assert _main(argv, monkeypatch) == (code, text), argv
    if argv[0].lstrip("-").split("=")[0] in ("color",):
        argv = argv[2:] if argv[0] == "--color" else argv[1:]
    if argv[0] in NAMES:
        assert pruned == [1], pruned        # only the invoked command was built
    assert len(cli.app.registered_commands) + len(cli.app.registered_groups) == len(NAMES)   # restored
