"""The SimPy model: sandbox fleet, inference tier, trajectory processes and the cell runner."""
