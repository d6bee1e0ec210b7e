"""Policy model files: the embedded default and any Hugging Face model directory or id."""

from pats.models.files import cache_dir, load_tokenizer, resolve_model_dir, token_counter

__all__ = ["cache_dir", "load_tokenizer", "resolve_model_dir", "token_counter"]
