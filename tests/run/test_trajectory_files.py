"""Per-trajectory Parquet: what the sink writes is what a reader gets back."""

import numpy as np
import pandas as pd

from simrollout.run.trajectory_files import ParquetSink
from simrollout.sim.records import CANCELLED, FAILED, OK, TIMEOUT, Records


def _records(status: list[int]) -> Records:
    n = len(status)
    t = np.arange(n, dtype=float)
    return Records(t, t + 1, t + 5, t * 0.1, t * 0, t + 2, t + 3, t + 1.5, np.ones(n, np.int8),
                   np.array(status, np.int8), np.zeros(n, bool), np.full(n, 3, np.int32),
                   t * 0.2, t * 0.01, t * 0)  # fmt: skip


def test_chunks_append_with_their_status_names_and_indices(tmp_path):
    path = tmp_path / "cell.parquet"
    sink = ParquetSink(path, "docker", 64, 2)
    sink(_records([OK, FAILED, TIMEOUT]), 0)
    sink(_records([CANCELLED, OK]), 3)
    sink.close()
    df = pd.read_parquet(path)
    assert df.status.tolist() == ["ok", "failed", "timeout", "cancelled", "ok"]
    assert df.trajectory.tolist() == [0, 1, 2, 3, 4]
    assert set(df.substrate) == {"docker"} and set(df.concurrency) == {64} and set(df.replication) == {2}
    assert np.allclose(df.duration, 4.0) and df.steps_done.dtype == np.int32
    assert np.allclose(df.overhead, [0, 0.2, 0.4, 0, 0.2]) and np.allclose(
        df.teardown, [0, 0.01, 0.02, 0, 0.01]
    )
