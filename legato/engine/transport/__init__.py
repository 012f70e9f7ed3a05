"""How work and wake-ups move between loops and processes: LISTEN/NOTIFY wake-ups,
the in-process hand-off, and the asyncpg fast path."""
