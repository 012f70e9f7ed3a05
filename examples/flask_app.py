"""The signup workflow behind a Flask (WSGI) app, through ``legato.SyncClient``.

```
pip install legato flask
legato db upgrade                                    # $LEGATO_DATABASE_URL
legato worker --app examples.signup:app &            # the loops run in their own processes
legato decider --app examples.signup:app &
legato timer &
flask --app examples.flask_app run --with-threads
curl -X POST localhost:5000/signups -H 'content-type: application/json' \
     -d '{"email": "ada@example.com"}'
```

One ``SyncClient`` per process serves every request thread: its calls run on a
private event loop thread, so no request owns an event loop.
"""

from __future__ import annotations

import hashlib
import uuid

from flask import Flask, abort, request

from examples.signup import Confirmed, Signup, app, signup
from legato import InvalidArgument, InvalidInput, RunFinished, RunNotFound, SyncClient


def create_app(database_url: str | None = None) -> Flask:
    """The app on ``database_url`` (``LEGATO_DATABASE_URL`` by default)."""
    web = Flask(__name__)
    client = SyncClient(database_url, app=app)
    web.extensions["legato"] = client

    @web.post("/signups")
    def create_signup() -> dict[str, str]:
        try:
            body = Signup.model_validate(request.get_json(force=True))
            # A digest of the email: any email makes a valid key (printable, bounded).
            key = "signup:" + hashlib.sha256(body.email.encode()).hexdigest()
            handle = client.start(signup, body, idempotency_key=key)
        except RecursionError:  # the JSON parser's, on a body nested too deep
            abort(400, "the body nests JSON too deeply")
        except (ValueError, InvalidInput, InvalidArgument) as error:
            abort(422, str(error))
        return {"run_id": str(handle.run_id)}

    @web.post("/signups/<uuid:run_id>/confirm")
    def confirm(run_id: uuid.UUID) -> tuple[str, int]:
        try:
            client.signal(run_id, "signup.confirmed", Confirmed(code=request.args["code"]))
        except RunNotFound:
            abort(404, f"no signup {run_id}")
        except RunFinished as error:
            abort(409, str(error))
        return "", 204

    @web.get("/signups/<uuid:run_id>")
    def status(run_id: uuid.UUID) -> dict[str, object]:
        try:
            run = client.get_run(run_id).run
        except RunNotFound:
            abort(404, f"no signup {run_id}")
        return {"run_id": str(run.id), "status": run.status.value, "output": run.output}

    return web
