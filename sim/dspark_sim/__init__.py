"""Pair simulator for gb10.dspark.

Each simulated GB10 rank is a network namespace plus a private mount namespace
running its own dockerd and sshd, so Ansible reaches it over real SSH and
drives a real Docker engine. Only the GPU and the InfiniBand fabric are faked
(see ``sim/fakehw``).
"""
