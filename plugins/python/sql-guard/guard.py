"""sql-guard: a `run_query` call whose SQL has no WHERE clause is steered back.

The seed's `SqlGuard`, line for line (steering seam): the model sees an error
result asking for a WHERE clause and retries; every other call proceeds. Like
the seed, a `run_query` call without a string `sql` argument is an error in the
guard: it raises, and the host logs the fault and lets the call proceed.
"""

from toolgate_guest import BeforeToolCallEvent, Guard, Verdict, steer


class SqlGuard(Guard):
    def on_before_tool_call(self, event: BeforeToolCallEvent) -> Verdict | None:
        if event.tool_name == "run_query" and "WHERE" not in event.args["sql"].upper():
            return steer("Add a WHERE clause before running this query.")
        return None  # proceed: run the tool normally
