"""setpoint.webhook: admission and conversion webhooks (not built yet).

They will be served by :mod:`setpoint.server` with certificates from :mod:`setpoint.tls`;
see docs/architecture.md, "Where the next parts live".
"""
