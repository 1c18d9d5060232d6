"""Benchmarks of max.driver: per-call ratios against a no-op C method call,
throughput and latency against Python's own primitives, and scale.

Run with ``python -m benchmarks`` from the repository root."""
