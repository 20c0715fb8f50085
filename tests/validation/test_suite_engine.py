"""The engine suite's simulated side: its figures taken as the real side takes them, and the drift
its probe blocks read."""

import numpy as np
import pytest

from simrollout.run.executors import run_scenario
from simrollout.validation.suite import HeldOutCell, _per_draw
from simrollout.validation.suite_engine import ENGINE_WORKLOADS, HELD_OUT, engine_measured
from simrollout.validation.validate_engine import agent_scenario
from tests.conftest import ROOT

PROFILE = ROOT / "calibration/engines/llama-cpp-tiny.yaml"


def test_durations_are_the_real_sides_interpolated_percentiles_not_the_sketchs():
    """Over 8 trajectories the summary's lower-rank p99 is the 7th duration of 8; the real side
    (numpy's interpolated percentile) reads close to the 8th. The suite's simulated durations are
    taken the real side's way, from the records."""
    w = next(w for w in ENGINE_WORKLOADS if w.name == "many-turns")
    scn = agent_scenario(PROFILE, 8, w.steps, [1, 4], w.prompt, w.appended, w.output, w.tool, seed=3)
    res = run_scenario(scn, jobs=1, executor="serial", keep_records=True)
    got = engine_measured(res).set_index("concurrency")
    for key, rec in res.records.items():
        dur = np.sort(np.asarray(rec.end) - np.asarray(rec.start))
        assert got.loc[key.concurrency, "duration_p50"] == pytest.approx((dur[3] + dur[4]) / 2)
        assert got.loc[key.concurrency, "duration_p99"] == pytest.approx(dur[6] + 0.93 * (dur[7] - dur[6]))
        summary = res.summary.set_index("concurrency").loc[key.concurrency]
        assert summary.duration_p99 == pytest.approx(dur[6], rel=2e-3)  # the sketch's lower rank
    # the request percentiles and makespan are the summary's (already numpy's)
    assert list(got.request_p50) == list(res.summary.llm_request_p50)
    # the suite's draws keep the records, so its points are read the same way
    table = _per_draw(scn, engine_measured, 2)
    assert set(table.draw) == {0, 1} and (table.duration_p99 > 0).all()


def test_the_default_engine_workloads_are_the_held_out_ones():
    assert HELD_OUT and set(HELD_OUT) <= {w.name for w in ENGINE_WORKLOADS}
    assert "many-turns" not in HELD_OUT and "long-prompt" not in HELD_OUT  # model-choice data


def test_readings_of_one_turn_trajectories_have_no_resumed_turns_and_say_no_nan():
    import pandas as pd

    from simrollout.validation.suite import CellResult
    from simrollout.validation.suite_engine import engine_notes, readings

    run = pd.DataFrame([{"concurrency": 1, "trajectory": t, "step": t, "start": 0.0, "ttft": 0.5, "latency": 0.8,
                         "output_tokens": 4, "run": 0} for t in range(3)]
                       + [{"concurrency": 1, "trajectory": t, "step": -1, "start": 1.0, "latency": 0.0, "run": 0}
                          for t in range(3)])  # fmt: skip
    rd = readings([run], pd.DataFrame({"ttft_p50": [0.0], "tpot_p50": [0.11]}))
    assert rd["ttft_first"]["real"] == pytest.approx(0.5) and np.isnan(rd["ttft_resumed"]["real"])
    text = "\n".join(
        engine_notes([CellResult(HeldOutCell(ENGINE_WORKLOADS[0], 1), [], extra={"readings": rd})])
    )
    assert "nan" not in text and "per output token 110 ms simulated against 100 ms real (+10%)" in text


def test_readings_split_first_and_resumed_turns_and_the_notes_say_the_miss():
    """Per cell: time to first token real (first turns and resumed turns apart) and simulated,
    time per output token; the notes put them beside the verdicts."""
    import pandas as pd

    from simrollout.validation.suite import CellResult
    from simrollout.validation.suite_engine import engine_notes, readings

    def run(k):  # 2 trajectories x 3 turns: first turns 0.8 s to first token, resumed 0.4 s
        rows = [{"concurrency": 1, "trajectory": t, "step": 3 * t + s, "start": float(s), "ttft": 0.8 if s == 0 else 0.4,
                 "latency": (0.8 if s == 0 else 0.4) + 9 * 0.03, "output_tokens": 10, "run": k}
                for t in range(2) for s in range(3)]  # fmt: skip
        rows += [{"concurrency": 1, "trajectory": t, "step": -1, "start": 5.0, "latency": 0.0, "run": k}
                 for t in range(2)]  # fmt: skip
        return pd.DataFrame(rows)

    sim = pd.DataFrame({"ttft_p50": [0.2, 0.2], "tpot_p50": [0.03, 0.033]})
    rd = readings([run(0), run(1)], sim)
    assert rd["ttft_first"]["real"] == pytest.approx(0.8) and rd["ttft_resumed"]["real"] == pytest.approx(0.4)
    assert rd["ttft"] == pytest.approx({"real": 0.4, "sim": 0.2})
    assert rd["tpot"] == pytest.approx({"real": 0.03, "sim": 0.0315})
    res = CellResult(HeldOutCell(ENGINE_WORKLOADS[0], 1), [{"metric": "request_p50", "verdict": "miss"}],
                     extra={"readings": rd, "fit": {"resumed_c1": {"ttft_rel_error": -0.6}},
                            "iteration": {"base": 0.02}})  # fmt: skip
    text = "\n".join(engine_notes([res]))
    assert (
        "missed request_p50" in text
        and "time to first token p50 0.2 s simulated against 0.4 s real (-50%)" in text
    )
    assert "per output token 31.5 ms simulated against 30 ms real (+5%)" in text
    assert "resumed pairs at 1 in flight -60%" in text and "base 0.02" in text
