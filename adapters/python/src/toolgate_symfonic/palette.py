"""Applying routing guards' narrowing through symfonic's tool-palette resolver.

symfonic's ``on_tool_routing_decision`` hook is observe-only: whatever a
handler returns is ignored. The one place where user code decides which tools
are bound to the model is the ``ToolPaletteResolver`` capability
(``symfonic.core.tool_palette_resolver``): on every React iteration, before
``bind_tools``, the react node calls ``resolve(state, role, all_tools)`` and
binds what it returns (``None`` = unchanged). ``all_tools`` has already been
narrowed by symfonic's own routing when ``tool_routing_mode="enforce"``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._wire import tool_name_of

if TYPE_CHECKING:
    from .handler import ToolgateHandler

logger = logging.getLogger("toolgate_symfonic")


class ToolgatePaletteResolver:
    """A symfonic ``ToolPaletteResolver`` that hides what routing guards hid.

    On the first model turn of a run for which symfonic fired
    ``on_tool_routing_decision`` (``tool_routing_mode`` "observe" or
    "enforce", and symfonic's narrower dropped at least one tool), it posts
    that event to the service's routing seam, enriched with the visible
    tools' descriptions, the query, the JSON state subset and the run's
    tenant; later turns reuse the verdict. Every tool that symfonic offered
    the guards and the guards did not keep is removed from the palette.
    Tools symfonic did not offer (in "observe" mode the model still sees
    the full manifest) are left alone: a guard can hide a tool, never add
    one.

    Args:
        handler: The :class:`~toolgate_symfonic.ToolgateHandler` registered
            on the same runs (its transport, tenant and failure policy
            apply).
        inner: The resolver this one wraps (symfonic's own, which applies
            ``FrameworkConfig.role_tools``), consulted first.
        always_route: Also consult the routing seam on runs for which
            symfonic fired no routing event (routing "off", the default, or
            its narrower kept every tool); default true. The event is then
            built from the palette: ``mode`` is ``"off"``, ``intent_label``
            ``""``, and every palette tool is offered.
    """

    def __init__(
        self,
        handler: ToolgateHandler,
        inner: Any | None = None,
        *,
        always_route: bool = True,
    ) -> None:
        self.handler = handler
        self.inner = inner
        self.always_route = always_route

    async def resolve(
        self,
        state: dict[str, Any],
        role: str,
        all_tools: list[Any],
    ) -> list[Any] | None:
        """Returns the palette for this turn, or ``None`` for "unchanged"."""
        base: list[Any] | None = None
        if self.inner is not None:
            try:
                base = await self.inner.resolve(state, role, all_tools)
            except Exception:
                logger.exception("toolgate: wrapped ToolPaletteResolver raised; ignoring it")
                base = None
        tools = list(base) if base is not None else list(all_tools)
        try:
            run = await self.handler.routing_verdict(state, tools, always_route=self.always_route)
        except Exception:
            logger.exception("toolgate: palette resolution failed; palette unchanged")
            return base
        if run is None:
            return base
        if run.closed:
            return []
        hidden = run.hidden
        if not hidden:
            return base
        return [t for t in tools if tool_name_of(t) not in hidden]
