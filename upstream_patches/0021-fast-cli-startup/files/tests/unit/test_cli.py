"""The ``speculators`` command imports a command's module only to run it."""

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from speculators.cli import COMMANDS, app, load_command

#: Modules whose import makes ``--version`` and ``--help`` take seconds.
HEAVY = ("torch", "transformers", "datasets", "openai", "speculators.models")


def _imported_after(argv: list[str]) -> set[str]:
    """The heavy modules loaded by ``speculators ARGV`` in a fresh interpreter."""
    code = (
        "import sys\n"
        "from speculators.__main__ import app\n"
        f"sys.argv = ['speculators', *{argv!r}]\n"
        "try:\n"
        "    app()\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('imported:', *(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(result.stdout.splitlines()[-1].split()[1:])


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_import_no_heavy_module(argv):
    assert _imported_after(argv) == set()


def test_help_lists_every_command_with_its_panel_and_summary():
    result = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for name in COMMANDS:
        summary = (load_command(name).help or "").splitlines()[0].strip()
        line = next(line for line in result.output.splitlines() if f" {name} " in line)
        assert summary.split()[0] in line
    pipeline, tools = result.output.split("Pipeline")[1].split("Tools")
    for name, spec in COMMANDS.items():
        assert (f" {name} " in pipeline) == (spec.panel == "Pipeline")
    assert " convert " in tools


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_loads_with_its_function_and_settings(name):
    command = load_command(name)
    assert command.name == name
    assert command.rich_help_panel == COMMANDS[name].panel
    for key, value in COMMANDS[name].context_settings.items():
        assert command.context_settings[key] == value


def test_command_help_and_unknown_command_resolve_as_before():
    runner = CliRunner()
    result = runner.invoke(app, ["prepare-data", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "--render-endpoint" in result.output
    assert "--install-completion" not in result.output
    result = runner.invoke(app, ["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.output


def test_train_modules_import_first_without_a_cycle():
    # The package no longer imports every model first, so an import cycle
    # between speculators.train and speculators.models would surface here.
    subprocess.run(
        [sys.executable, "-c", "import speculators.train.device"], check=True
    )
