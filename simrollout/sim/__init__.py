"""The simulator: one cell (a substrate at a concurrency, one replication) run on one of three engines.

Where to start reading:

1. ``engines/__init__.py``: the engines' registry (step, trajectory, compiled), what each covers
   and how it runs; ``engines/run.py`` runs a cell on its engine, and ``route.py`` picks the
   engine for ``fidelity: auto``.
2. ``model.py``: the cell (``Cell``), the SimPy model the step and trajectory engines share: its
   workers, and the parts it wires: ``chunks.py`` (trajectories a chunk at a time, their draws
   from ``workload_draws.py`` and ``substrate_draws.py``), ``sandbox.py`` (a trajectory's attempts:
   acquire, body, release), ``fleet.py`` (hosts, contention, quotas, warm pools), ``inference.py``
   and ``serving.py`` (the inference tier).
3. The bodies, each returning a ``records.BodyResult``: ``body_steps.py`` (the step engine: every
   call an event), ``body_trajectory.py`` and ``segments.py`` (the trajectory engine: one wait or
   segments that re-read the load), ``loop_body.py`` (the training loop's).
4. ``records.py``: what a trajectory ends with (``Row``, ``Records``); ``metrics.py``: a cell's
   summary from its records and its parts' reports.
5. The compiled engine: ``compiled.py`` (the Python side: arrays, requests), ``compiled_loop.py``
   (the numba loop: the dispatch), its named state in ``compiled_state.py`` and a handler per
   state in ``compiled_lifecycle.py`` and ``compiled_body.py``.
6. The training loop: ``trainer.py`` (once for every engine), its group books ``training.py``
   (SimPy) and ``compiled_training.py`` (the compiled loop's arrays).

The runner (``simrollout.run.runner.run_cell``) draws a cell's workload, runs it through
``engines.run.run_engine`` and hands back a ``CellResult``.
"""
