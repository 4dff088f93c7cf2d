"""TLS material shared by the client and the servers: PEM into SSL contexts, certificates.

Two modules, each cheap to import on its own:

- :mod:`setpoint.tls.pem` loads PEM certificates and keys held in memory into an
  :class:`ssl.SSLContext` without leaving them on disk, and turns ``ssl`` errors into one-line
  reasons. The client uses it for kubeconfig and exec-plugin certificates, the servers for
  their serving certificate.
- :mod:`setpoint.tls.certs` makes and reads certificates (a CA, serving and client
  certificates, service-account signing keys), with ``cryptography``. The local control plane
  and the webhook server use it.

The package sits beside :mod:`setpoint.observability`, below both :mod:`setpoint.client` and
:mod:`setpoint.server`, so that both sides share one copy of this code (see
``docs/architecture.md``).
"""
