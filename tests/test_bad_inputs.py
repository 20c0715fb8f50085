"""Classes of bad input across the verbs: exit code 2, one paragraph naming the file (or option)
and what was expected, never a traceback."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import cli, make


def _yaml(tmp_path, data, name="s.yaml"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return p


def _bytes(tmp_path, data: bytes, name="s.yaml"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


GOOD = yaml.safe_dump(make())
RECORD = {"run_id": "r", "backend": "b", "backend_version": "0", "engine_version": "0", "host": "h",
          "image": "i", "phase": "create", "start": 0.0, "latency": 0.1, "concurrency": 1,
          "mode": "sequential", "ok": True, "error": None, "sandbox": 0}  # fmt: skip

# name -> (files to write: {name: str | bytes | dict}, argv with {name} placeholders, words expected)
CASES = {
    "binary scenario": ({"s.yaml": b"\x89PNG\r\n\x1a\n\x00\x00"}, ["run", "{s.yaml}"], ["not UTF-8", "byte 0"]),
    "utf-16 scenario": ({"s.yaml": GOOD.encode("utf-16")}, ["run", "{s.yaml}"], ["not UTF-8"]),
    "latin-1 comment": ({"s.yaml": ("# caf\xe9\n" + GOOD).encode("latin-1")}, ["run", "{s.yaml}"], ["not UTF-8", "byte 5"]),
    "deep nesting": ({"s.yaml": "[" * 20000 + "]" * 20000}, ["run", "{s.yaml}"], ["nested too deeply"]),
    "lognormal mu 1000": ({"s.yaml": make(**{"workload.llm_time": {"kind": "lognormal", "mu": 1000, "sigma": 1}})},
                          ["run", "{s.yaml}"], ["workload.llm_time"]),
    "inf slowdown": ({"s.yaml": GOOD.replace("concurrency: 1", "concurrency: 1\n  inference: {engines: 2, slowdown: .inf}")},
                     ["run", "{s.yaml}"], ["cluster.inference.slowdown", "finite"]),
    "inf contention": ({"s.yaml": make(**{"substrates.0.contention": {"exec": float("inf")}})},
                       ["run", "{s.yaml}"], ["substrates.0.contention.exec"]),
    "boolean concurrency": ({"s.yaml": make(**{"cluster.concurrency": True})}, ["run", "{s.yaml}"],
                            ["cluster", "'concurrency' is true", "expected a number"]),
    "zero steps": ({"s.yaml": make(**{"workload.steps": 0})}, ["run", "{s.yaml}"], ["workload", "at least 1"]),
    "directory as scenario": ({"d/x": "x"}, ["run", "{d}"], ["is a directory"]),
    "run --out a file": ({"s.yaml": make(), "f.txt": "x"}, ["run", "{s.yaml}", "--out", "{f.txt}"], ["--out", "is a file"]),
    "sweep bad YAML value": ({"s.yaml": make()}, ["sweep", "{s.yaml}", "--set", "name=[oops"], ["--set", "YAML"]),
    "sweep bad field names the file": ({"s.yaml": make()}, ["sweep", "{s.yaml}", "--set", "workload.steps=-4"],
                                       ["s.yaml with --set", "workload.steps"]),
    "plan concurrency 0": ({"s.yaml": make()}, ["plan", "{s.yaml}", "--deadline", "1h", "--concurrency", "0"],
                           ["--concurrency", "at least 1"]),
    "plan negative throughput": ({"s.yaml": make()}, ["plan", "{s.yaml}", "--throughput", "-5"],
                                 ["--throughput", "positive"]),
    "calibrate a number line": ({"p.jsonl": "42\n"}, ["calibrate", "{p.jsonl}", "-o", "{out.yaml}"],
                                ["p.jsonl", "line 1", "JSON object"]),
    "calibrate a word latency": ({"p.jsonl": json.dumps({**RECORD, "latency": "fast"}) + "\n"},
                                 ["calibrate", "{p.jsonl}", "-o", "{out.yaml}"], ["line 1", "latency", "number"]),
    "calibrate an empty file": ({"p.jsonl": ""}, ["calibrate", "{p.jsonl}", "-o", "{out.yaml}"], ["p.jsonl", "no probe records"]),
    "calibrate a blank-lines file": ({"p.jsonl": "\n \n"}, ["calibrate", "{p.jsonl}", "-o", "{out.yaml}"],
                                     ["p.jsonl", "no probe records"]),
    "calibrate too few": ({"p.jsonl": json.dumps(RECORD) + "\n"}, ["calibrate", "{p.jsonl}", "-o", "{out.yaml}"],
                          ["p.jsonl", "at least 10"]),
    "probe -o a directory": ({"d/x": "x"}, ["probe", "process", "-o", "{d}"], ["is a directory"]),
    "probe -o under a file": ({"f": "x"}, ["probe", "process", "-o", "{f/p.jsonl}"], ["f is a file, not a folder"]),
    "probe negative sandboxes": ({}, ["probe", "process", "--sandboxes", "-3", "-o", "{p.jsonl}"], ["--sandboxes"]),
    "probe zero commands": ({}, ["probe", "process", "--commands", "0", "-o", "{p.jsonl}"], ["--commands"]),
    "validate bad levels": ({"x.yaml": "a: 1"}, ["validate", "--profile", "{x.yaml}", "--concurrency", "1,x"],
                            ["--concurrency"]),
    "validate missing profile": ({}, ["validate", "--profile", "{nope.yaml}"], ["nope.yaml", "not found"]),
}  # fmt: skip


def _training(policy=None, **tr):
    d = make(**({"policy": policy} if policy else {}))
    d["workload"].pop("trajectories")
    d["training"] = {"prompts_per_step": 4, "samples_per_prompt": 4, "steps": 3, "train_time": 5, **tr}
    return {"s.yaml": d}


RUN = ["run", "{s.yaml}", "-o", "{out}"]
CASES.update({
    "training zero prompts": (_training(prompts_per_step=0), RUN, ["training.prompts_per_step", "greater than 0"]),
    "training negative group": (_training(samples_per_prompt=-2), RUN, ["training.samples_per_prompt"]),
    "training negative staleness": (_training(max_staleness=-1), RUN, ["training.max_staleness"]),
    "training negative over-sampling": (_training(over_sampling=-0.5), RUN, ["training.over_sampling"]),
    "training infinite-mean train time": (_training(train_time={"kind": "loglogistic", "scale": 10, "c": 0.8}), RUN,
                                          ["training.train_time", "infinite mean"]),
    "training async colocated": (_training(mode="async"), RUN, ["training", "disaggregated"]),
    "training with a conflicting sync batch": (_training(policy={"mode": "sync", "batch_size": 10}), RUN,
                                               ["batch_size 10 conflicts with training", "16 per step"]),
    "training sweep negative staleness": (_training(), ["sweep", "{s.yaml}", "--set", "training.max_staleness=0,-1"],
                                          ["s.yaml with --set", "training.max_staleness"]),
})  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_paragraph_exit_2_no_traceback(tmp_path, name):
    check_case(tmp_path, *CASES[name])


def check_case(tmp_path, files: dict, argv: list, words: list) -> None:
    """Write ``files``, run ``simrollout argv`` and expect exit 2, no traceback, ``words`` said."""
    for fname, content in files.items():
        p = tmp_path / fname
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
    args = []
    for a in argv:
        if a.startswith("{") and a.endswith("}"):
            a = str(tmp_path / a[1:-1])
        args.append(a)
    r = cli(*args)
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-1500:])
    assert "Traceback" not in r.stderr
    assert "Warning:" not in r.stderr, "a warning (e.g. numpy's RuntimeWarning) before the error"
    msg = " ".join(r.stderr.split())
    assert len(r.stderr.strip().splitlines()) <= 12, "one paragraph, not a report"
    for w in words:
        assert w in msg, (w, msg)


@pytest.mark.slow
def test_a_failed_run_leaves_an_earlier_result_as_it_was(tmp_path):
    good = tmp_path / "s.yaml"
    good.write_text(yaml.safe_dump(make()))
    out = tmp_path / "out"
    assert cli("run", good, "--out", out).returncode == 0
    (out / "notes.txt").write_text("mine")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # a run that fails after its output folder was prepared
    r = cli("run", good, "--out", out, "--executor", "nope")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    # a good run replaces the results and keeps other files
    assert cli("run", good, "--out", out, "--seed", "9").returncode == 0
    assert (out / "notes.txt").read_text() == "mine"
    from pathlib import Path

    assert (out / "summary.json").read_bytes() != before[Path("summary.json")]


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupted_multi_process_run_exits_ends_its_workers_and_keeps_earlier_results(
    tmp_path, root, sig, code
):
    import signal
    import subprocess
    import sys
    import time

    import psutil

    out = tmp_path / "out"
    small = yaml.safe_load((root / "scenarios/small.yaml").read_text())
    quick = _yaml(tmp_path, {**small, "workload": {**small["workload"], "trajectories": 200}}, "quick.yaml")
    assert cli("run", quick, "--out", out).returncode == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    big = {**small, "fidelity": "trajectory", "workload": {**small["workload"], "trajectories": 400_000}}
    big_path = _yaml(tmp_path, big, "big.yaml")
    proc = subprocess.Popen([sys.executable, "-m", "simrollout.cli", "run", str(big_path), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    workers = []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = parent.children(recursive=True)
        time.sleep(0.2)
    assert len(workers) >= 2, "the run did not start its worker processes"
    time.sleep(2.0)
    t0 = time.monotonic()
    proc.send_signal(getattr(signal, sig))
    _, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 10, "the run did not stop within a few seconds"
    assert proc.returncode == code, stderr[-800:]
    assert "interrupted" in stderr and "Traceback" not in stderr
    time.sleep(0.5)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


@pytest.mark.slow
@pytest.mark.parametrize("executor,warmup", [("serial", 3.0), ("ray", 15.0)])
def test_ctrl_c_stops_a_serial_or_ray_run(tmp_path, root, executor, warmup):
    import signal
    import subprocess
    import sys
    import time

    import psutil

    out = tmp_path / "out"
    small = yaml.safe_load((root / "scenarios/small.yaml").read_text())
    quick = _yaml(tmp_path, {**small, "workload": {**small["workload"], "trajectories": 100}}, "quick.yaml")
    assert cli("run", quick, "--out", out, "--no-records").returncode == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    big = {**small, "fidelity": "trajectory", "workload": {**small["workload"], "trajectories": 2_000_000}}
    proc = subprocess.Popen(
        [sys.executable, "-m", "simrollout.cli", "run", str(_yaml(tmp_path, big, "big.yaml")), "--out", str(out),
         "--executor", executor],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    parent = psutil.Process(proc.pid)
    time.sleep(warmup)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    children = parent.children(recursive=True)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 30, "the run did not stop promptly"
    assert proc.returncode == 130, stderr[-800:]
    assert "interrupted" in stderr and "Traceback" not in stderr
    # every child ends: Ray's agents notice their raylet is gone within a few seconds on a busy host
    psutil.wait_procs(children, timeout=10)
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, [c.cmdline()[:3] for c in left]
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


def test_an_interrupt_swallowed_where_it_landed_is_raised_at_the_next_progress_tick():
    """Ctrl-C raised inside code that cannot pass it on (a generator's finalizer during garbage
    collection) must still stop the run: the progress callback raises it again."""
    import signal

    from simrollout.cli import entry as m

    seen = []

    class Bar:
        def update(self, task, completed, total):
            seen.append((completed, total))

    m._PENDING.clear()
    try:
        tick = m._ticker(Bar(), 0)
        tick(1, 4)
        assert seen == [(1, 4)]
        try:
            m._interrupt(signal.SIGINT, None)
        except BaseException:  # swallowed where it landed
            pass
        with pytest.raises(m.Interrupted) as exc:
            tick(2, 4)
        assert exc.value.code == 130 and seen == [(1, 4)]
    finally:
        m._PENDING.clear()
