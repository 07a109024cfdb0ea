"""vlm-smmd: fine-tune vision-language models to answer with exact numbers (CE + SMMD)."""

__version__ = "0.1.0"
