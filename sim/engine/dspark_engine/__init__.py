"""Stand-in for the DSpark vLLM engine (``vllm serve`` of the r0b0tlab v026 image).

It imitates the real engine from the outside only: the command line, the log lines, the
two-rank join over TCP, the OpenAI-compatible HTTP API and the Prometheus metrics.
Standard library only (the simulator image has nothing but python3 and bash).
"""

VERSION = "0.26.0+dspark.sm121.3"
__version__ = VERSION
