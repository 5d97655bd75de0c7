"""toolgate for symfonic: consult a ``toolgate serve`` guard service from an agent.

>>> from toolgate_symfonic import ToolgateHandler
>>> handler = ToolgateHandler("http://127.0.0.1:7878")        # doctest: +SKIP
>>> handler.install(agent)          # routing guards narrow the palette  # doctest: +SKIP
>>> await agent.run(query, callbacks=[handler])              # doctest: +SKIP
"""

from ._wire import STATE_KEYS, json_safe, state_subset
from .handler import (
    FAIL_CLOSED_MESSAGE,
    FailurePolicy,
    ServiceError,
    ToolgateHandler,
)
from .palette import ToolgatePaletteResolver

__all__ = [
    "FAIL_CLOSED_MESSAGE",
    "STATE_KEYS",
    "FailurePolicy",
    "ServiceError",
    "ToolgateHandler",
    "ToolgatePaletteResolver",
    "json_safe",
    "state_subset",
]

__version__ = "0.1.0"
