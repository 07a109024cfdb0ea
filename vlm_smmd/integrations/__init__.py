"""SMMD inside other training frameworks: thin adapters over `vlm_smmd.losses.numeric_loss_func`.

- `ms_swift`: the ms-swift (>= 4) loss plugin. `swift sft --external_plugins <plugin> --loss_type smmd`, where
  `python -m vlm_smmd.integrations.ms_swift` prints the plugin's path; every registered aux loss is a loss_type.
- `llama_factory`: `use_numeric_loss(aux="smmd", aux_lambda=1.0)` before `llamafactory.train.tuner.run_exp()`
  makes LLaMA-Factory's SFT stage train with CE + lambda * aux.

Both import their framework only when called, so the core install imports them without it.
"""
