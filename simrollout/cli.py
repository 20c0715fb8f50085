"""The ``simrollout`` command: one verb per pipeline stage."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from .calibration.probe import PROBE_LEVELS, REFERENCE
from .cli_help import TidyGroup
from .errors import InputError, SubstrateError
from .outputs import atomic_file, atomic_folder

app = typer.Typer(
    cls=TidyGroup,  # every command's and option's help rewrapped and its defaults shown (cli_help)
    add_completion=False,
    no_args_is_help=True,
    help="Simulate coding-agent RL rollouts: probe -> calibrate -> run -> sweep/plan -> validate.",
)
err = Console(stderr=True)


@app.callback()
def _root() -> None:
    """Simulate coding-agent RL rollouts: probe -> calibrate -> run -> sweep/plan -> validate."""


@app.command()
def run(
    scenario: Path = typer.Argument(..., help="Scenario YAML (version: 1)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Results folder (default: results/<name>)."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Processes (default: all cores)."),
    seed: int | None = typer.Option(None, help="The seed (default: the scenario's)."),
    fidelity: str | None = typer.Option(
        None, help="Fidelity: step, trajectory or auto (default: the scenario's, auto unless it sets one)."
    ),
    no_records: bool = typer.Option(False, "--no-records", help="Skip the per-trajectory Parquet files."),
    executor: str = typer.Option("local", help="local (processes), serial, or ray."),
    address: str | None = typer.Option(
        None, help="Ray cluster address (with --executor ray; default: start a local Ray)."
    ),
    timeline: Path | None = typer.Option(
        None,
        help="Also write a Chrome trace (open in ui.perfetto.dev) of the "
        "first cell to this file (default: none).",
    ),
    explain: bool = typer.Option(False, "--explain", help="Also print what every column of the table means."),
    uncertainty: bool = typer.Option(
        False,
        "--uncertainty",
        help="Also re-simulate over the profiles' bootstrap refits (common random numbers): "
        "<metric>_lo/_hi (5th/95th percentile) beside the headline metrics.",
    ),
) -> None:
    """Simulate a scenario and print worker-hours, cost, throughput and tails per substrate."""
    from .api import override
    from .executors import run_scenario
    from .report import print_table, write_results
    from .scenario import load_scenario

    scn = load_scenario(scenario)
    over = {k: v for k, v in {"seed": seed, "fidelity": fidelity}.items() if v is not None}
    if over:
        scn = override(scn, over)
    out = out or Path("results") / scn.name
    _out_folder(out)
    from .fidelity import unbacked

    if unbacked(scn):
        err.print(f"warning: {unbacked(scn)}", highlight=False, soft_wrap=True)
    if timeline is not None:
        from .timeline import check

        check(scn)
    with atomic_folder(out) as tmp, _progress_bar() as bar:
        task = bar.add_task("run", total=1.0)
        result = run_scenario(
            scn,
            jobs=jobs,
            keep_records=False,
            records_dir=None if no_records else tmp / "trajectories",
            progress=_ticker(bar, task),
            executor=executor,
            address=address,
        )
        if uncertainty:
            from .uncertainty import with_bands

            bar.update(task, description="bands")
            result = with_bands(scn, result, jobs, executor, None, address)
        paths = write_results(result, tmp)
    print_table(result)
    if explain:
        from .report import print_explain

        print_explain()
    extra = "" if no_records else " and per-trajectory Parquet in trajectories/"
    typer.echo(f"wrote {len(paths)} files{extra} to {out}/")
    if timeline is not None:
        from .timeline import write_timeline

        n = write_timeline(scn, timeline)
        typer.echo(f"wrote a timeline of {n:,} events to {timeline} (open it in ui.perfetto.dev)")


def _out_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: is a file; expected a results folder (existing or new).")


def _progress_bar():
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]simulating"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


@app.command()
def sweep(
    scenario: Path = typer.Argument(..., help="Scenario YAML (version: 1)."),
    set_: list[str] = typer.Option(
        ..., "--set", help="PATH=V1,V2,... (repeatable), e.g. cluster.concurrency=64,256."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Results folder (default: results/<name>-sweep)."
    ),
    executor: str = typer.Option("local", help="local (processes), serial, or ray."),
    address: str | None = typer.Option(
        None, help="Ray cluster address (with --executor ray; default: start a local Ray)."
    ),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Local processes (default: all cores)."),
    uncertainty: bool = typer.Option(
        False,
        "--uncertainty",
        help="Also re-simulate over the profiles' bootstrap refits (common random numbers): "
        "<metric>_lo/_hi (5th/95th percentile) beside the headline metrics.",
    ),
) -> None:
    """Run a grid over any scenario fields; one row per cell, plots against concurrency."""
    from .plots import plot_sweep
    from .scenario import load_scenario
    from .sweeps import parse_set
    from .sweeps import sweep as run_sweep

    scn = load_scenario(scenario)
    sets = dict(parse_set(s) for s in set_)
    out = out or Path("results") / f"{scn.name}-sweep"
    _out_folder(out)
    with _progress_bar() as bar:
        task = bar.add_task("sweep", total=1.0)
        df = run_sweep(
            scn,
            sets,
            executor=executor,
            jobs=jobs,
            address=address,
            progress=_ticker(bar, task),
        )
        if uncertainty:
            from .uncertainty import sweep_with_bands

            df = sweep_with_bands(scn, sets, df, executor, jobs, address)
    with atomic_folder(out) as tmp:
        df.to_csv(tmp / "sweep.csv", index=False)
        df.to_parquet(tmp / "sweep.parquet", index=False)
        paths = plot_sweep(df, tmp)
    cols = [
        *sets,
        "substrate",
        "concurrency",
        "training_steps_per_day",
        "staleness_max",
        "trajectories_per_hour",
        "makespan_hours",
        "duration_p99",
        "worker_hours",
        "cost_usd",
    ]
    cols = list(dict.fromkeys(c for c in cols if c in df.columns))
    shown = df[cols].copy()
    if uncertainty:  # the band beside each metric that has one: "point [lo-hi]"
        for c in cols:
            if f"{c}_lo" in df:
                shown[c] = [f"{v:,.2f}" + (f" [{lo:,.2f}-{hi:,.2f}]" if lo == lo and hi == hi else "")
                            for v, lo, hi in zip(df[c], df[f"{c}_lo"], df[f"{c}_hi"])]  # fmt: skip
    typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    if uncertainty:
        bands = "; ".join(f"{k}: {v}" for k, v in dict(zip(df.substrate, df.band)).items())
        typer.echo(f"bands [5th-95th percentile over the profiles' refits]: {bands}")
    typer.echo(f"wrote sweep.csv, sweep.parquet and {len(paths)} plots to {out}/")


@app.command()
def plan(
    scenario: Path = typer.Argument(..., help="Scenario YAML (version: 1)."),
    deadline: str | None = typer.Option(
        None, help="Finish within, e.g. 24h, 90m, 2d (default: no deadline)."
    ),
    throughput: float | None = typer.Option(
        None, help="At least this many trajectories per hour (default: no throughput target)."
    ),
    steps_per_day: float | None = typer.Option(
        None,
        "--steps-per-day",
        help="At least this many training steps per day (a scenario "
        "with training:; default: no such target).",
    ),
    budget: float | None = typer.Option(
        None, help="At most this many US dollars (then: fastest within; default: no budget)."
    ),
    concurrency: str | None = typer.Option(None, help="Levels to search (default 64..16384, powers of 2)."),
    warm_pool: str | None = typer.Option(
        None, "--warm-pool", help="Warm-pool sizes to search, sandboxes (default: the scenario's)."
    ),
    hosts: str | None = typer.Option(
        None, help="Host counts to search, self-managed fleets (default: the scenario's)."
    ),
    engines: str | None = typer.Option(
        None, help="Inference engine counts to search, e.g. 8,16,32 (default: the scenario's)."
    ),
    sample: int = typer.Option(
        20_000, help="Trajectories simulated per configuration (projected to the full run)."
    ),
    max_failed: float = typer.Option(
        0.001, "--max-failed", help="Share of trajectories that may time out or fail (0.001 = 0.1%)."
    ),
    check: int | None = typer.Option(
        None,
        help="Trajectories per replication of the check of the top candidates (default: the "
        "full run, at most 10 x --sample; 0 skips it).",
    ),  # fmt: skip
    sensitivity: float | None = typer.Option(
        None,
        help="Re-plan with the substrates' lifecycle latencies scaled by 1 -/+ this share, e.g. 0.2 "
        "(default: no re-plan).",
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Write the evaluated table (CSV) here (default: not written)."
    ),
    executor: str = typer.Option("local", help="local (processes), serial, or ray."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Local processes (default: all cores)."),
    uncertainty: bool = typer.Option(
        False,
        "--uncertainty",
        help="Also re-simulate the top candidates over the profiles' bootstrap refits and say how "
        "often the recommendation stays the winner.",
    ),
) -> None:
    """Find the cheapest substrate, concurrency, warm pool and host count that meets a target,
    counting only finished work, and check the winner at a larger size."""
    from .planner import Target, parse_duration
    from .planner import plan as run_plan
    from .scenario import load_scenario

    def ints(name, text, least=0):
        if text is None:
            return None
        try:
            vals = [int(v) for v in text.split(",")]
        except ValueError:
            raise InputError(f"--{name}: expected integers like 64,256, got '{text}'.") from None
        if any(v < least for v in vals):
            raise InputError(f"--{name}: expected integers of at least {least}, got '{text}'.")
        return vals

    scn = load_scenario(scenario)
    for name, v in (("throughput", throughput), ("budget", budget)):
        if v is not None and not (v > 0 and v < float("inf")):
            raise InputError(f"plan {scenario}: --{name} must be a positive number, got {v}.")
    if sample < 1:
        raise InputError(f"plan {scenario}: --sample must be at least 1, got {sample}.")
    if not 0 <= max_failed < 1:
        raise InputError(f"plan {scenario}: --max-failed must be a share in [0, 1), got {max_failed}.")
    if sensitivity is not None and not 0 < sensitivity < 1:
        raise InputError(f"plan {scenario}: --sensitivity must be a share in (0, 1), got {sensitivity}.")
    if check is not None and check < 0:
        raise InputError(f"plan {scenario}: --check must be >= 0, got {check}.")
    if steps_per_day is not None and not (0 < steps_per_day < float("inf")):
        raise InputError(f"plan {scenario}: --steps-per-day must be a positive number, got {steps_per_day}.")
    if uncertainty and (scn.training is not None or steps_per_day is not None):
        raise InputError(
            f"plan {scenario}: --uncertainty is not available for a scenario with a training section "
            "yet; run its recommendation with 'simrollout run --uncertainty' for its bands."
        )
    if scn.training is not None or steps_per_day is not None:
        _plan_training(scn, deadline, budget, throughput, steps_per_day, ints("concurrency", concurrency, 1),
                       ints("warm-pool", warm_pool), ints("hosts", hosts, 1), check != 0, max_failed,
                       executor, jobs, out)  # fmt: skip
        return
    target = Target(parse_duration(deadline) if deadline else None, throughput, budget)
    with _progress_bar() as bar:
        task = bar.add_task("plan", total=1.0)
        result = run_plan(
            scn,
            target,
            ints("concurrency", concurrency, 1),
            ints("warm-pool", warm_pool),
            ints("hosts", hosts, 1),
            sample=sample,
            executor=executor,
            jobs=jobs,
            progress=_ticker(bar, task),
            max_failed=max_failed,
            check=check,
            sensitivity=sensitivity,
            engines=ints("engines", engines, 1),
        )
    cols = ["substrate", "concurrency", "warm_pool", "hosts", "makespan_s", "cost_usd", "worker_hours",
            "completed", "timeouts", "failed", "binding"]  # fmt: skip
    if engines:
        cols.insert(4, "engines")
    table = result.table[cols].assign(makespan_h=lambda d: d.makespan_s / 3600).drop(columns="makespan_s")
    table["lost"] = [f"{x:.2%}" + ("" if ok else " (over budget)")
                     for x, ok in zip(result.table.lost_fraction, result.table.within_budget)]  # fmt: skip
    for c in ("completed", "timeouts", "failed"):
        table[c] = table[c].round().astype(int)
    typer.echo(table.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    if result.check is not None and len(result.check):
        chk = result.check.assign(
            makespan_h=lambda d: d.makespan_s / 3600, makespan_h_ci95=lambda d: d.makespan_s_ci95 / 3600
        )[["substrate", "concurrency", "warm_pool", "hosts", "makespan_h", "makespan_h_ci95", "cost_usd",
           "cost_usd_ci95", "lost_fraction", "meets"]]  # fmt: skip
        chk = chk.assign(lost=[f"{x:.3%}" for x in chk.lost_fraction]).drop(columns="lost_fraction")
        typer.echo(f"\ncheck of the top candidates ({int(result.check.checked.iloc[0]):,} trajectories x "
                   f"{int(result.check.replications.iloc[0])} replications, 95% CIs):")  # fmt: skip
        typer.echo(chk.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
    stability = None
    if uncertainty:
        from .uncertainty import describe_stability, plan_stability

        stability = describe_stability(plan_stability(scn, result, executor, jobs))
    _conclude_plan(result, out, stability)


def _conclude_plan(result, out: Path | None, extra: str | None = None) -> None:
    """A plan's last words: its description, the table to ``out``, exit 1 when nothing fits."""
    typer.echo(result.describe())
    if extra:
        typer.echo(extra)
    if out is not None:
        with atomic_file(out) as tmp:
            result.table.to_csv(tmp, index=False)
    if result.best is None:
        raise typer.Exit(1)


