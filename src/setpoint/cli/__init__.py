"""setpoint.cli: the ``setpoint`` command (run, demo, doctor, generate, controlplane).

The top layer; see docs/architecture.md.
"""
