"""``simrollout import FRAMEWORK CONFIG``: a framework's own config as a scenario whose training
section (and inference tier) it fills, each field commented with the knob it came from."""

from __future__ import annotations

from pathlib import Path

import typer

from .entry import app
from .options import err


@app.command("import")
def import_config(
    framework: str = typer.Argument(..., help="verl, areal, slime, skyrl, prime-rl or nemo-rl."),
    config: Path = typer.Argument(
        ...,
        help="The framework's config: Hydra YAML or launch script (verl, SkyRL), YAML (AReaL), "
        "launch script (slime), TOML (prime-rl), YAML with its defaults chain (nemo-rl).",
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Scenario YAML to write (default: print it)."),
) -> None:
    """Read a framework's config into a scenario: B, G, mode, staleness, GPUs; list what it cannot map."""
    import yaml

    from ..errors import naming
    from ..outputs import atomic_file
    from ..scenario import scenario_from_dict
    from ..scenario.framework_configs import import_config as read
    from ..scenario.framework_configs import scenario_yaml, unmapped_lines

    with naming([config]):
        imp = read(framework, config)
        text = scenario_yaml(imp, config.stem)
        scenario_from_dict(yaml.safe_load(text), out or config)  # what is written loads and validates
    if out is None:
        typer.echo(text, nl=False)
    else:
        with atomic_file(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
    mapped = sorted(p.split(".", 1)[1] for p, m in imp.fields.items() if not m.source.startswith("assumed"))
    err.print(f"mapped from {config.name}: {', '.join(mapped)}", highlight=False, soft_wrap=True)
    err.print(f"not mapped ({len(imp.unmapped)} fields):", highlight=False)
    for line in unmapped_lines(imp):
        err.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)
    if out is not None:
        err.print(f"wrote {out}", highlight=False)
