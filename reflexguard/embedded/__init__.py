"""The embedded upstream: a quantized Qwen2.5-Coder-0.5B served by llama.cpp on the CPU."""
