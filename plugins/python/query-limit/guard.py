"""query-limit: a `run_query` call whose SQL has no LIMIT gets ` LIMIT 100`.

A rewrite-seam guard written as a module-level function: the SQL loses its
trailing whitespace and semicolons, gains ` LIMIT 100`, and every other
argument is kept. Calls that already say LIMIT (in any case) pass through.
"""

from toolgate_guest import DispatchEvent, Rewrite, rewrite

TRAILING = " \t\n\r\f\v;"


def dispatch(event: DispatchEvent) -> Rewrite | None:
    sql = event.args.get("sql")
    if event.tool_name != "run_query" or not isinstance(sql, str) or "LIMIT" in sql.upper():
        return None
    return rewrite("run_query", {**event.args, "sql": sql.rstrip(TRAILING) + " LIMIT 100"})
