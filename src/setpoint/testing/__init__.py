"""setpoint.testing (see ARCHITECTURE.md)."""
