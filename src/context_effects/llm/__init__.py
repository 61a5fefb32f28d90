"""LLM execution layer shared by every study (SPEC §3)."""
