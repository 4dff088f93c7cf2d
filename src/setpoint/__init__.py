"""setpoint: a Python framework for writing Kubernetes operators.

Import it as ``import setpoint as sp``. The public API is re-exported here;
everything else is implementation detail.
"""

from setpoint.api.gvk import GroupVersionKind, GroupVersionResource
from setpoint.api.keys import ObjectKey

__all__ = ["GroupVersionKind", "GroupVersionResource", "ObjectKey"]
