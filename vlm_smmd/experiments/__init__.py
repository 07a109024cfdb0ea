"""Experiments: compare's planning, paired statistics across seeds, orchestration and report."""
