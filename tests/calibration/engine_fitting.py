"""The engine fit as ``simrollout calibrate`` runs it: with the simulator's replay of the probe."""

from functools import partial

from simrollout.calibration import engine_fit
from simrollout.sim.engine_replay import replay

fit_engine = partial(engine_fit.fit_engine, replay=replay)
engine_profile = partial(engine_fit.engine_profile, replay=replay)
