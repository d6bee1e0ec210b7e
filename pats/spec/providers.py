"""Which environment variable holds the API key of a LiteLLM provider, and which providers need none.

`LLMSpec.api_key_env` defaults to the variable of the model's provider (`openai/` OPENAI_API_KEY,
`anthropic/` ANTHROPIC_API_KEY, ...; `ollama/` and `hosted_vllm/` none), so swapping `llm.model` by an
override swaps the key with it. A spec that sets api_key_env keeps it, unless it names another
provider's variable where that cannot work (`key_mismatch`). Names are LiteLLM's own (its docs'
provider pages); a provider not listed here has no default, as before.
"""

from __future__ import annotations

PROVIDER_KEYS = {
    "openai": "OPENAI_API_KEY",
    "text-completion-openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY",
    "fireworks_ai": "FIREWORKS_AI_API_KEY",
    "cohere": "COHERE_API_KEY",
    "xai": "XAI_API_KEY",
    "azure": "AZURE_API_KEY",
}
KEYLESS = frozenset({"ollama", "ollama_chat", "hosted_vllm", "vllm", "lm_studio", "llamafile"})
OWNER = {env: provider for provider, env in PROVIDER_KEYS.items() if provider != "text-completion-openai"}


def provider_of(model: str) -> str:
    return model.split("/", 1)[0]


def default_key_env(model: str) -> str | None:
    """The variable LiteLLM reads for `model`'s provider; None for local servers and unknown providers."""
    return PROVIDER_KEYS.get(provider_of(model))


def key_mismatch(model: str, api_key_env: str | None, api_base: str | None) -> str | None:
    """What is wrong when api_key_env names another provider's key: always for a provider that takes no
    key, and for any provider called at its own API (no api_base: another provider's key is refused).
    None when it can work (a variable of your own naming, or a server at api_base that may take it)."""
    provider = provider_of(model)
    owner = OWNER.get(api_key_env or "")
    if owner is None or PROVIDER_KEYS.get(provider) == api_key_env:
        return None
    if provider in KEYLESS:
        return (
            f"{api_key_env} is {owner}'s key but {provider}/ models take none: remove api_key_env (or write "
            "api_key_env: null over a base that sets it); if your server does want a key, name its own "
            "variable, e.g. VLLM_API_KEY"
        )
    if api_base is None:
        want = PROVIDER_KEYS.get(provider)
        fix = f"write api_key_env: {want}, or remove it ({want} is the default)" if want else "name its key"
        return f"{api_key_env} is {owner}'s key but the model is {provider}/, whose API refuses it: {fix}"
    return None
