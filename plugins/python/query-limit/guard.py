"""query-limit: a `run_query` call whose SQL has no LIMIT gets ` LIMIT 100`.

A rewrite-seam guard written as module-level functions: the SQL loses its
trailing whitespace and semicolons, gains ` LIMIT 100`, and every other
argument is kept. Calls that already say LIMIT (in any case), other tools, and
calls without a string `sql` pass through unchanged.

The row cap is the config's `limit` (default 100), checked at load by
`validate_config`: a `limit` that is not a positive integer, or any other key,
refuses the plugin.

```toml
[plugin.config]
limit = 100   # the LIMIT appended to unbounded queries
```
"""

from typing import Any, Dict

from toolgate_guest import Rewrite, ToolCallDispatchEvent, config, rewrite

DEFAULT_LIMIT = 100


def row_limit(config: Dict[str, Any]) -> int:
    """The row cap in `config`; raises ValueError for a config it refuses."""
    unknown = sorted(set(config) - {"limit"})
    if unknown:
        raise ValueError(f"config: unknown key {', '.join(map(repr, unknown))}; the only key is limit")
    limit = config.get("limit", DEFAULT_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"config: limit must be a positive integer, not {limit!r}")
    return limit


def validate_config(config: Dict[str, Any]) -> None:
    row_limit(config)


def on_tool_call_dispatch(event: ToolCallDispatchEvent) -> Rewrite | None:
    sql = event.args.get("sql")
    if event.tool_name != "run_query" or not isinstance(sql, str) or "LIMIT" in sql.upper():
        return None
    end = len(sql)
    while end and (sql[end - 1].isspace() or sql[end - 1] == ";"):
        end -= 1
    return rewrite(event.tool_name, {**event.args, "sql": f"{sql[:end]} LIMIT {row_limit(config())}"})
