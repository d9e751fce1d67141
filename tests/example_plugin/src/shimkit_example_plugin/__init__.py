"""An example third-party shimkit plugin package (see plugin.py)."""
