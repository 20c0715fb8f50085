"""What-if: sweeps over scenario fields, the planner and the training planner, and bands over a
profile's refits (``--uncertainty``)."""
