"""The `dspark` command line of the gb10.dspark Ansible collection."""

__version__ = "0.1.0"
