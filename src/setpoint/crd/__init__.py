"""Python types -> CustomResourceDefinition and RBAC manifests (what controller-gen does for Go).

* :func:`crd_for` builds the CRD of one kind from its version classes;
  :func:`generate_crds` does it for many kinds and names the files
  (``crd/bases/<group>_<plural>.yaml``).
* Kinds whose versions differ get a ``Webhook`` conversion when their spokes
  declare converters (:class:`WebhookClientConfig` says where the webhook is),
  and are refused when they do not (:mod:`setpoint.crd.conversion`).
* :func:`validate_structural` checks a schema against the API server's
  structural-schema rules offline.
* :func:`generate_rbac` turns rules declared with ``@sp.rbac`` into
  ``rbac/role.yaml``.
* :func:`generate_webhooks` turns the declared validators and defaulters
  (``sp.CustomValidator``, ``sp.CustomDefaulter``) into ``webhook/manifests.yaml``.
* :func:`write_manifests` writes them deterministically (unchanged files are
  not touched; ``check=True`` reports what is out of date).

The ``setpoint generate crd|rbac|webhook`` commands wrap these.
"""

from setpoint.crd.conversion import WebhookClientConfig
from setpoint.crd.errors import CRDGenerationError, StructuralError
from setpoint.crd.generator import crd_for, crd_path, generate_crds, version_priority
from setpoint.crd.loader import LoadError, find_rbac_rules, find_resources, import_targets
from setpoint.crd.manifests import Manifest, ManifestWrite, render_yaml, write_manifests
from setpoint.crd.rbac import DEFAULT_ROLE_NAME, generate_rbac, normalize_rules
from setpoint.crd.schema import BuiltSchema, model_schema, resource_schema
from setpoint.crd.structural import validate_default, validate_structural
from setpoint.crd.webhooks import find_admission_webhooks, generate_webhooks, webhook_configurations

__all__ = [
    "DEFAULT_ROLE_NAME",
    "BuiltSchema",
    "CRDGenerationError",
    "LoadError",
    "Manifest",
    "ManifestWrite",
    "StructuralError",
    "WebhookClientConfig",
    "crd_for",
    "crd_path",
    "find_admission_webhooks",
    "find_rbac_rules",
    "find_resources",
    "generate_crds",
    "generate_rbac",
    "generate_webhooks",
    "import_targets",
    "model_schema",
    "normalize_rules",
    "render_yaml",
    "resource_schema",
    "validate_default",
    "validate_structural",
    "version_priority",
    "webhook_configurations",
    "write_manifests",
]
