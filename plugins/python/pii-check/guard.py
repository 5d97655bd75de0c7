"""pii-check (steering, outbound HTTP): before `send_email` runs, asks a
classifier whether the mail carries personal data, and steers the model to
remove it if so. The Rust `plugins/rust/pii-check`, in Python.

It POSTs `{"text": T}` as JSON to the classifier at its config's `url` — `T`
is the call's `body` argument, or the args as JSON text when there is no
string `body` — which answers `{"pii": true | false}`. On `true` the call is
refused with an error result (`is_error` true) the model retries against. A
network fault (the classifier down, slow past the call's deadline, off the
plugin's grant) traps the call, and so does an answer that is not
`{"pii": true | false}`: the plugin's `on_error` applies, `skip` lets the
mail go, `deny` refuses it.

```toml
[[plugin]]
path = "pii-check.wasm"
allowed_hosts = ["https://pii.internal.example"]
http_methods = ["POST"]
on_error = "deny"
[plugin.config]
url = "https://pii.internal.example/v1/classify"
tool = "send_email"   # default
```

The config is checked at load (`validate_config`): a missing or non-HTTP
`url`, a `tool` that is not a string, or another key refuses the plugin.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Tuple

from toolgate_guest import BeforeToolCallEvent, Skip, config, http, steer

#: What the model sees when the mail carries personal data.
MESSAGE = ("This email contains personal data (an address, a phone number, a name with contact "
           "details ...). Remove the personal data from the email, then send it again.")

KEYS = ("url", "tool")


def settings(config: Dict[str, Any]) -> Tuple[str, str]:
    """The classifier's URL and the tool to check; raises ValueError for a
    config it refuses."""
    unknown = [key for key in config if key not in KEYS]
    if unknown:
        raise ValueError(f"config: unknown field `{unknown[0]}`, expected `url` or `tool`")
    if "url" not in config:
        raise ValueError("config: missing field `url`")
    url, tool = config["url"], config.get("tool", "send_email")
    for key, value in (("url", url), ("tool", tool)):
        if not isinstance(value, str):
            raise ValueError(f"config: {key} must be a string, not {type(value).__name__}")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"config: url must be an http:// or https:// URL, not {json.dumps(url)}")
    return url, tool


def validate_config(config: Dict[str, Any]) -> None:
    settings(config)


def on_before_tool_call(event: BeforeToolCallEvent) -> Optional[Skip]:
    url, tool = settings(config())  # checked at load: a failure here is a fault
    if event.tool_name != tool:
        return None
    body = event.args.get("body")
    text = body if isinstance(body, str) else json.dumps(event.args, separators=(",", ":"), ensure_ascii=False)
    answer = http.post_json(url, {"text": text})
    try:
        pii = answer.json().get("pii") if answer.ok else None
    except (ValueError, AttributeError):
        pii = None
    if not isinstance(pii, bool):  # not an answer: a fault, so on_error decides
        raise RuntimeError(f"the classifier at {url} answered {answer.status} {answer.text()!r}, "
                           'not {"pii": true|false}')
    return steer(MESSAGE) if pii else None
