"""sql-guard: a `run_query` call whose SQL has no WHERE clause is steered back.

The seed's example guard (steering seam): the model sees an error result asking
for a WHERE clause and retries; every other call proceeds.
"""

from toolgate_guest import BeforeToolCallEvent, Guard, Verdict, steer


class SqlGuard(Guard):
    def before_tool_call(self, event: BeforeToolCallEvent) -> Verdict | None:
        sql = event.args.get("sql")
        if event.tool_name == "run_query" and isinstance(sql, str) and "WHERE" not in sql.upper():
            return steer("Add a WHERE clause before running this query.")
        return None  # proceed
