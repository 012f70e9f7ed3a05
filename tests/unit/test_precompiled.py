"""What ``compile_for_driver`` accepts: parameters the driver encodes itself, and the
statement's own constants converted once, in the schema it is compiled for; it refuses
a parameter SQLAlchemy would have to convert rather than send it unconverted."""

from __future__ import annotations

import pytest
from sqlalchemy import ARRAY, Boolean, Integer, Text, bindparam, literal, select
from sqlalchemy.dialects.postgresql import JSONB

from legato.db import create_engine
from legato.engine.repositories.precompiled import compile_for_driver
from legato.schema import DecideQueue

DIALECT = create_engine("postgresql+asyncpg://nobody@localhost/none", "legato").dialect


def test_arrays_booleans_and_constants_are_sent_as_given() -> None:
    statement = select(DecideQueue.run_id).where(
        DecideQueue.shard == bindparam("shard", type_=Integer()),
        DecideQueue.failures < literal(7, Integer()),
        bindparam("flag", type_=Boolean()),
        DecideQueue.reason == bindparam("reasons", type_=ARRAY(Text())).any_(),
    )
    compiled = compile_for_driver(DIALECT, {"legato": "wf_custom"}, statement)
    assert "FROM wf_custom.decide_queue" in compiled.sql and "$4" in compiled.sql
    given = {"shard": 1, "flag": True, "reasons": ["a"]}
    assert compiled.args(given) == [1, 7, True, ["a"]]


def test_a_parameter_sqlalchemy_converts_is_refused() -> None:
    statement = select(bindparam("document", type_=JSONB()))
    with pytest.raises(TypeError, match=r"'document'.*needs SQLAlchemy's conversion"):
        compile_for_driver(DIALECT, {}, statement)
