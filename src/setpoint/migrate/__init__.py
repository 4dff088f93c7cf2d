"""setpoint.migrate (see ARCHITECTURE.md)."""
