"""setpoint.cli (see ARCHITECTURE.md)."""
