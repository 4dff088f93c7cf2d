"""``python -m setpoint``: the same as the ``setpoint`` command."""

from setpoint.cli.main import main

raise SystemExit(main())
