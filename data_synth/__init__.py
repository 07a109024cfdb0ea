"""Synthetic datasets with exact labels: analog clocks and charts. Independent of vlm_smmd."""
