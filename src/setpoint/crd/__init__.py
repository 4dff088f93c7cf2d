"""setpoint.crd (see ARCHITECTURE.md)."""
