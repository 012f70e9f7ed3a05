"""The bench's transaction count from the server log (bench.txcount), on literal lines."""

from __future__ import annotations

from bench.txcount import PROBE_APP, count_transactions

LINES = [
    "@tx,101,lb_x,,3/17:LOG:  execute __asyncpg_stmt_1__: INSERT INTO t VALUES ($1)",
    "@tx,101,lb_x,,3/18:LOG:  statement: BEGIN",
    "@tx,101,lb_x,,3/18:LOG:  execute __asyncpg_stmt_2__: UPDATE t SET v = 1",
    "\tAND more_of_the_same_statement",
    "@tx,101,lb_x,,3/18:LOG:  statement: COMMIT",
    "@tx,102,lb_x,,4/17:LOG:  execute <unnamed>: SELECT 1",
    f"@tx,103,lb_x,{PROBE_APP},5/9:LOG:  execute <unnamed>: SELECT count(*) FROM runs",
    "@tx,104,lb_other,,6/2:LOG:  statement: SELECT 1",
    "@tx,105,lb_x,,7/0:LOG:  checkpoint starting: time",
    "@tx,101,lb_x,,3/19:ERROR:  relation does not exist",
]


def test_each_transaction_counts_once_and_probes_and_other_databases_do_not() -> None:
    # 3/17 (autocommit insert), 3/18 (BEGIN..COMMIT), 4/17 (a read): three transactions.
    assert count_transactions(LINES, "lb_x") == 3


def test_the_same_vxid_in_two_backends_is_two_transactions() -> None:
    lines = [
        "@tx,1,d,,3/5:LOG:  statement: SELECT 1",
        "@tx,2,d,,3/5:LOG:  statement: SELECT 1",
    ]
    assert count_transactions(lines, "d") == 2


def test_lines_without_the_prefix_count_nothing() -> None:
    assert count_transactions(["LOG:  statement: SELECT 1", ""], "d") == 0
