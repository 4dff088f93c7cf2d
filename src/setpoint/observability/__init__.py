"""setpoint.observability (see ARCHITECTURE.md)."""
