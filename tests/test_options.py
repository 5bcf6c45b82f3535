"""The ssh and image options are declared once (commands/options.py) and taken as a set:
every command that takes them shows the same options, and a command gets the set's value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import typer
from typer.testing import CliRunner

from dflash_doctor.cli import app
from dflash_doctor.commands.options import IMAGE, SSH, expand
from dflash_doctor.targets.hosts import SshOptions
from dflash_doctor.targets.image import ImageOptions

TARGET_COMMANDS = {"check": (SSH, IMAGE), "ancestry": (SSH, IMAGE), "patch": (SSH,), "restore": (SSH,)}


def shown(param: click.Parameter) -> tuple[Any, ...]:
    """What the command line makes of an option: its words, help, default, type and bounds."""
    return (
        tuple(param.opts),
        getattr(param, "help", None),
        param.default,
        param.type.name,
        getattr(param.type, "min", None),
        param.multiple,
    )


def test_every_command_that_takes_a_set_shows_its_options_alike() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    seen: dict[str, tuple[Any, ...]] = {}
    for name, option_sets in TARGET_COMMANDS.items():
        params = {param.name: param for param in commands[name].params}
        wanted = {option for option_set in option_sets for option, _, _ in option_set.options}
        assert wanted <= set(params), name
        for option in wanted:
            assert seen.setdefault(option, shown(params[option])) == shown(params[option]), (name, option)
    assert len(seen) == len(SSH.options) + len(IMAGE.options)


def test_a_command_gets_the_values_of_its_sets_in_their_place() -> None:
    got: dict[str, Any] = {}

    def command(
        host: str = typer.Option("h", "--host"),
        ssh: SshOptions = SSH,
        after: int = typer.Option(0, "--after"),
        image_options: ImageOptions = IMAGE,
    ) -> int:
        got.update(host=host, ssh=ssh, after=after, image=image_options)
        return 0

    tiny = typer.Typer()
    tiny.command()(expand(command))
    tiny.command("other")(lambda: None)  # two commands: the first is named
    words = ["command", "--identity", "key", "--connect-timeout", "2.5", "--accept-new-host-key", "--after", "3"]
    words += ["--insecure-registry", "a:5000", "--insecure-registry", "b", "--platform", "linux/arm64"]
    result = CliRunner().invoke(tiny, words)
    assert result.exit_code == 0, result.output
    assert got["ssh"] == SshOptions(identity=Path("key"), connect_timeout=2.5, accept_new_host_key=True)
    assert got["image"] == ImageOptions(platform="linux/arm64", insecure=("a:5000", "b"))
    assert (got["host"], got["after"]) == ("h", 3)
    options = [param.name for param in typer.main.get_command(tiny).commands["command"].params]  # type: ignore[attr-defined]
    assert options == ["host", *(name for name, _, _ in SSH.options), "after", *(name for name, _, _ in IMAGE.options)]
