"""toolgate for symfonic: sandboxed WebAssembly guards on an agent's tool calls.

>>> from toolgate_symfonic import ToolgateHandler
>>> handler = ToolgateHandler(plugins="guards/")   # in-process  # doctest: +SKIP
>>> handler = ToolgateHandler(url="http://127.0.0.1:7878")   # or a service  # doctest: +SKIP
>>> handler.install(agent)          # routing guards narrow the palette  # doctest: +SKIP
>>> await agent.run(query, callbacks=[handler])              # doctest: +SKIP
"""

from ._transport import CircuitBreaker, ConfigurationError, ServiceError
from ._wire import LIFECYCLE_FIELDS, STATE_KEYS, json_safe, lifecycle_event, state_subset, tenant_dir
from .handler import (
    FAIL_CLOSED_ANSWER,
    FAIL_CLOSED_MESSAGE,
    REQUIRED_HOOKS,
    FailurePolicy,
    ToolgateHandler,
)
from .palette import ToolgatePaletteResolver

__all__ = [
    "FAIL_CLOSED_ANSWER",
    "FAIL_CLOSED_MESSAGE",
    "LIFECYCLE_FIELDS",
    "REQUIRED_HOOKS",
    "STATE_KEYS",
    "CircuitBreaker",
    "ConfigurationError",
    "FailurePolicy",
    "ServiceError",
    "ToolgateHandler",
    "ToolgatePaletteResolver",
    "json_safe",
    "lifecycle_event",
    "state_subset",
    "tenant_dir",
]

__version__ = "0.1.0"
