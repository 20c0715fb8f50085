"""``simrollout probe BACKEND``: measure a substrate (or an OpenAI-compatible engine) into probe
records that ``calibrate`` fits."""

from __future__ import annotations

from pathlib import Path

import typer

from ..calibration.probe import PROBE_LEVELS, REFERENCE
from ..errors import InputError, SubstrateError
from ..outputs import writable_file
from .entry import Interrupted, app
from .options import _json_option, _levels, _server, err


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
    appends: str = typer.Option(
        "16,32,64,128",
        help="openai: new tokens after the shared 1,024-token prefix of the resumed pairs (several sizes "
        "time how the cost of a cached prefix changes with the append; the fit reads where it switches).",
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
            appends,
        )  # fmt: skip

    from ..calibration.backends import get_backend
    from ..calibration.probe import MODES, THINK_DRAWS, ProbePlan
    from ..calibration.probe import probe as run_probe

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
    writable_file(out, "-o")
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


def _probe_openai(
    out, concurrency, base_url, model, prompts, output_tokens, requests, request_extra, pin_slots,
    api_key_env,
    reference,
    appends,
) -> None:  # fmt: skip
    """``probe openai``: time an OpenAI-compatible server (simrollout.calibration.engine_probe)."""
    import datetime as dt

    from ..calibration.engine_probe import EnginePlan, probe_engine
    from ..redact import scrub

    if not base_url:
        raise InputError("probe openai: give --base-url (e.g. http://127.0.0.1:8080/v1) and --model.")
    levels = _levels(concurrency if concurrency != PROBE_LEVELS else "1,2,4,8", "--concurrency")
    lengths = _levels(prompts, "--prompts")
    sizes = _levels(appends, "--appends")
    if output_tokens < 2 or requests < 0:
        raise InputError(
            f"--output-tokens must be >= 2 (time per output token needs two) and --requests >= 0, "
            f"got {output_tokens} and {requests}."
        )
    out = out or Path("calibration/probes") / f"openai-{dt.date.today():%Y%m%d}.jsonl"
    if out.is_dir():
        raise InputError(f"-o {out}: is a directory; expected a JSONL file to append probe records to.")
    writable_file(out, "-o")
    extra = _json_option(request_extra, "--request-extra")
    if reference < 0:
        raise InputError(f"--reference: expected requests per reference block >= 0, got {reference}.")
    plan = EnginePlan(levels=levels, prompts=lengths, output=output_tokens, requests=requests, extra=extra,
                      pin_slots=pin_slots, reference=reference, appends=sizes)  # fmt: skip
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
