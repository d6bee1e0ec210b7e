"""Run records: the versioned JSONL event log and metric sinks (JSONL, W&B)."""