def _plan_training(
    scn,
    deadline,
    budget,
    throughput,
    steps_per_day,
    levels,
    pools,
    hosts,
    check,
    max_failed,
    executor,
    jobs,
    out,
) -> None:
    """``plan`` for a scenario with a training section: steps per day, a deadline or a budget."""
    from .plan_training import plan_training
    from .planner import Target, parse_duration

    given = [x is not None for x in (deadline, budget, throughput, steps_per_day)]
    if sum(given) != 1:
        raise InputError("plan: give exactly one of --steps-per-day, --deadline or --budget.")
    target = None
    if steps_per_day is None:
        target = Target(parse_duration(deadline) if deadline else None, throughput, budget)
    with _progress_bar() as bar:
        task = bar.add_task("plan", total=1.0)
        result = plan_training(
            scn, target, steps_per_day, levels, pools, hosts, executor=executor, jobs=jobs,
            progress=_ticker(bar, task),
            max_failed=max_failed, check=check,
        )  # fmt: skip
    t = result.table.assign(
        time_h=lambda d: d.time_s / 3600, masked=lambda d: [f"{x:.2%}" for x in d.masked_fraction]
    )
    t["masked"] = [m + ("" if ok else " (over budget)") for m, ok in zip(t.masked, t.within_budget)]
    cols = ["substrate", "concurrency", "warm_pool", "hosts", "steps_per_day", "time_h", "cost_usd",
            "cost_per_step", "masked", "bound"]  # fmt: skip
    typer.echo(t[cols].to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    if result.check is not None and len(result.check):
        typer.echo(
            f"\ncheck of the top candidates ({int(result.check.replications.iloc[0])} replications, 95% CIs):"
        )
        chk = result.check[["substrate", "concurrency", "warm_pool", "hosts", "steps_per_day",
                            "steps_per_day_ci95", "cost_usd", "cost_usd_ci95", "meets"]]  # fmt: skip
        typer.echo(chk.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    _conclude_plan(result, out)


@app.command()
def probe(
    backend: str = typer.Argument(
        ..., help="process, docker, kubernetes, daytona, e2b, modal, ec2 or openai."
    ),
    out: Path = typer.Option(
        None,
        "--out",
        "-o",
        help="JSONL file to append to (default: calibration/probes/<backend>-<date>.jsonl).",
    ),
    sandboxes: int = typer.Option(
        0, help="Sandbox lifecycles per concurrency level (0: max(32, 2 x level), enough to fill it)."
    ),
    commands: int = typer.Option(10, help="Exec round trips per sandbox."),
    concurrency: str = typer.Option(
        PROBE_LEVELS, help="Comma-separated levels; the default covers a contention curve's range."
    ),
    mode: str = typer.Option("sequential", help="sequential, staggered or burst."),
    gap: float = typer.Option(0.1, help="Seconds between starts in staggered mode."),
    image: str | None = typer.Option(
        None, help="Image (or snapshot, template, AMI); default: one that exists on the backend."
    ),
    command: str = typer.Option("true", help="Command whose exec round trip is timed."),
    think: float = typer.Option(
        0.0,
        help="Seconds each sandbox waits before each command, as an agent's LLM turn does (0: back to back).",
    ),
    think_draw: str = typer.Option(
        "fixed",
        help="fixed: every wait is --think; exponential: each drawn with mean --think, so sandboxes "
        "started together drift apart as a rollout's do.",
    ),
    reset: str | None = typer.Option(
        "rm -rf work && mkdir -p work/src && for i in 1 2 3 4 5 6 7 8; do echo $i > work/src/f$i; done",
        help="Command timed as a sandbox reset for the next sample of a task, in the sandbox's "
        "working folder ('' to skip).",
    ),
    image_mb: int = typer.Option(
        64, help="docker: time loading a task image of --image plus this many MB from an archive (0 to skip)."
    ),
    base_url: str | None = typer.Option(
        None, help="openai: the server's URL, http://host:port/v1 (required with openai; no default)."
    ),
    model: str = typer.Option("default", help="openai: the model name the server serves."),
    prompts: str = typer.Option("128,512,1024", help="openai: prompt lengths in tokens."),
    output_tokens: int = typer.Option(32, help="openai: output tokens per request."),
    requests: int = typer.Option(
        0, help="openai: requests per level and prompt length (0: max(8, 2 x level))."
    ),
    request_extra: str = typer.Option("{}", help="openai: extra request fields as JSON (e.g. logit_bias)."),
    pin_slots: bool = typer.Option(
        False, "--pin-slots", help="openai, llama.cpp's server: each client keeps to its own slot (id_slot)."
    ),
    api_key_env: str | None = typer.Option(
        None,
        "--api-key-env",
        help="openai: the environment variable holding the server's API key, sent as a bearer token "
        "(default: OPENAI_API_KEY when set, else no key). Never recorded or printed.",
    ),
    reference: int = typer.Option(
        REFERENCE,
        help="Sandboxes (openai: requests) per reference block, repeated at the start, middle and end "
        "at the first and the top level to read the machine's drift (0: no reference blocks).",
    ),
    tool_speed: bool = typer.Option(
        False,
        "--tool-speed",
        help="Time a CPU- and I/O-bound command set in one sandbox and on this host "
        "(calibrate turns it into the substrate's tool_speed).",
    ),
) -> None:
    """Time create, exec, file transfer and teardown of real sandboxes (or, with ``openai``, the
    first token and the output tokens of an OpenAI-compatible server); append JSONL records."""
    import datetime as dt

    if pin_slots and backend != "openai":
        raise InputError(
            f"--pin-slots pins a llama.cpp server's slots: it applies to 'probe openai', not {backend}."
        )
    if backend == "openai":
        return _probe_openai(
            out, concurrency, base_url, model, prompts, output_tokens, requests, request_extra, pin_slots,
            api_key_env,
            reference,
        )  # fmt: skip

    from .calibration.backends import get_backend
    from .calibration.probe import MODES, THINK_DRAWS, ProbePlan
    from .calibration.probe import probe as run_probe

    if mode not in MODES:
        raise InputError(f"--mode: expected one of {list(MODES)}, got '{mode}'.")
    if not gap >= 0 or gap == float("inf"):
        raise InputError(f"--gap: expected seconds >= 0 between staggered starts, got {gap}.")
    if not 0 <= think < float("inf"):
        raise InputError(f"--think: expected seconds >= 0 before each command, got {think}.")
    if think_draw not in THINK_DRAWS:
        raise InputError(f"--think-draw: expected one of {list(THINK_DRAWS)}, got '{think_draw}'.")
    if sandboxes < 0 or commands < 1:
        raise InputError(
            f"--sandboxes must be >= 0 (0: automatic) and --commands >= 1, got {sandboxes} and {commands}."
        )
    try:
        levels = tuple(int(c) for c in concurrency.split(","))
        assert all(c > 0 for c in levels)
    except (ValueError, AssertionError):
        raise InputError(
            f"--concurrency: expected positive integers like 1,8,32, got '{concurrency}'."
        ) from None
    out = out or Path("calibration/probes") / f"{backend}-{dt.date.today():%Y%m%d}.jsonl"
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory; expected a JSONL file to append probe records to.")
    if image and backend not in ("process", "docker") and image.endswith(":local"):
        raise InputError(
            f"--image {image}: a tag built on this machine (scripts/start-docker.sh), which the "
            f"{backend} backend cannot pull; give an image (or template, AMI) that exists there."
        )
    if image_mb < 0:
        raise InputError(f"--image-mb: expected MB >= 0 (0 skips the task image loads), got {image_mb}.")
    if reference < 0:
        raise InputError(f"--reference: expected sandboxes per reference block >= 0, got {reference}.")
    be = get_backend(backend)
    image = be.default_image if image is None else image
    plan = ProbePlan(
        sandboxes, commands, levels, mode, gap, image, command, reset=reset or None, image_mb=image_mb,
        think=think, think_draw=think_draw, reference=reference, tool_speed=tool_speed,
    )  # fmt: skip
    counts: dict[str, int] = {}

    def seen(rec):
        counts[rec.phase] = counts.get(rec.phase, 0) + 1

    def swept(n: int) -> None:
        if n:
            err.print(f"removed {n} stale sandbox(es) left by earlier probes")

    try:
        run_id = run_probe(be, plan, out, on_record=seen, on_sweep=swept)
    except SubstrateError as exc:
        raise SubstrateError(f"probe {backend}: {exc} ({sum(counts.values())} records {counts}.)") from None
    except (KeyboardInterrupt, Interrupted) as exc:
        err.print(f"interrupted; kept {sum(counts.values())} records in {out}; sandboxes removed")
        raise typer.Exit(getattr(exc, "code", 130)) from None
    typer.echo(f"run {run_id}: {sum(counts.values())} records {counts} appended to {out}")


def _server(base_url: str, model: str, api_key_env: str | None):
    """The OpenAI-compatible server, with the API key of ``--api-key-env`` (simrollout.redact)."""
    from .calibration.engine_probe import Server
    from .redact import api_key

    return Server(base_url, model, api_key=api_key(api_key_env), key_variable=api_key_env or "OPENAI_API_KEY")


def _levels(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(c) for c in text.split(","))
        assert values and all(c > 0 for c in values)
    except (ValueError, AssertionError):
        raise InputError(f"{option}: expected positive integers like 1,8,32, got '{text}'.") from None
    return values


def _json_option(text: str, option: str) -> dict:
    import json

    try:
        value = json.loads(text)
        assert isinstance(value, dict)
    except (ValueError, AssertionError):
        raise InputError(f"{option}: expected a JSON object of request fields, got {text!r}.") from None
    return value


def _probe_openai(
    out, concurrency, base_url, model, prompts, output_tokens, requests, request_extra, pin_slots=False,
    api_key_env=None,
    reference=REFERENCE,
) -> None:  # fmt: skip
    """``probe openai``: time an OpenAI-compatible server (simrollout.calibration.engine_probe)."""
    import datetime as dt

    from .calibration.engine_probe import EnginePlan, probe_engine
    from .redact import scrub

    if not base_url:
        raise InputError("probe openai: give --base-url (e.g. http://127.0.0.1:8080/v1) and --model.")
    levels = _levels(concurrency if concurrency != PROBE_LEVELS else "1,2,4,8", "--concurrency")
    lengths = _levels(prompts, "--prompts")
    if output_tokens < 2 or requests < 0:
        raise InputError(
            f"--output-tokens must be >= 2 (time per output token needs two) and --requests >= 0, "
            f"got {output_tokens} and {requests}."
        )
    out = out or Path("calibration/probes") / f"openai-{dt.date.today():%Y%m%d}.jsonl"
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory; expected a JSONL file to append probe records to.")
    extra = _json_option(request_extra, "--request-extra")
    if reference < 0:
        raise InputError(f"--reference: expected requests per reference block >= 0, got {reference}.")
    plan = EnginePlan(levels=levels, prompts=lengths, output=output_tokens, requests=requests, extra=extra,
                      pin_slots=pin_slots, reference=reference)  # fmt: skip
    counts = {"ok": 0, "failed": 0}

    def seen(rec) -> None:
        counts["ok" if rec.ok else "failed"] += 1
        if not rec.ok:
            err.print(f"request failed (recorded): {scrub(rec.error)}")

    server = _server(base_url, model, api_key_env)
    try:
        run_id = probe_engine(server, plan, out, on_record=seen)
    except (KeyboardInterrupt, Interrupted) as exc:
        err.print(f"interrupted; kept {sum(counts.values())} records in {out}")
        raise typer.Exit(getattr(exc, "code", 130)) from None
    typer.echo(f"run {run_id}: {counts['ok']} requests timed, {counts['failed']} failed; appended to {out}")


@app.command()
def cleanup(
    backend: str = typer.Argument(..., help="process, docker, kubernetes, daytona, e2b, modal or ec2."),
    older_than: str = typer.Option(
        "6h", help="Remove sandboxes older than this whose owner cannot be checked."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List only."),
) -> None:
    """List the project's sandboxes left by probes and remove the stale ones (owner gone, or old)."""
    from .calibration.backends import get_backend
    from .calibration.cleanup import sweep_stale
    from .planner import parse_duration

    try:
        max_age = parse_duration(older_than)
    except InputError:
        raise InputError(
            f"--older-than: expected a duration like 6h, 30m or 3600s, got '{older_than}'."
        ) from None
    be = get_backend(backend)
    try:
        found, stale = sweep_stale(be, max_age, dry_run)
    except Exception as exc:  # the engine stopped answering mid-way
        raise SubstrateError(
            f"cleanup {backend}: the engine did not answer ({type(exc).__name__}: {exc}); what was "
            "removed before it stopped is gone, the rest is left. Run the cleanup again once it answers."
        ) from None
    gone = {s.id for s in stale}
    for s in found:
        alive = s.owner_alive()
        state = "owner running" if alive else "owner gone" if alive is False else "owner unknown"
        verb = ("would remove" if dry_run else "removed") if s.id in gone else "kept"
        typer.echo(f"{verb:12s} {s.id[:24]:24s} run {s.run:12s} age {s.age() / 60:8.1f} min  {state}")
    typer.echo(f"{len(found)} labelled, {len(stale)} stale {'(dry run)' if dry_run else 'removed'}")


@app.command()
def calibrate(
    probes: list[Path] = typer.Argument(None, help="Probe record files (JSONL)."),
    out: Path = typer.Option(..., "--out", "-o", help="Profile YAML to write."),
    name: str | None = typer.Option(None, help="Substrate name (default: the file stem)."),
    criterion: str = typer.Option("aic", help="Model selection: aic or bic."),
    from_quantiles: Path | None = typer.Option(
        None,
        "--from-quantiles",
        help="Build from published percentiles (YAML spec) instead of probes (default: from probes).",
    ),
    kv_capacity: int | None = typer.Option(
        None, help="Engine records: KV-cache tokens per engine (default: what the server said, llama.cpp)."
    ),
    max_running: int | None = typer.Option(
        None, help="Engine records: requests an engine runs at once (default: the server's slots, else 256)."
    ),
    image_cache_gb: float = typer.Option(
        100.0, help="With task image pulls in the records: the hosts' image cache, GB (not measured)."
    ),
    contention_points: str = typer.Option(
        "per-operation",
        help="per-operation (each operation at its own count in flight) or per-level (a level's "
        "mean count against its median, as profiles before 2026-12 were made).",
    ),
    contention_weights: bool = typer.Option(
        True,
        help="Per-operation points: weigh each other phase's operations in a phase's load by how "
        "much they slow it (fitted), instead of counting every operation in flight as one.",
    ),
    contention_shared: bool = typer.Option(
        True,
        "--contention-shared/--contention-at-start",
        help="Per-operation points: creates and teardowns share the host (curves read on the load "
        "over each operation's life, contention.shared), or every operation takes the multiplier "
        "at its start (profiles before 2026-12-02).",
    ),
    bootstrap: int | None = typer.Option(
        None,
        help="Refits from resamples of whole sandboxes per level (plus the reference blocks' "
        "drift), stored for run/sweep/plan --uncertainty; default 50, 0 for none.",
    ),
    seed: int = typer.Option(0, help="Seed of the bootstrap's resamples."),
) -> None:
    """Fit latency distributions to probe records and write a substrate profile (or, from
    ``probe openai`` records, an engine profile)."""
    import warnings

    from .calibration.fit import calibrate as fit
    from .calibration.fit import from_quantiles as build
    from .calibration.fit import plot_fits, write_profile
    from .calibration.probe import read_records
    from .errors import load_yaml, naming

    name = name or out.stem
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory; expected the profile YAML file to write.")
    if from_quantiles is not None:
        spec, _ = load_yaml(from_quantiles)
        with naming([from_quantiles]):
            profile = build(spec, from_quantiles)
        write_profile(profile, out)
        typer.echo(f"wrote {out} (from published quantiles: {profile['provenance']['source']})")
        return
    if not probes:
        raise InputError("calibrate: give probe record files, or --from-quantiles SPEC.")
    if criterion not in ("aic", "bic"):
        raise InputError(f"--criterion: expected aic or bic, got '{criterion}'.")
    if not image_cache_gb > 0:
        raise InputError(f"--image-cache-gb: expected GB > 0, got {image_cache_gb}.")
    records = read_records(probes)
    files = ", ".join(map(str, probes))
    if not records:
        raise InputError(
            f"{files}: no probe records (empty, or only blank lines); expected the JSONL records "
            "'simrollout probe' appends."
        )
    if all(r["phase"] == "generate" for r in records):
        with naming(probes):
            return _calibrate_engine(records, name, out, kv_capacity, max_running)
    if any(r["phase"] == "generate" for r in records):
        raise InputError(
            f"{files}: mixes engine records (phase 'generate') with sandbox "
            "records; calibrate each kind from its own files."
        )
    with warnings.catch_warnings(record=True) as caught, naming(probes):
        warnings.simplefilter("always")
        profile, plots = fit(
            records, name, criterion, image_cache_gb, contention_points, contention_weights,
            contention_shared, bootstrap=bootstrap, seed=seed,
        )  # fmt: skip
    for w in caught:
        err.print(f"warning: {w.message}")
    write_profile(profile, out)
    png = plot_fits(plots, out.with_suffix(".png"))
    for phase, f in profile["fits"].items():
        rel = ", ".join(f"{k} {v:+.1%}" for k, v in f["quantile_rel_error"].items())
        ks = f["candidates"][f["selected"]]
        typer.echo(
            f"{phase:9s} n={f['n']:<5d} {f['selected']:20s} KS={ks['ks']:.3f} (p={ks['ks_pvalue']:.2f})"
            f"  quantile error {rel}  contention slope {f['contention_slope']:.3f}"
        )
        preferred = f["criterion_choice"]
        if preferred != f["selected"]:
            typer.echo(
                f"{'':9s} {criterion.upper()} preferred {preferred}, which the KS test rejects "
                f"(p={f['candidates'][preferred]['ks_pvalue']:.3f})"
            )
        if f.get("contention_weights"):
            weighed = ", ".join(f"{q} {v:.2f}" for q, v in f["contention_weights"].items())
            typer.echo(f"{'':9s} in its load, one operation in flight of: {weighed}")
        cov = f["coverage"]
        if cov and cov["under_sampled"]:
            for advice in cov["advice"]:
                err.print(f"{phase:9s} under-sampled: {advice}")
    if profile["substrate"]["contention"].get("shared"):
        typer.echo(
            "creates and teardowns share the host: their curves read the load over each operation's life."
        )
    _say_uncertainty(profile.get("uncertainty"))
    typer.echo(f"wrote {out} and {png}")


def _say_uncertainty(unc: dict | None) -> None:
    """``calibrate``'s lines on the drift (warnings past the validation targets) and the refits."""
    from .calibration.drift import describe

    if unc is None:
        typer.echo("drift: not measured (no reference blocks); no refits (--bootstrap 0)")
        return
    drift = unc.get("drift")
    for line in describe(drift if isinstance(drift, dict) else None):
        if "above the" in line:  # past a validation target
            err.print(f"warning: {line}")
        else:
            typer.echo(line)
    if not unc.get("refits") and str(unc.get("method", "")).startswith("none"):
        typer.echo(f"refits: {unc['method']}")
    if unc.get("refits"):
        spread = ", ".join(f"{ph} {s['p50_lo']:+.1%}/{s['p50_hi']:+.1%}" for ph, s in unc["spread"].items())
        drifted = "with the reference blocks' drift" if unc.get("drift_applied") else "without drift"
        typer.echo(f"bootstrap: {unc['refits']} refits, {drifted}; the refits' medians (5th/95th percentile "
                   f"against the fit): {spread}")  # fmt: skip


validate_app = typer.Typer(
    cls=TidyGroup,
    add_completion=False,
    help="Check the simulator against real runs: a real mini-rollout (or agent loop) against its "
    "simulation; `validate suite` runs the interleaved held-out suite.",
)
app.add_typer(validate_app, name="validate")


@validate_app.callback(invoke_without_command=True)
def validate(
    ctx: typer.Context,
    profile: Path | None = typer.Option(
        None,
        help="Profile calibrated from a probe of the same engine "
        "(no default: required but by 'validate suite').",
    ),
    backend: str = typer.Option("docker", help="Backend to run the real mini-rollout on."),
    trajectories: int = typer.Option(
        None, help="Trajectories per concurrency level (default: 64; --engine: 16)."
    ),
    steps: int = typer.Option(
        None, help="Commands (--engine: turns) per trajectory (default: 20; --engine: 6)."
    ),
    concurrency: str = typer.Option(
        None, help="Comma-separated levels (default: 1,8,32; --engine: 1,4,8; --iterations: 1,2,4,8)."
    ),
    tool_median: float = typer.Option(0.05, help="Median of the lognormal command duration, s."),
    tool_p99: float = typer.Option(0.5, help="p99 of the lognormal command duration, s."),
    held_out: bool = typer.Option(
        False,
        "--held-out",
        help="The held-out workload (validation.HELD_OUT): another tool mix, an LLM wait, "
        "staggered arrivals, its own levels (overrides --concurrency and the tool options).",
    ),  # fmt: skip
    image: str = typer.Option("simrollout-busybox:local", help="Image."),
    seed: int = typer.Option(0, help="Seed of the drawn command durations."),
    record: Path | None = typer.Option(
        None, help="Folder to record inputs, measurements and comparison (default: not recorded)."
    ),
    engine: bool = typer.Option(
        False,
        "--engine",
        help="Validate an engine profile (--profile) against a real OpenAI-compatible "
        "server (--base-url, --model) with a multi-turn agent loop.",
    ),  # fmt: skip
    base_url: str | None = typer.Option(
        None, help="--engine: the server's URL, http://host:port/v1 (required with --engine; no default)."
    ),
    model: str = typer.Option("default", help="--engine: the model name."),
    request_extra: str = typer.Option("{}", help="--engine: extra request fields as JSON."),
    api_key_env: str | None = typer.Option(
        None,
        "--api-key-env",
        help="--engine: the environment variable holding the server's API key, sent as a bearer token "
        "(default: OPENAI_API_KEY when set, else no key). Never recorded or printed.",
    ),
    pin_slots: bool = typer.Option(
        False,
        "--pin-slots",
        help="--engine, llama.cpp's server: each of c clients keeps to its own slot of 0..c-1 "
        "(id_slot), so a batch is one forward pass as in the engine model.",
    ),  # fmt: skip
    repeat: int = typer.Option(
        1,
        help="Real runs of the rollout (--engine: of the agent loop), compared by their median.",
    ),
    iterations: bool = typer.Option(
        False,
        "--iterations",
        help="With --engine: time single iterations on the server (decode batches of --concurrency "
        "requests, default 1,2,4,8, at three contexts; prefills mixed with decodes) beside "
        "--profile's cost for each; no agent loop.",
    ),  # fmt: skip
    against: Path | None = typer.Option(
        None,
        "--against",
        help="A recorded validation folder (validation/...): compare its real rollout (with "
        "--engine: its agent loop) with --profile's simulation of the same workload, running "
        "nothing real (its workload and levels replace the workload options; default: run for real).",
    ),  # fmt: skip
) -> None:
    """Run a real mini-rollout, simulate the same, and print the difference per metric and target.
    Exit code 1 when a target is missed. `validate suite` runs the interleaved held-out suite."""
    if ctx.invoked_subcommand is not None:
        return
    if profile is None:
        raise InputError("validate: give --profile (a profile calibrated from a probe of the same engine), "
                         "or run 'simrollout validate suite'.")  # fmt: skip

    import pandas as pd

    from .calibration.backends import get_backend
    from .calibration.validate import (
        HELD_OUT,
        OPS_COLUMNS,
        compare,
        exec_by_load,
        mini_rollout_scenario,
        real_rollout,
        speed_check,
    )
    from .calibration.validate import record as keep

    trajectories = trajectories if trajectories is not None else (16 if engine else 64)
    steps = steps if steps is not None else (6 if engine else 20)
    concurrency = concurrency or ("1,2,4,8" if iterations else "1,4,8" if engine else "1,8,32")
    try:
        levels = [int(c) for c in concurrency.split(",")]
        assert all(0 < c <= 10_000 for c in levels) and 0 < trajectories <= 100_000 and 0 < steps <= 10_000
    except (ValueError, AssertionError):
        raise InputError(
            f"validate: expected --concurrency as positive integers like 1,8,32 (got '{concurrency}'), "
            f"--trajectories of 1 to 100,000 and --steps of 1 to 10,000, a real mini-rollout's size (got "
            f"{trajectories} and {steps})."
        ) from None
    if not profile.is_file():
        raise InputError(f"--profile {profile}: file not found; calibrate one with 'simrollout calibrate'.")
    if not (0 < tool_median < tool_p99 <= 86_400):
        raise InputError(
            f"--tool-median and --tool-p99: expected seconds with 0 < median < p99 <= 86,400 (a day), got "
            f"{tool_median} and {tool_p99}."
        )
    if seed < 0:
        raise InputError(f"--seed: expected a seed >= 0, got {seed}.")
    if repeat < 1:
        raise InputError(f"--repeat: expected a positive count of real runs, got {repeat}.")
    if (pin_slots or iterations) and not engine:
        raise InputError("--pin-slots and --iterations apply to an engine validation: give --engine.")
    if against is not None and (pin_slots or iterations):
        raise InputError("--against re-simulates a recorded agent loop; it runs nothing, so it takes "
                         "no --pin-slots or --iterations.")  # fmt: skip
    if against is not None:
        if record is not None:
            raise InputError(
                "--against compares a recorded validation with --profile; it takes no --record "
                "(the record it reads stays as it was)."
            )
        return _against(against, profile, engine)
    tool = {"kind": "lognormal", "median": tool_median, "p99": tool_p99}
    if engine:
        extra = _json_option(request_extra, "--request-extra")
        if iterations:
            return _validate_iterations(
                profile, base_url, model, levels, seed, record, extra, pin_slots, api_key_env
            )
        return _validate_engine(
            profile,
            base_url,
            model,
            trajectories,
            steps,
            levels,
            tool,
            seed,
            record,
            extra,
            repeat,
            pin_slots,
            api_key_env,
        )
    llm, rate = 0, None
    if held_out:
        levels, tool, llm, rate = (
            HELD_OUT["levels"],
            HELD_OUT["tool"],
            HELD_OUT["llm"],
            HELD_OUT["arrival_rate"],
        )
    scn = mini_rollout_scenario(profile, trajectories, steps, levels, tool, seed, llm, rate)
    be = get_backend(backend)
    timed: list = []  # every real operation, for the execs' overhead by load
    runs, speed = _checked_runs(
        repeat,
        lambda k: real_rollout(be, scn, image, run=k, ops=timed),
        lambda at: speed_check(be, profile, image, at, seed),
    )
    real = pd.concat(runs, ignore_index=True)
    table = compare(real, scn)
    ops = pd.DataFrame(timed, columns=OPS_COLUMNS)
    kind = "held-out workload" if held_out else "workload"
    title = f"validate: {trajectories} x {steps} steps on {backend}, {kind}"
    if repeat > 1:
        title += f", real: median of {repeat} runs"
    note = _speed_note(speed, "8 sandboxes at once, infrastructure time per trajectory")
    by_load = exec_by_load(ops, scn.substrates[0])
    _conclude(title, "simulated\n(95% range)", table, record,
              lambda tmp: keep(tmp, scn, real, table, be, speed, ops, by_load),
              notes=[note, _exec_load_note(by_load)])  # fmt: skip


@validate_app.command("suite")
def validate_suite(
    record: Path = typer.Option(
        Path("validation"),
        "--record",
        help="Folder of REPORT.md, suite.json and "
        "history.csv (each cell's probes, runs and profile go under <record>/<target>/).",
    ),
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="An OpenAI-compatible server's URL (llama.cpp's): "
        "run the engine suite (agent loop) instead of the Docker one (default: none, the Docker suite).",
    ),
    model: str = typer.Option("tiny", help="--engine: the model name."),
    request_extra: str = typer.Option("{}", help="--engine: extra request fields as JSON."),
    levels: str | None = typer.Option(
        None, help="Comma-separated levels in flight (default: Docker 8,16,32,48; engine 1,4,8)."
    ),
    workloads: str | None = typer.Option(
        None, help="Comma-separated held-out workloads (default: all of the target's)."
    ),
    repeats: int = typer.Option(
        3, help="Real repeats (runs, and as many probe blocks) per cell, at least 3 for a verdict."
    ),
    max_repeats: int = typer.Option(6, help="Repeats (runs) a cell may grow to while it is indeterminate."),
    bootstrap: int | None = typer.Option(
        None, help="Refits of each cell's profile for its band (default: the fit's)."
    ),
    seed: int = typer.Option(0, help="Seed of the blocks' order."),
    image: str = typer.Option("simrollout-busybox:local", help="Docker: the image."),
    budget: float | None = typer.Option(
        None,
        help="Minutes: past them no repeats are added (each cell "
        "keeps its base blocks; a cell left indeterminate says so; default: no limit).",
    ),
    refit: bool = typer.Option(
        False,
        "--refit",
        help="Run nothing real: fit and simulate every recorded "
        "cell again from its own probe blocks and real runs (another fit or model "
        "version on the same sitting).",
    ),
) -> None:
    """Held-out cells (workload x concurrency), each as probe blocks and real blocks in a seeded,
    balanced alternating order; each cell's profile fitted from its own probe blocks; per cell and
    metric the real mean with its 95% CI, the simulated point with its 90% band, the error and a
    verdict. Writes <record>/REPORT.md, suite.json and a row of history.csv."""
    from .calibration.suite_cli import run_suite_command

    run_suite_command(record, engine, model, _json_option(request_extra, "--request-extra"), levels,
                      workloads, repeats, max_repeats, bootstrap, seed, image, budget, refit,
                      echo=typer.echo)  # fmt: skip


def _exec_load_note(by_load) -> str:
    """One line on the real execs' overhead against the profile's curve at the loads they started
    under (``exec_by_load``)."""
    bands = ", ".join(f"{r.load}: {r.diff_pct:+.0f}% ({r.execs})" for r in by_load.iloc[:-1].itertuples())
    last = by_load.iloc[-1]
    return (
        f"exec overhead at the real execs' loads, the profile's curve against the real (operations in "
        f"flight: profile over real, execs): {bands}; every exec {1000 * last.profile:.0f} ms against "
        f"{1000 * last.real:.0f} ms ({last.diff_pct:+.0f}%)"
    )


def _against(folder: Path, profile: Path, engine: bool) -> None:
    """``validate --against``: a recorded real run (a sandbox rollout, or with ``engine`` an
    agent loop) against ``profile``'s simulation of the same workload, nothing real run."""
    notes = []
    if engine:
        from .calibration.validate_engine import compare_engine, recorded_agent_loop

        scn, real = recorded_agent_loop(folder, profile)
        table, simulated, what = compare_engine(real, scn), "simulated", "agent loop"
    else:
        from .calibration.validate import compare, exec_by_load, read_ops, recorded_rollout

        scn, real = recorded_rollout(folder, profile)
        table, simulated, what = compare(real, scn), "simulated\n(95% range)", "rollout"
        if (folder / "ops.csv").is_file():  # recorded with every operation timed
            notes = [_exec_load_note(exec_by_load(read_ops(folder / "ops.csv"), scn.substrates[0]))]
    runs = real["run"].nunique() if "run" in real else 1
    title = f"validate: the real {what} recorded in {folder} against {profile.name}"
    if runs > 1:
        title += f", real: median of {runs} runs"
    _conclude(title, simulated, table, None, None, notes=notes)


def _checked_runs(repeat: int, run, check):
    """``repeat`` real runs (``run(k)``), the engine's speed checked against the profile
    (``check(label)``) before every run and after the last: the runs and the checks' table."""
    import pandas as pd

    runs, checks = [], []
    for k in range(repeat):
        checks.append(check(f"before run {k + 1}"))
        runs.append(run(k))
    checks.append(check("after"))
    return runs, pd.DataFrame(checks)


def _speed_note(speed, what: str) -> str:
    """One line on the engine's speed checks against the profile, with a warning past 10%."""
    note = f"engine speed against the profile ({what}; real over profile): " + ", ".join(
        f"{c.check} {c.drift_pct:+.0f}%" for c in speed.itertuples()
    )
    if speed.drift_pct.abs().max() > 10:
        note += (". The engine ran more than 10% off its profile's speed during this validation: a "
                 "miss of about that size is the machine's, not the model's; probe again and validate "
                 "in one sitting.")  # fmt: skip
    return note


def _conclude(title: str, simulated: str, table, record: Path | None, keep, notes=()) -> None:
    """Print a validation's comparison with its targets and ``notes``, record it
    (``keep(folder)``) when asked, and exit 1 when a target is missed."""
    from rich import box
    from rich.table import Table

    rows, missed = [], 0
    for _, r in table.iterrows():
        tgt = r.target_pct
        ok = tgt is None or tgt != tgt or abs(r.diff_pct) <= tgt
        missed += not ok
        mark = "" if tgt is None or tgt != tgt else f"{'ok' if ok else 'MISSED'}\n±{tgt:.0f}%"
        real, sim = f"{r.real:.3f}", f"{r.simulated:.3f}"
        if r.get("runs", 1) > 1:  # the median of repeated real runs, and their spread
            real += f"\n({r.real_min:.3g}-{r.real_max:.3g})"
        if "sim_lo" in r:  # the mean of the substrate's draws, and their 95% range
            sim += f"\n({r.sim_lo:.3g}-{r.sim_hi:.3g})"
        rows.append((str(r.concurrency), r.metric, real, sim, f"{r.diff_pct:+.1f}", mark))
    t = Table(title=title, box=box.SIMPLE_HEAD)
    for col in ("in\nflight", "metric", "real", simulated, "diff %", "target"):
        t.add_column(col, justify="right", no_wrap=True)
    for row in rows:
        t.add_row(*row)
    # never a name or figure cut short: on a narrower terminal the lines wrap instead
    need = Console(width=10_000).measure(t).maximum
    Console(width=max(Console().width, need)).print(t)
    for note in notes:
        typer.echo(note)
    if record is not None:
        from .redact import scrub_folder

        with atomic_folder(record) as tmp:
            keep(tmp)
            scrub_folder(tmp)  # no credential in a record, whatever wrote it
        typer.echo(f"recorded in {record}/")
    if missed:
        err.print(f"{missed} target(s) missed")
        raise typer.Exit(1)


def _validate_engine(
    profile, base_url, model, trajectories, steps, levels, tool, seed, record, extra, repeat=1, pin=False,
    api_key_env=None,
) -> None:  # fmt: skip
    """``validate --engine``: the agent loop on a real server vs its simulation."""
    from .calibration.validate_engine import agent_scenario, compare_engine, real_agent_loop, speed_check
    from .calibration.validate_engine import record as keep

    if not base_url:
        raise InputError("validate --engine: give --base-url of the server and --profile of its engine.")
    scn = agent_scenario(
        profile, trajectories, steps, levels, prompt=256, appended=64, output=32, tool=tool, seed=seed
    )
    import pandas as pd

    server = _server(base_url, model, api_key_env)
    server.check()  # an unreachable URL or a refused key before any timing
    runs, speed = _checked_runs(
        repeat,
        lambda k: real_agent_loop(server, scn, seed, extra, run=k, pin=pin),
        lambda at: speed_check(server, scn, extra, at, seed),
    )
    real = pd.concat(runs)
    table = compare_engine(real, scn)
    title = f"validate --engine: {trajectories} x {steps} turns on {server.base_url}"
    if repeat > 1:
        title += f", real: median of {repeat} runs"
    note = _speed_note(speed, "lone 128-token requests, latency")
    _conclude(title, "simulated", table, record,
              lambda tmp: keep(tmp, scn, real, table, server, extra, profile, record, speed, pin),
              notes=[note])  # fmt: skip


def _validate_iterations(
    profile, base_url, model, levels, seed, record, extra, pin_slots=False, api_key_env=None
) -> None:
    """``validate --engine --iterations``: single iterations on a real server vs the profile's."""
    import json

    from .calibration.iteration_check import IterationPlan, iteration_check
    from .scenario import Engine, load_engine_profile

    if not base_url:
        raise InputError("validate --engine --iterations: give --base-url of the server.")
    engine = Engine.model_validate(load_engine_profile(profile).engine)
    server = _server(base_url, model, api_key_env)
    plan = IterationPlan(decodes=tuple(levels), seed=seed, pin_slots=pin_slots)
    table = iteration_check(server, engine, plan, extra)
    if table.empty:
        raise InputError(
            f"{server.base_url}: no iteration could be timed (every round's text was held back or a decode "
            "ended first); give --request-extra a logit_bias that keeps the output to whole characters."
        )

    def keep(tmp: Path) -> None:
        table.to_csv(tmp / "iterations.csv", index=False)
        info = {"profile": profile.name, "server": server.info(), "plan": plan.__dict__,
                "request_extra": sorted(extra)}  # fmt: skip
        (tmp / "iterations.json").write_text(json.dumps(info, indent=2, default=list))

    note = ("in flight: requests in the batch; real: the median of the rounds (their range); "
            "no targets: this says where an agent-loop miss sits, iteration costs or batching.")  # fmt: skip
    title = f"validate --engine --iterations: {server.base_url} against {profile.name}"
    _conclude(title, "profile", table, record, keep, notes=[note])


class Interrupted(BaseException):
    """Ctrl-C (code 130) or SIGTERM (143), raised where the program stands so cleanups run."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


_PENDING: list[int] = []  # interrupts received: one raised where Python cannot propagate it
# (a finalizer, a callback that swallows exceptions) is raised again at the next progress tick


def _interrupt(signum, frame):
    import signal

    code = 143 if signum == signal.SIGTERM else 130
    _PENDING.append(code)
    raise Interrupted(code)


def _ticker(bar, task):
    """A progress callback for ``bar`` that raises a pending interrupt again."""

    def tick(done: int, total: int) -> None:
        if _PENDING:
            raise Interrupted(_PENDING[-1])
        bar.update(task, completed=done / total)

    return tick


def _calibrate_engine(records, name, out, kv_capacity, max_running) -> None:
    from .calibration.engine_fit import engine_profile
    from .calibration.fit import write_profile

    for opt, v in (("--kv-capacity", kv_capacity), ("--max-running", max_running)):
        if v is not None and v < 1:
            raise InputError(f"{opt}: expected a positive count, got {v}.")
    profile = engine_profile(records, name, kv_capacity, max_running)
    write_profile(profile, out)
    it = profile["engine"]["iteration"]
    typer.echo(
        f"engine: iteration {it['base'] * 1e3:.2f} ms + {it['per_prefill_token'] * 1e6:.2f} us/prefill "
        f"token + {it['per_prefill_attention'] * 1e9:.2f} ns/prefill attention pair + "
        f"{it['per_decode'] * 1e3:.3f} ms/decode + {it['per_context_token'] * 1e9:.2f} ns/context "
        f"token; KV {profile['engine']['kv_capacity_tokens']:,} tokens"
    )
    for key, row in profile["fit"].items():
        if "tpot_rel_error" in row:
            ttft = f"  TTFT {row['ttft_rel_error']:+.1%}" if "ttft_rel_error" in row else ""
            typer.echo(f"  {key:15s} n={row['n']:<3d} TPOT {row['tpot_rel_error']:+.1%}{ttft}")
    _say_uncertainty(profile["uncertainty"])
    typer.echo(f"wrote {out}")


from .cli_workload import workload as _workload  # noqa: E402

app.command()(_workload)


def main() -> None:
    """Entry point: input errors become one paragraph on stderr and exit code 2; Ctrl-C exits
    130 and SIGTERM 143, with one line (results folders are only replaced by complete runs)."""
    import signal

    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        app()
    except Interrupted as exc:
        import os

        err.print("interrupted: nothing half-written; earlier results are as they were")
        sys.stdout.flush()
        sys.stderr.flush()
        # everything was cleaned up on the way out (workers ended, partial output removed); skip
        # the interpreter's exit hooks, which race with the process pool just torn down
        os._exit(exc.code)
    except (InputError, SubstrateError) as exc:
        from rich.markup import escape

        from .redact import scrub

        err.print(f"[red]error:[/red] {escape(scrub(str(exc)))}", highlight=False, soft_wrap=True)
        sys.exit(2 if isinstance(exc, InputError) else 1)


if __name__ == "__main__":
    main()
