"""setpoint.webhook (see ARCHITECTURE.md)."""
