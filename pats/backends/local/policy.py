"""The local policy: a transformers causal LM (LoRA or full fine-tuning) that acts, trains and saves.

Two ways to act, picked by `policy.action`:
- `score_actions` / `choose`: the policy's distribution over the environment's admissible actions is
  softmax(score / temperature), a score being computed from the action's token log-probs given the
  prompt (the action's text followed by the end-of-turn token) by the `policy.score_normalization`
  rule (mean, sum, distinct_mean, pmi: scoring.py; pmi's neutral premise is `premise_ids`). The
  prompt runs once and its KV cache is shared by the candidates (scoring.py); `choose_batch` scores all live episodes of a turn
  together, their shared system prefix computed once. A 135M model cannot free-generate valid
  actions but ranks them well once scores are length-normalized (notes/facts.md);
- `generate`: batched sampling with left padding, temperature and top-p; `generate_batch` takes each
  system prefix's keys/values from a `PrefixStore`, computed once per rollout like `choose_batch`.
Training (`update`) lives in training.py. The reference policy for the KL term is the same model with
its LoRA adapter disabled, or a frozen copy under full fine-tuning (kept only when kl_coef > 0).

Length (over 450 lines, on purpose): one class whose acting paths (score and generate, one
episode or a batch) share the model, the tokenizer, the prefix caches and the bf16 weight copies;
training is in training.py and the scoring arithmetic in scoring.py.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pats.backends.local import attention, grpo
from pats.backends.local.device import require_device
from pats.backends.local.items import ChoiceItem, TrainItem
from pats.backends.local.memory import one_malloc_arena, small_kernel_caches
from pats.backends.local.scoring import PrefixStore, score_batch, score_candidates, supports_batching
from pats.backends.local.training import run_update
from pats.envs.prompting import admissible_line
from pats.errors import BackendError
from pats.host import cpu_has_native_bf16
from pats.models.files import resolve_model_dir
from pats.spec.models import LocalTrainerSpec, PolicySpec

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def bf16_autocast_supported(device: torch.device) -> bool:
    """Whether bf16 autocast is a speed-up here: native bf16 on the CPU (avx512_bf16 / AMX) or GPU.
    Without native support CPU autocast emulates bf16 and runs slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return cpu_has_native_bf16()


