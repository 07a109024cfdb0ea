"""Synthetic datasets with exact labels: analog clocks, charts and arithmetic problems. Independent of vlm_smmd."""
