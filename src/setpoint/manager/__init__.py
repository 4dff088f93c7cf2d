"""setpoint.manager (see ARCHITECTURE.md)."""
