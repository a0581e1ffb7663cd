"""The `ddlab` dispatcher: every command it lists exists, unknown commands fail clearly."""
import importlib

from ddlab import cli


def test_every_command_resolves_to_a_function():
    for name, (module, func, _) in cli.COMMANDS.items():
        assert callable(getattr(importlib.import_module(module), func)), name


def test_help_and_unknown(capsys):
    assert cli.main([]) == 0
    assert "doctor" in capsys.readouterr().out
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err
