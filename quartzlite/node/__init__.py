"""The node runtime: one scheduler process and its threads."""
