"""The signup workflow behind a FastAPI app, with Legato's loops in the app's lifespan.

```
pip install 'legato[embedded]' fastapi uvicorn
legato db upgrade                                   # $LEGATO_DATABASE_URL
uvicorn examples.fastapi_app:api
curl -X POST localhost:8000/signups -H 'content-type: application/json' \
     -d '{"email": "ada@example.com"}'              # {"run_id": "..."}
curl -X POST 'localhost:8000/signups/RUN_ID/confirm?code=c0de'
curl 'localhost:8000/signups/RUN_ID?wait=5'         # {"status": "SUCCEEDED", ...}
```
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import AsyncIterator

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, JsonValue

from examples.signup import Confirmed, Signup, app, signup
from legato import (
    Client,
    InvalidArgument,
    InvalidInput,
    RunFailed,
    RunFinished,
    RunNotFound,
    Runtime,
    create_engine,
)


class Started(BaseModel):
    run_id: uuid.UUID


class Status(BaseModel):
    run_id: uuid.UUID
    status: str
    output: JsonValue = None
    error: str | None = None


def create_app(database_url: str | None = None) -> FastAPI:
    """The API on ``database_url`` (``LEGATO_DATABASE_URL`` by default)."""

    @contextlib.asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(database_url)
        # Every replica may run the loops: they coordinate through PostgreSQL.
        async with Runtime(engine, app), Client(engine, app=app) as client:
            api.state.legato = client
            yield
        await engine.dispose()

    api = FastAPI(lifespan=lifespan)

    def legato(request: Request) -> Client:
        client: Client = request.app.state.legato
        return client

    @api.post("/signups")
    async def create_signup(body: Signup, request: Request) -> Started:
        # A retried request (a double click, a proxy retry) finds the same run. The key
        # is a digest of the email: any email makes a valid key (printable, bounded).
        key = "signup:" + hashlib.sha256(body.email.encode()).hexdigest()
        try:
            handle = await legato(request).start(signup, body, idempotency_key=key)
        except (InvalidInput, InvalidArgument) as error:
            raise HTTPException(422, str(error)) from None
        return Started(run_id=handle.run_id)

    @api.post("/signups/{run_id}/confirm", status_code=204)
    async def confirm(run_id: uuid.UUID, code: str, request: Request) -> None:
        try:
            await legato(request).signal(run_id, "signup.confirmed", Confirmed(code=code))
        except RunNotFound:
            raise HTTPException(404, f"no signup {run_id}") from None
        except RunFinished as error:
            raise HTTPException(409, str(error)) from None

    @api.get("/signups/{run_id}")
    async def status(run_id: uuid.UUID, request: Request, wait: float = 0) -> Status:
        """The run's status; with ``wait``, first wait up to that many seconds for it
        to finish (a long poll)."""
        client = legato(request)
        try:
            if wait > 0:
                with contextlib.suppress(TimeoutError, RunFailed):
                    await client.result(run_id, timeout=min(wait, 30))
            run = (await client.get_run(run_id)).run
        except RunNotFound:
            raise HTTPException(404, f"no signup {run_id}") from None
        error = None if run.error is None else f"{run.error.type}: {run.error.message}"
        return Status(run_id=run.id, status=run.status.value, output=run.output, error=error)

    return api


api = create_app()
