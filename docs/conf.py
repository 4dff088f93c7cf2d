"""Sphinx configuration of setpoint's documentation site (``make docs``).

The guides are the Markdown files in this directory (rendered by MyST); the API
reference is generated at build time from the public surface by ``_ext/setpoint_api.py``.
The build is strict: ``make docs`` runs ``sphinx-build -W --keep-going -n``, so a broken
link, a reference to a name that is not documented, or a docstring that does not render
fails it. See docs/decisions/0009-documentation-site.md for why Sphinx.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "setpoint"
author = "the setpoint authors"
copyright = "the setpoint authors; Apache-2.0"
release = metadata.version("setpoint")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "setpoint_api",
]

root_doc = "index"
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "_ext", "README.md"]

# Every reference must resolve; only names outside setpoint (the standard library and
# third-party packages, whose inventories are not fetched: the build needs no network)
# are exempt.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(aiohttp|pydantic|pydantic_core|yaml|prometheus_client|cryptography)\..*"),
    (r"py:.*", r"(typing|typing_extensions|collections|collections\.abc|asyncio|enum)\..*"),
    (r"py:.*", r"(pathlib|datetime|types|logging|ssl|socket|subprocess|contextlib)\..*"),
    (r"py:.*", r"(dataclasses|abc|re|io|os|json|threading|concurrent\.futures)\..*"),
    # typing_extensions.TypeIs, imported for type checkers only (its import is slow).
    (r"py:class", r"TypeIs"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_class_signature = "separated"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_custom_sections = [
    ("Expected Flow", "notes_style"),
    ("Expected flow", "notes_style"),
    ("Guarantees", "notes_style"),
    ("Caveats", "notes_style"),
    ("Assumptions", "notes_style"),
    ("Errors", "Raises"),
]

myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
# "more than one target found" comes from builtin names in annotations (``type[T]``,
# ``object``) that Sphinx's fuzzy search also matches to attributes called ``type`` or
# ``object``; it resolves them to the builtin. Missing targets are still errors.
suppress_warnings = ["ref.python"]

html_theme = "furo"
html_title = f"setpoint {release}"
html_show_sourcelink = False