class LocalPolicy:
    def __init__(self, policy: PolicySpec, trainer: LocalTrainerSpec, seed: int):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.spec, self.trainer = policy, trainer
        if trainer.threads is not None:
            torch.set_num_threads(trainer.threads)  # process-wide: torch has no per-model setting
        one_malloc_arena()  # process-wide too: each stage reuses the memory the last one freed
        small_kernel_caches()  # and so are these (pats.backends.local.memory)
        self.device = require_device(trainer)
        self.autocast = (
            trainer.autocast_bf16 and policy.dtype == "float32" and bf16_autocast_supported(self.device)
        )
        torch.manual_seed(seed)  # LoRA's initial A matrices come from the global RNG
        self.generator = torch.Generator(device="cpu").manual_seed(seed)  # sampling, kept apart

        source = resolve_model_dir(policy.model)
        model: Any  # the transformers model; with LoRA, the peft model wrapping it
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[policy.dtype])
        except OSError as err:
            raise BackendError(f"cannot load policy.model '{policy.model}': {err}") from err
        self.eos_id = self.tokenizer.eos_token_id
        if self.eos_id is None:
            raise BackendError(f"the tokenizer of '{policy.model}' has no eos token to end a turn with")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        _check_plain_head(model)
        model.to(self.device)
        if attention.applies(model, self.device):
            model.set_attn_implementation(attention.register())  # a faster backward (attention.py)

        self.reference = None
        if policy.lora is not None:
            from peft import LoraConfig, get_peft_model

            lora = policy.lora
            layers = model.config.get_text_config().num_hidden_layers
            if lora.top_layers is not None and lora.top_layers > layers:
                raise BackendError(
                    f"policy.lora.top_layers is {lora.top_layers} but '{policy.model}' has {layers} "
                    f"layers; write at most {layers}, or leave it unset for all of them"
                )
            config = LoraConfig(
                r=lora.rank,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
                # No adapter below the top layers: autograd then stops there, so the backward pass
                # covers only those layers.
                layers_to_transform=(
                    list(range(layers - lora.top_layers, layers)) if lora.top_layers else None
                ),
                task_type="CAUSAL_LM",
            )
            try:
                model = get_peft_model(model, config)
            except ValueError as err:  # e.g. target modules the architecture does not have
                raise BackendError(
                    f"cannot put LoRA on '{policy.model}': {err}; set policy.lora.target_modules to "
                    "linear layer names of this model (or policy.lora: null for full fine-tuning)"
                ) from err
            if policy.init_adapter is not None:
                load_adapter(model, policy.init_adapter)
        elif trainer.kl_coef > 0:
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.model = model.eval()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer: torch.optim.Optimizer = torch.optim.AdamW(
            self.params, lr=trainer.lr, weight_decay=trainer.weight_decay
        )

    # -- prompts and actions -------------------------------------------------------------------

    def chat_ids(self, system: str, user: str) -> list[int]:
        """The chat template for one system + user message, opened for the assistant's answer."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return list(
            self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )

    def chat_split(self, system: str, user: str) -> tuple[list[int], list[int]]:
        """`chat_ids(system, user)` cut where the system message ends: (system part, the rest).
        The system part is the template of the system message alone, used only where the full
        prompt really starts with it (ChatML ends it with special tokens, so no BPE merge crosses
        the cut); otherwise the system part is empty and the rest is the whole prompt."""
        full = self.chat_ids(system, user)
        head = list(
            self.tokenizer.apply_chat_template(
                [{"role": "system", "content": system}], tokenize=True, return_dict=False
            )
        )
        if 0 < len(head) < len(full) and full[: len(head)] == head:
            return head, full[len(head) :]
        return [], full

    def premise_ids(self, candidates: Sequence[Sequence[int]]) -> list[int]:
        """pmi scoring's neutral premise for a decision's candidates (`action_ids` of its actions): a
        chat whose only message is the turn's last line, the admissible actions, opened for the
        assistant's answer. An action's likelihood after it is what being listed and its own words
        are worth; pmi keeps what the rest of the prompt adds. The actions' texts are decoded from
        the candidates, so an update rebuilds the same premise from its `ChoiceItem`s."""
        actions = self.tokenizer.batch_decode(
            [list(c[:-1] if c and c[-1] == self.eos_id else c) for c in candidates]
        )
        return self.chat_ids("", admissible_line(actions))

    def action_ids(self, action: str) -> list[int]:
        """An action as the assistant writes it: its tokens, then the end-of-turn (eos) token.
        Tokenized alone; the template puts a newline before it, so no BPE merge crosses the seam."""
        return self.tokenizer(action, add_special_tokens=False)["input_ids"] + [self.eos_id]

    def choice_item(
        self, prompt_ids: Sequence[int], actions: Sequence[str], chosen: int, advantage: float, weight=1.0
    ) -> ChoiceItem:
        """A score-mode decision, ready for `update`."""
        return ChoiceItem(
            prompt_ids=tuple(prompt_ids),
            candidates=tuple(tuple(self.action_ids(a)) for a in actions),
            chosen=chosen,
            advantage=advantage,
            weight=weight,
        )

    # -- acting --------------------------------------------------------------------------------

    def autocast_context(self):
        if not self.autocast:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def bf16_weights(self):
        """Under autocast, the frozen linear weights as bf16 copies for the block (`frozen_in_bf16`)."""
        return frozen_in_bf16(self.model) if self.autocast else nullcontext()

    @contextmanager
    def acting_context(self) -> Iterator[None]:
        """Autocast for passes without gradients, on bf16 copies of the frozen weights."""
        with self.autocast_context(), self.bf16_weights():
            yield

    def candidate_scores(
        self, prompt_ids: Sequence[int], candidates: Sequence[Sequence[int]], model=None
    ) -> Tensor:
        """Scores of K tokenized candidates after one prompt, the prompt's KV cache shared. (K,)
        With or without gradients (training recomputes them), on `model` (default: the policy)."""
        with self.autocast_context():
            return score_candidates(
                self.model if model is None else model,
                prompt_ids,
                candidates,
                pad_id=self.pad_id,
                chunk=self.trainer.logprob_chunk,
                normalization=self.spec.score_normalization,
                premise=self.premise_ids,
            )

    @torch.no_grad()
    def score_actions(self, prompt_ids: Sequence[int], actions: Sequence[str]) -> Tensor:
        """Score of each action text after the prompt (policy.score_normalization's rule). (K,)"""
        with self.acting_context():
            return self.candidate_scores(prompt_ids, [self.action_ids(a) for a in actions]).float().cpu()

    def choose(self, prompt_ids: Sequence[int], actions: Sequence[str], greedy: bool) -> tuple[int, Tensor]:
        """(index of the chosen action, the distribution it was drawn from (K,))."""
        return self.pick(self.score_actions(prompt_ids, actions), greedy)

    @torch.no_grad()
    def choose_batch(
        self,
        prompts: Sequence[tuple[Sequence[int], Sequence[int]]],
        actions: Sequence[Sequence[str]],
        greedy: bool,
        store: PrefixStore | None = None,
    ) -> list[tuple[int, Tensor]]:
        """`choose` for many decisions at once: prompts as (shared prefix, rest) from `chat_split`.
        All are scored together (`score_batch_actions`); then one draw per decision, in order, so the
        generator is used as `choose` one by one would."""
        scores = self.score_batch_actions(prompts, actions, store)
        return [self.pick(s, greedy) for s in scores]

    def decision_scores(
        self,
        prompts: Sequence[tuple[Sequence[int], Sequence[int]]],
        actions: Sequence[Sequence[str]],
        store: PrefixStore | None = None,
    ) -> list[Tensor]:
        """Each decision's scores over its actions, prompts as (shared prefix, rest) from `chat_split`:
        all together (`score_batch_actions`, prefixes kept in `store`) with `trainer.rollout_batching`,
        else one decision at a time on the whole prompt (`score_actions`). Acting and the likelihood
        gap both score here, so the gap reads the distribution the policy acts on."""
        if self.trainer.rollout_batching:
            return self.score_batch_actions(prompts, actions, store)
        return [self.score_actions([*h, *r], a) for (h, r), a in zip(prompts, actions, strict=True)]

    @torch.no_grad()
    def score_batch_actions(
        self,
        prompts: Sequence[tuple[Sequence[int], Sequence[int]]],
        actions: Sequence[Sequence[str]],
        store: PrefixStore | None = None,
    ) -> list[Tensor]:
        """`score_actions` for many decisions at once, prompts as (shared prefix, rest): in as few
        forward passes as the batch size allows, each prefix computed once (and kept in `store` for
        later turns: a store is valid only while the weights stay the same). (K_b,) each, on the CPU."""
        if not supports_batching(self.model):
            return [self.score_actions([*h, *r], a) for (h, r), a in zip(prompts, actions, strict=True)]
        with self.acting_context():
            scores = score_batch(
                self.model,
                PrefixStore() if store is None else store,
                [h for h, _ in prompts],
                [r for _, r in prompts],
                [[self.action_ids(a) for a in acts] for acts in actions],
                pad_id=self.pad_id,
                chunk=self.trainer.logprob_chunk,
                normalization=self.spec.score_normalization,
                premise=self.premise_ids,
            )
        return [s.float().cpu() for s in scores]

    def pick(self, scores: Tensor, greedy: bool) -> tuple[int, Tensor]:
        """(chosen index, distribution) from a decision's scores (K,): argmax or one seeded draw."""
        probs = grpo.action_distribution(scores.double(), self.spec.temperature)
        if greedy:
            return int(probs.argmax()), probs.float()
        return int(torch.multinomial(probs, 1, generator=self.generator)), probs.float()

    @torch.no_grad()
    def generate(
        self, prompt_ids_batch: Sequence[Sequence[int]], max_new_tokens: int, greedy: bool
    ) -> list[list[int]]:
        """New tokens per prompt, each ending at eos (included) or after max_new_tokens; every prompt
        run whole, left-padded."""
        if not prompt_ids_batch:
            return []
        ids, mask = left_padded(prompt_ids_batch, self.pad_id, self.device)
        return self._sample(ids, mask, None, max_new_tokens, greedy)

    @torch.no_grad()
    def generate_batch(
        self,
        prompts: Sequence[tuple[Sequence[int], Sequence[int]]],
        max_new_tokens: int,
        greedy: bool,
        store: PrefixStore | None = None,
    ) -> list[list[int]]:
        """`generate` for prompts as (shared prefix, rest) from `chat_split`: with
        `trainer.rollout_batching`, each distinct prefix's keys/values computed once (and kept in
        `store` for later turns, valid while the weights stay the same), so only the rests and the new
        tokens run here. A row is laid out as
        [its prefix, padding up to the longest prefix | padding, its rest]; the mask hides the padding
        and position ids follow the mask, so each row continues its own prompt as `generate` would."""
        heads = [tuple(h) for h, _ in prompts]
        # Nothing to reuse, masks the model can't take, or `trainer.rollout_batching` off: whole prompts.
        if not any(heads) or not supports_batching(self.model) or not self.trainer.rollout_batching:
            return self.generate([[*h, *r] for h, r in prompts], max_new_tokens, greedy)
        store = PrefixStore() if store is None else store
        decoder = self.model.get_decoder()
        with self.acting_context():
            store.ensure(decoder, heads)
        cache, _ = store.stack(decoder, [[h] for h in heads])  # row r: its prefix from column 0
        width, longest = cache.get_seq_length(), max(len(r) for _, r in prompts)
        ids = torch.full((len(prompts), width + longest), self.pad_id, device=self.device)  # (B, S + P)
        mask = torch.zeros_like(ids)
        for i, (head, rest) in enumerate(prompts):
            ids[i, : len(head)] = torch.tensor(list(head), device=self.device)  # already in the cache
            mask[i, : len(head)] = 1
            ids[i, width + longest - len(rest) :] = torch.tensor(list(rest), device=self.device)
            mask[i, width + longest - len(rest) :] = 1
        return self._sample(ids, mask, cache, max_new_tokens, greedy)

    def _sample(self, ids: Tensor, mask: Tensor, cache, max_new_tokens: int, greedy: bool) -> list[list[int]]:
        """HF `generate` from (B, T) ids and mask (its first columns' keys/values in `cache`, if any);
        the new tokens of each row, cut after its eos."""
        from transformers import GenerationConfig

        sampling: dict[str, Any] = {"do_sample": False}
        if not greedy:  # top_k=0: only temperature and top-p shape the distribution
            sampling = {
                "do_sample": True,
                "temperature": self.spec.temperature,
                "top_p": self.spec.top_p,
                "top_k": 0,
            }
        config = GenerationConfig(
            max_new_tokens=max_new_tokens, eos_token_id=self.eos_id, pad_token_id=self.pad_id, **sampling
        )
        # HF samples from the global RNG; seed it from our generator inside a forked RNG state, so runs
        # are reproducible and the caller's global RNG is left as it was.
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), self.acting_context():
            torch.manual_seed(int(torch.randint(2**62, (1,), generator=self.generator)))
            out = self.model.generate(
                input_ids=ids, attention_mask=mask, past_key_values=cache, generation_config=config
            )
        return [up_to_eos(row, self.eos_id) for row in out[:, ids.shape[1] :].tolist()]

    # -- training ------------------------------------------------------------------------------

    @contextmanager
    def reference_model(self) -> Iterator[torch.nn.Module]:
        """The KL reference: the model with its adapter off, or the frozen copy (full fine-tuning)."""
        if self.reference is not None:
            yield self.reference
        elif self.spec.lora is not None:
            with self.model.disable_adapter():
                yield self.model
        else:
            raise BackendError("no reference policy: full fine-tuning keeps one only when kl_coef > 0")

    def update(self, batch: Sequence[TrainItem | ChoiceItem]) -> dict[str, float]:
        """One GRPO/PPO update on the batch; see training.run_update."""
        return run_update(self, batch)

    # -- checkpoints ---------------------------------------------------------------------------

    def save(self, directory: str | Path) -> None:
        """Weights (LoRA adapter or the full model), optimizer state and RNG states, written to a
        temporary sibling folder and renamed into place, so a crash never leaves a partial checkpoint."""
        target = Path(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            if self.spec.lora is not None:
                self.model.save_pretrained(tmp / "adapter")
            else:
                self.model.save_pretrained(tmp / "model")
                self.tokenizer.save_pretrained(tmp / "model")
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            rng = {"torch": torch.get_rng_state(), "sampler": self.generator.get_state()}
            if self.device.type == "cuda":
                rng["cuda"] = torch.cuda.get_rng_state(self.device)
            torch.save(rng, tmp / "rng.pt")
            old = None
            if target.exists():  # swap: the old checkpoint is removed only after the new one is in place
                old = target.with_name(f".{target.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                target.rename(old)
            tmp.rename(target)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def load(self, directory: str | Path) -> None:
        """Restore what `save` wrote into this policy (same spec)."""
        folder = Path(directory)
        previous = folder.with_name(f".{folder.name}.old")
        if not folder.exists() and previous.exists():  # a crash between save's two renames
            folder = previous
        if not (folder / "optimizer.pt").is_file():
            raise BackendError(f"{folder} is not a pats checkpoint (no optimizer.pt)")
        if self.spec.lora is not None:
            from peft.utils import load_peft_weights, set_peft_model_state_dict

            weights = load_peft_weights(str(folder / "adapter"), device=str(self.device))
            result = set_peft_model_state_dict(self.model, weights)
            # (ignore: torch's _IncompatibleKeys, a namedtuple built from a list, is opaque to mypy)
            unexpected = result.unexpected_keys  # type: ignore[attr-defined]
            if unexpected:
                raise BackendError(f"{folder}: adapter does not match policy.lora ({unexpected[:3]})")
        else:
            from transformers import AutoModelForCausalLM

            saved = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=DTYPES[self.spec.dtype])
            self.model.load_state_dict(saved.state_dict())
        self.optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location=self.device))
        rng = torch.load(folder / "rng.pt")
        torch.set_rng_state(rng["torch"])
        self.generator.set_state(rng["sampler"])
        if "cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], self.device)


