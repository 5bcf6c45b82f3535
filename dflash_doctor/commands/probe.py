from __future__ import annotations

from typing import Optional

import typer

from ..model import EXIT_OK
from ..engines import DEFAULT_ENGINE, ENGINE_NAMES
from .options import OnlyOption


def probe_script(
    only: Optional[list[str]] = OnlyOption,
    engine: str = typer.Option(
        DEFAULT_ENGINE.name, "--engine", help=f"Whose package the script collects: {ENGINE_NAMES}."
    ),
) -> int:
    """Print the probe as a standalone script. For a fleet engine: the script needs only the
    standard library. Run it on each server with the interpreter that runs vLLM or SGLang
    (e.g. `python3 probe.py > HOST.probe`); then `dflash-doctor check --from-probe DIR`
    evaluates every answer locally.
    """
    import json

    from ..rulefile import select
    from ..targets.probing import probe_request, probe_source
    from ..model import from_option

    chosen = from_option(engine)
    request = json.dumps(probe_request(select(only), chosen), sort_keys=True)
    source = probe_source().replace('REQUEST = {"files": [], "anchors": []}', f"REQUEST = {request}", 1)
    typer.echo("#!/usr/bin/env python3", nl=True)
    typer.echo(source, nl=False)
    return EXIT_OK


def register(app: typer.Typer) -> None:
    app.command("probe-script")(probe_script)
