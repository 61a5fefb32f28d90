"""Backends: each turns LLMRequests into LLMResults for one family of engines."""