def load_adapter(model, folder: str | Path) -> None:
    """Put a saved LoRA adapter's weights (`policy.init_adapter`, e.g. a warm start's) into `model`,
    whose adapters must have the same shapes: the same policy.model and policy.lora."""
    from peft import get_peft_model_state_dict
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    folder = Path(folder)
    if not (folder / "adapter_config.json").is_file():
        raise BackendError(
            f"policy.init_adapter: {folder} holds no LoRA adapter (no adapter_config.json); give the "
            "adapter folder `pats warm-start` wrote, <logging.root>/<name>/warm_start/adapter"
        )
    weights = load_peft_weights(str(folder), device=str(next(model.parameters()).device))
    expected = get_peft_model_state_dict(model)
    wrong = sorted(k for k in expected.keys() | weights.keys() if k not in weights or k not in expected
                   or weights[k].shape != expected[k].shape)  # fmt: skip
    if wrong:
        raise BackendError(
            f"policy.init_adapter: the adapter in {folder} does not fit this policy ({len(wrong)} tensors "
            f"differ, e.g. {wrong[0]}): write the policy.model and policy.lora it was trained with (its "
            "adapter_config.json, and the warm start's spec.yaml beside it)"
        )
    set_peft_model_state_dict(model, weights)


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int, device=None) -> tuple[Tensor, Tensor]:
    """(ids, attention mask), each (B, P): the prompts left-padded, so every row ends where it
    continues."""
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, device=device)
    mask = torch.zeros_like(ids)
    for i, prompt in enumerate(prompts):
        ids[i, longest - len(prompt) :] = torch.tensor(list(prompt), device=device)
        mask[i, longest - len(prompt) :] = 1
    return ids, mask


