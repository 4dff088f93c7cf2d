"""setpoint.client (see ARCHITECTURE.md)."""
