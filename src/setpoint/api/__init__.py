"""Pure data for the Kubernetes API, with no I/O.

Group/version/kind and resource names, object keys, helpers over JSON objects,
built-in kinds, conditions, owner references and the typed resource base.
Everything here is safe to import from any layer.
"""
