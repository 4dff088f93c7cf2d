"""setpoint.migrate: storage-version migration tools (not built yet).

Where they will live and what they may import: docs/architecture.md, "Where the next parts
live".
"""
