"""examples/flask_app.py through Flask's test client, request threads and all."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.ext.asyncio import AsyncEngine

from examples.flask_app import create_app
from examples.signup import app
from legato import Runtime, SyncClient


def _signups(database_url: str) -> None:
    web = create_app(database_url)
    try:
        http = web.test_client()

        def one(n: int) -> str:
            started = http.post("/signups", json={"email": f"user{n}@example.com"})
            assert started.status_code == 200
            run_id: str = started.get_json()["run_id"]
            assert http.post(f"/signups/{run_id}/confirm?code=c{n}").status_code == 204
            return run_id

        with ThreadPoolExecutor(4) as pool:  # concurrent request threads, one client
            run_ids = list(pool.map(one, range(4)))
        client: SyncClient = web.extensions["legato"]
        for n, run_id in enumerate(run_ids):
            output = client.result(uuid.UUID(run_id), timeout=30)
            assert isinstance(output, dict)
            assert output["confirmation"] == f"c{n}"
        assert http.get(f"/signups/{run_ids[0]}").get_json()["status"] == "SUCCEEDED"
        assert http.post("/signups", json={"mail": "x"}).status_code == 422
        deep = "[" * 100_000 + "]" * 100_000  # the JSON parser's RecursionError was a 500
        refused = http.post("/signups", data=deep, content_type="application/json")
        assert refused.status_code == 400
        assert http.post("/signups", json={"email": "a\u0001b"}).status_code == 200
        assert http.get("/signups/01940000-0000-7000-8000-000000000001").status_code == 404
    finally:
        web.extensions["legato"].close()


async def test_signup_through_the_flask_app(engine: AsyncEngine, database_url: str) -> None:
    async with Runtime(engine, app, poll_interval=0.2):
        await asyncio.to_thread(_signups, database_url)
