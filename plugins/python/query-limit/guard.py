"""query-limit: a `run_query` call whose SQL has no LIMIT gets ` LIMIT 100`.

A rewrite-seam guard written as a module-level function: the SQL loses its
trailing whitespace and semicolons, gains ` LIMIT 100`, and every other
argument is kept. Calls that already say LIMIT (in any case), other tools, and
calls without a string `sql` pass through unchanged.
"""

from toolgate_guest import Rewrite, ToolCallDispatchEvent, rewrite

LIMIT = " LIMIT 100"


def on_tool_call_dispatch(event: ToolCallDispatchEvent) -> Rewrite | None:
    sql = event.args.get("sql")
    if event.tool_name != "run_query" or not isinstance(sql, str) or "LIMIT" in sql.upper():
        return None
    end = len(sql)
    while end and (sql[end - 1].isspace() or sql[end - 1] == ";"):
        end -= 1
    return rewrite(event.tool_name, {**event.args, "sql": sql[:end] + LIMIT})
