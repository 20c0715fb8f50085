"""Run: a scenario's cells on their executors, and what a run writes (summary, Parquet records,
report, plots with their bands, timeline)."""
