"""setpoint.cache (see ARCHITECTURE.md)."""
