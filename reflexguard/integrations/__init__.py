"""reflexguard inside other gateways (today: LiteLLM proxy's guardrails)."""
