"""Synthetic datasets with exact labels: analog clocks, charts, arithmetic and word problems. Independent of vlm_smmd."""
