"""Per-trajectory records to Parquet, a chunk at a time (one file per cell)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..sim.records import STATUS, Records

_CODES = np.array(sorted(STATUS))
_STATUS = pa.array([STATUS[k] for k in _CODES], pa.string())
# dictionary-encode the columns that repeat; a float column of distinct times gains nothing from
# a dictionary but pays for trying one (4x the write's CPU, and a larger file)
_DICTIONARY = ["substrate", "concurrency", "replication", "status", "attempts", "warm", "steps_done"]


class ParquetSink:
    """Appends each finished chunk of a cell's trajectories to ``path``."""

    def __init__(self, path: Path, substrate: str, concurrency: int, replication: int):
        self.path, self.substrate = path, substrate
        self.concurrency, self.replication = concurrency, replication
        self._writer: pq.ParquetWriter | None = None

    def __call__(self, rec: Records, first: int) -> None:
        n = rec.status.size
        cols = {
            "substrate": pa.repeat(pa.scalar(self.substrate, pa.string()), n),
            "concurrency": pa.array(np.full(n, self.concurrency, dtype=np.int32)),
            "replication": pa.array(np.full(n, self.replication, dtype=np.int16)),
            "trajectory": pa.array(np.arange(first, first + n, dtype=np.int64)),
            **{k: pa.array(v) for k, v in rec.as_dict().items()},
            "duration": pa.array(rec.duration),
        }
        cols["status"] = _STATUS.take(pa.array(np.searchsorted(_CODES, rec.status)))
        table = pa.table(cols)
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.path, table.schema, use_dictionary=_DICTIONARY)
        self._writer.write_table(table)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def sink_for(records_dir: Path | None, scn, key) -> ParquetSink | None:
    if records_dir is None:
        return None
    name = scn.substrates[key.substrate].name
    path = Path(records_dir) / f"{name}-c{key.concurrency}-r{key.replication}.parquet"
    return ParquetSink(path, name, key.concurrency, key.replication)
