"""reflexguard: a validating, repairing OpenAI-compatible proxy for LLM tool calls."""

__version__ = "0.1.0"
