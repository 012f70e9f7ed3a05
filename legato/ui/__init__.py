"""``legato ui``: a dashboard of runs, workflows and queues, as an ASGI app.

Needs the ``legato[ui]`` extra (Starlette, Jinja2, and uvicorn for ``legato ui``).
"""

from legato.ui.app import create_app

__all__ = ["create_app"]