def up_to_eos(tokens: list[int], eos_id: int) -> list[int]:
    """New tokens up to and including the first eos (all of them when none)."""
    return tokens[: tokens.index(eos_id) + 1] if eos_id in tokens else tokens


@contextmanager
def frozen_in_bf16(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, every frozen fp32 linear weight (LoRA's base layers, the LM head) is replaced
    by its bf16 copy; the originals are put back after it.

    Under autocast a linear layer casts its weight to bf16 on every call, and autocast keeps the cast
    only for weights that train: so each forward pass copies the whole model once more, in generate
    mode once per new token. The copy made here is the same rounding autocast applies, so the numbers
    do not change (tests/test_local_policy.py, tests/test_update_prefix.py).
    A tied LM head gets its own copy; the embedding lookup keeps reading the fp32 table. A block
    inside another finds the copies made and changes nothing (a play holds them for all its turns)."""
    swapped = []
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        weight = module.weight
        if weight.dtype == torch.float32 and not weight.requires_grad:
            module.weight = torch.nn.Parameter(weight.detach().to(torch.bfloat16), requires_grad=False)
            swapped.append((module, weight))
    try:
        yield
    finally:
        for module, weight in swapped:
            module.weight = weight


def _check_plain_head(model) -> None:
    """Log-probs are computed from hidden states through the output embeddings; models that rescale
    or soft-cap their logits after the head would be scored wrongly, so refuse them."""
    config = model.config.get_text_config()
    for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            raise BackendError(
                f"policy.model '{config.name_or_path}' sets {name}={value}; the local backend computes "
                "log-probs from the plain LM head and does not support rescaled logits"
            )
