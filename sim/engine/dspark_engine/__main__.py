"""``python3 -m dspark_engine serve ...`` behaves like ``vllm serve ...``."""
import sys

from .cli import main

sys.exit(main())
