-- Resource-bomb queries for the serving test (bombs.rs): one per line, each sent to a running
-- `causeway serve` as run_sql. Every one must be answered (refused by the guard, stopped by a
-- limit, or run) within the server's time limit plus one second, with the server's memory under
-- its documented ceiling, and the server answering the next query. Measured with DuckDB 1.5.6
-- and no guard: what each did on its own (docs/sql-guard.md has the table).
-- Edit distances: quadratic time, and memory for Damerau's (4.8 GB, 15 s unresponsive).
SELECT damerau_levenshtein(repeat('a',25000), repeat('b',25000))
SELECT levenshtein(repeat('a',25000), repeat('b',25000))
SELECT editdist3(repeat('a',25000), repeat('b',25000))
SELECT levenshtein(comm, repeat('x', 90000)) FROM events
SELECT damerau_levenshtein(s.symbol, s.symbol) FROM stack_frames s
-- Generators multiplied by lambdas (4.2 GB) and by rows (4.2 GB).
SELECT list_transform(range(10000), x -> range(1000000))
SELECT len(list_transform(range(10000), x -> range(1000000)))
SELECT list_transform(range(100000), x -> list_transform(range(1000), y -> x + y))
SELECT list_transform(range(1000), x -> repeat('x', 100000))
SELECT list_filter(range(100000), x -> len(range(100000)) > 0)
SELECT list_transform(list(duration), d -> range(1000)) FROM events
SELECT range(1000000) FROM events
SELECT repeat('x', 100000) FROM events
SELECT lpad('x', 100000, 'y') FROM events ORDER BY timestamp
SELECT string_split(repeat('a,', 50000), ',') FROM events
SELECT regexp_extract_all(repeat('a', 100000), '.', 0) FROM events
SELECT hex(repeat('a', 100000)) FROM events
SELECT list_concat(range(1000000), range(1000000)) FROM events
SELECT unnest(range(1000000)) FROM events
SELECT concat(repeat('x', 100000), repeat('x', 100000)) FROM events
SELECT format('{}', repeat('x', 100000)) FROM events
SELECT strftime(to_timestamp(timestamp / 1e9), repeat('%Y', 50000)) FROM events
SELECT lpad(comm, 100000, repeat('ab', 50000)) FROM events
SELECT string_agg(comm, repeat('x', 100000)) FROM events
SELECT quantile_cont(duration, list_transform(range(1000000), x -> x / 1e6)) FROM events
-- Big single values.
SELECT list_sort(range(1000000))
SELECT list_value(range(1000000), range(1000000), range(1000000))
SELECT map_from_entries(list_transform(range(1000000), x -> (x, x)))
SELECT list_reduce(range(1000000), (a, b) -> a + b)
SELECT repeat(repeat('x', 1000), 1000)
SELECT rpad('', 2000000000, 'x')
SELECT printf('%1000000000d', 1)
SELECT format('{:>1000000000}', 'x')
SELECT range(1e12)
-- Output that grows with each match or element (2-6 GB).
SELECT regexp_replace(repeat('a', 100000), '', repeat('b', 10000), 'g')
SELECT replace(repeat('a', 100000), 'a', repeat('b', 100000))
SELECT array_to_string(range(1000000), repeat('x', 100000))
SELECT replace(comm, 'o', repeat('o', 60000)) FROM events
-- Accumulators that double (6.7 GB from 64 elements).
SELECT list_reduce(range(64), (a, b) -> a || a)
SELECT length(list_reduce(list_transform(range(64), x -> 'ab'), (a, b) -> a || a))
SELECT list_reduce(range(40), (a, b) -> [a, a])
SELECT list_reduce(list_transform(range(60), x -> [x]), (a, b) -> list_concat(a, a))
-- Backtracking patterns (17 s to over 12 minutes, not interruptible).
SELECT repeat('a',60) LIKE '%a%a%a%a%a%a%a%a_b'
SELECT repeat('a',60) LIKE '%a%a%a%a%a%a%a%a%a%a_b'
SELECT repeat('a',60) ILIKE '%a%a%a%a%a%a%a%a_b'
SELECT repeat('a',100000) LIKE '%a_%b'
SELECT repeat('a',100000) LIKE '_%a%b'
SELECT repeat('a',100000) LIKE '%a%b' ESCAPE '\'
SELECT repeat('a',100000) ILIKE '%a%a%a%a%a%b'
SELECT like_escape(repeat('a', 60), '%a%a%a%a%a%a_b', '\')
SELECT repeat('a', 60) ~~* '%a%a%a%a%a%a%b'
SELECT repeat('a',60) GLOB '*a*a*a*a*a*a*a*a?b'
SELECT count(*) FROM events WHERE comm LIKE comm || '%_%'
-- Joins and aggregates DuckDB bounds itself (interrupt, memory limit).
SELECT count(*) FROM events e1, events e2 WHERE e1.duration < e2.duration
SELECT count(*) FROM events a JOIN events b ON a.pid = b.pid JOIN events c ON b.pid = c.pid
SELECT count(*) FROM events a, events b
SELECT list(range(1000)) FROM events
SELECT list(repeat(comm, 1000)) FROM events
SELECT array_agg(range(100)) FROM events e1, events e2 WHERE e1.timestamp < e2.timestamp + 1000
SELECT histogram(timestamp) FROM events
SELECT list(a.comm || b.comm) FROM events a JOIN events b ON a.pid = b.pid
SELECT string_agg(a.comm, ',') FROM events a JOIN events b ON a.pid = b.pid
SELECT a.pid, list(b.timestamp) FROM events a JOIN events b ON a.pid = b.pid GROUP BY ALL
SELECT max(len(range(100000))) FROM events
SELECT * FROM events ORDER BY random()
WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r
SELECT count(*) FROM range(1000000) a, range(1000000) b WHERE true
