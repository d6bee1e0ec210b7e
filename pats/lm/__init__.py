"""LLM plumbing for the LLM judge and reviser, one module per reason to change:

- `caller`: a `dspy.LM` built from an `LLMSpec` (`build_lm`) and `LLMCaller`, which runs DSPy programs
  against it with pats's own retries, a concurrency limit, a deadline per call and token accounting,
  and decides once per endpoint whether it takes JSON schemas (`probe_structured`); `require_llm`
  names the install command when the `llm` extra is missing; `usd_cost` prices tokens.
- `faults`: what a failed call was (`fault_kind`, `FAULT_KINDS`), whether another attempt can fix it,
  a 429's Retry-After, and API keys masked out of messages.
- `schema`: the JSON schemas of structured answers (`response_format`, `record_schema`, `cites_schema`)
  and the DSPy adapter that sends a call's own schema.
- `probe`: what the structured-output probe asks (`Probe`) and what it found per endpoint
  (`structured_decision`): whether the endpoint takes those schemas.
- `prompts`: prompt and rubric files (data under judges/) and how cards, entries and the judge's
  assessment are written into a prompt.

dspy and litellm import lazily in all of them: `import pats` must stay fast and must not touch the
network. They are the `llm` extra, not in the base install: `pats.lm.caller.require_llm` says so with
the install command.
"""
