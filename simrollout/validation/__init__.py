"""Validate: the simulator against real runs (Docker mini-rollouts, a serving engine's agent loop,
its iteration times), the interleaved held-out suite, and the fidelity matrix (the trajectory
engine against the step engine) with the verdicts ``fidelity: auto`` routes by."""
