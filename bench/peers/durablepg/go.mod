module legato.invalid/bench/durablepg

go 1.25

require (
	github.com/akashsharma95/durablepg v0.0.0-20260326153149-9433fcb64b20
	github.com/jackc/pgx/v5 v5.7.6
)
