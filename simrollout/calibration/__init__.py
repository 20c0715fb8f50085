"""Calibration: probe real substrates, fit latency distributions, validate against a real run."""
