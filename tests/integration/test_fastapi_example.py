"""examples/fastapi_app.py driven through an ASGI test client, lifespan included."""

from __future__ import annotations

import httpx

from examples.fastapi_app import create_app


async def test_signup_through_the_api(database_url: str) -> None:
    api = create_app(database_url)
    transport = httpx.ASGITransport(app=api)
    async with (
        api.router.lifespan_context(api),
        httpx.AsyncClient(transport=transport, base_url="http://test") as http,
    ):
        first = await http.post("/signups", json={"email": "ada@example.com"})
        assert first.status_code == 200
        run_id = first.json()["run_id"]
        again = await http.post("/signups", json={"email": "ada@example.com"})
        assert again.json()["run_id"] == run_id  # idempotent on the email

        running = await http.get(f"/signups/{run_id}")
        assert running.json()["status"] == "RUNNING"

        confirmed = await http.post(f"/signups/{run_id}/confirm", params={"code": "c0de"})
        assert confirmed.status_code == 204
        done = await http.get(f"/signups/{run_id}", params={"wait": 20})
        assert done.json() == {
            "run_id": run_id,
            "status": "SUCCEEDED",
            "output": {"user_id": "ada", "email": "ada@example.com", "confirmation": "c0de"},
            "error": None,
        }

        late = await http.post(f"/signups/{run_id}/confirm", params={"code": "again"})
        assert late.status_code == 409
        bad = await http.post("/signups", json={"mail": "x"})
        assert bad.status_code == 422
        for odd in ("a\u0001b", "a\u200bb", "x" * 600 + "@example.com"):  # each key was a 500
            started = await http.post("/signups", json={"email": odd})
            assert started.status_code == 200, started.text
        missing = await http.get("/signups/01940000-0000-7000-8000-000000000001")
        assert missing.status_code == 404
