"""vLLM Throughput Tuning: measure and tune real vLLM servers (the course's library)."""

__version__ = "0.1.0"
