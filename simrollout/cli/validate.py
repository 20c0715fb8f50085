"""``simrollout validate``: a real mini-rollout (or agent loop) against its simulation."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from ..errors import InputError
from ..outputs import atomic_folder
from .entry import app
from .options import TidyGroup, _json_option, _server, err

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

    trajectories, steps, levels = _sizes(trajectories, steps, concurrency, engine, iterations)
    _check_inputs(
        profile, tool_median, tool_p99, seed, repeat, engine, pin_slots, iterations, against, record
    )
    if against is not None:
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
    _validate_rollout(
        profile, backend, trajectories, steps, levels, tool, held_out, image, seed, record, repeat
    )


def _sizes(trajectories, steps, concurrency, engine: bool, iterations: bool):
    """The real run's size with its defaults (which depend on --engine and --iterations), checked:
    trajectories, steps and the concurrency levels."""
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
    return trajectories, steps, levels


def _check_inputs(
    profile, tool_median, tool_p99, seed, repeat, engine, pin_slots, iterations, against, record
):
    """The validation's other options, checked before anything runs."""
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
    if against is not None and record is not None:
        raise InputError(
            "--against compares a recorded validation with --profile; it takes no --record "
            "(the record it reads stays as it was)."
        )


def _validate_rollout(
    profile, backend, trajectories, steps, levels, tool, held_out, image, seed, record, repeat
):
    """``validate``: a real mini-rollout on ``backend`` against its simulation."""
    import pandas as pd

    from ..calibration.backends import get_backend
    from ..validation.validate import (
        HELD_OUT,
        OPS_COLUMNS,
        compare,
        exec_by_load,
        mini_rollout_scenario,
        real_rollout,
        speed_check,
    )
    from ..validation.validate import record as keep

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
        from ..validation.validate_engine import compare_engine, recorded_agent_loop

        scn, real = recorded_agent_loop(folder, profile)
        table, simulated, what = compare_engine(real, scn), "simulated", "agent loop"
    else:
        from ..validation.validate import compare, exec_by_load, read_ops, recorded_rollout

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
        from ..redact import scrub_folder

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
    from ..scenario import load_engine_profile
    from ..validation.validate_engine import agent_scenario, compare_engine, real_agent_loop, speed_check
    from ..validation.validate_engine import record as keep

    if not base_url:
        raise InputError("validate --engine: give --base-url of the server and --profile of its engine.")
    scn = agent_scenario(
        profile, trajectories, steps, levels, prompt=256, appended=64, output=32, tool=tool, seed=seed
    )
    import pandas as pd

    _warn_if_pinned_otherwise(profile, load_engine_profile(profile).provenance, pin)
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


def _warn_if_pinned_otherwise(profile: Path, provenance: dict, pin: bool) -> None:
    """A warning when the profile's probe kept its clients to slots (``probe openai --pin-slots``)
    and this validation does not, or the other way round (profiles that do not say: none)."""
    pinned = provenance.get("pinned_slots")
    if not isinstance(pinned, bool) or pinned == pin:
        return
    how = ("with", "without") if pinned else ("without", "with")
    err.print(
        f"warning: {profile}: its probe ran {how[0]} --pin-slots and this validation runs {how[1]}. "
        "llama.cpp runs a batch on scattered slots in several passes (unpinned decode runs read 36 ms "
        "a token at 4 in flight where pinned ones read 21), so the two sides time different batches: "
        "probe and validate the same way."
    )


def _validate_iterations(
    profile, base_url, model, levels, seed, record, extra, pin_slots=False, api_key_env=None
) -> None:
    """``validate --engine --iterations``: single iterations on a real server vs the profile's."""
    import json

    from ..scenario import Engine, load_engine_profile
    from ..validation.iteration_check import IterationPlan, iteration_check

    if not base_url:
        raise InputError("validate --engine --iterations: give --base-url of the server.")
    prof = load_engine_profile(profile)
    engine = Engine.model_validate(prof.engine)
    _warn_if_pinned_otherwise(profile, prof.provenance, pin_slots)
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
