"""setpoint.controller (see ARCHITECTURE.md)."""
