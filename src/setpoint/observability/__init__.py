"""setpoint.observability: structured logging, Prometheus metrics and Kubernetes Events.

Below the client (the Event recorder takes the client as a protocol); see
docs/architecture.md.
"""
