"""Put the checkout's sim/ directory on sys.path so `import fakehw` works."""
import os
import sys

SIM_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "sim"))
if SIM_DIR not in sys.path:
    sys.path.insert(0, SIM_DIR)
