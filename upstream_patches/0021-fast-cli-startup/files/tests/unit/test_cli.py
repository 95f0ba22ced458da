"""The ``speculators`` command imports a command's module only to run it."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from speculators.cli import COMMANDS, app, load_command

#: Run in a fresh interpreter: ``import speculators``, then the registry and a
#: validated config, then ``speculators --version`` and ``--help``.
_FRESH = """
import json, sys
import speculators
from speculators import SpeculatorModel, SpeculatorModelConfig
config = SpeculatorModelConfig.model_validate(
    {"speculators_model_type": "eagle3",
     "transformer_layer_config": {"model_type": "llama"}}
)
out = {"registry": sorted(SpeculatorModel.registry or {}),
       "validated": type(config).__name__}
before = set(sys.modules)
from speculators.__main__ import app
for argv in (["--version"], ["--help"]):
    sys.argv = ["speculators", *argv]
    try:
        app()
    except SystemExit:
        pass
out["loaded"] = sorted(set(sys.modules) - before)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fresh() -> dict:
    """What a fresh interpreter reports after running ``_FRESH``."""
    result = subprocess.run(  # noqa: S603
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.splitlines()[-1])


def test_version_and_help_import_no_command_module(fresh):
    loaded = set(fresh["loaded"])
    assert not {spec.module for spec in COMMANDS.values()} & loaded
    assert not {"datasets", "openai", "aiohttp"} & loaded


def test_package_import_registers_every_model(fresh):
    # The CLI is lazy, the package is not: `import speculators` still registers
    # every model and reloads the config schemas.
    assert "eagle3" in fresh["registry"]
    assert fresh["validated"] == "Eagle3SpeculatorConfig"


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
