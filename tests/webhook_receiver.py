"""A loopback HTTP server that receives webhooks and answers as the test cues it: ``ok``
(200), ``fail`` (500), ``hang`` (never answers; closes once released) or ``hold``
(answers 200 once released). It counts the requests open at once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal

from legato import webhooks

Cue = Literal["ok", "fail", "hang", "hold"]


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    @property
    def event_id(self) -> str:
        return self.headers[webhooks.EVENT_ID_HEADER.lower()]


@dataclass
class Receiver:
    """Every request received (answered or not), and the cue for the next ones: ``cue(n)``
    is the answer to the n-th request (0-based)."""

    cue: Callable[[int], Cue] = lambda _: "ok"
    requests: list[Received] = field(default_factory=list)
    answered: list[Received] = field(default_factory=list)  # with a 200
    released: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""
    open: int = 0  # requests received and not yet answered or closed
    peak: int = 0  # the most ever open at once

    def unique(self) -> dict[str, Received]:
        """The receiver's dedupe: one delivery per event id (the first answered 200)."""
        seen: dict[str, Received] = {}
        for request in self.answered:
            seen.setdefault(request.event_id, request)
        return seen

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received: Received | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")[1:]
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            received = Received(headers, body)
            cue = self.cue(len(self.requests))
            self.requests.append(received)
            self.open += 1
            self.peak = max(self.peak, self.open)
            if cue in ("hang", "hold"):
                await self.released.wait()
            if cue == "hang":
                return  # close without an answer
            status = "500 Internal Server Error" if cue == "fail" else "200 OK"
            if cue != "fail":
                self.answered.append(received)
            # Closed as answered, before the relay can read the answer and send the next.
            self.open -= 1
            received = None
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".encode()
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the relay went away mid-request (killed, or timed out)
        finally:
            if received is not None:  # not answered: closed without one
                self.open -= 1
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()


@asynccontextmanager
async def receiver(cue: Callable[[int], Cue] = lambda _: "ok") -> AsyncIterator[Receiver]:
    """A :class:`Receiver` listening on 127.0.0.1 (a free port) for the block."""
    state = Receiver(cue=cue)
    server = await asyncio.start_server(state._serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    state.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield state
    finally:
        state.released.set()
        server.close()
        await server.wait_closed()
