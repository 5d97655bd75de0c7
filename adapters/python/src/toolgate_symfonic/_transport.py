"""How the handler reaches the guards: in-process (``toolgate.Host``) or over HTTP.

Both transports take the same request body (``{"event", "state", "tenant"?}``)
and return the same answer (what the symfonic hook returns) with the same
trace (one entry per guard consulted: the service's ``?trace=1``, the
host's ``trace=True``), so the handler has one set of semantics over either.
Each raises:

- :class:`ConfigurationError` when the request is refused as invalid (the
  service's 4xx; the embedded host's ``RequestError``): retrying cannot help,
  someone has to fix a setting;
- :class:`ServiceError` for everything else that leaves no usable answer
  (connection refused, a timeout, a 5xx, an open circuit breaker).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.request
import weakref
from typing import TYPE_CHECKING, Any

import httpx

from ._http1 import Pool, ProtocolError

if TYPE_CHECKING:
    from toolgate import Host

logger = logging.getLogger("toolgate_symfonic")


class ServiceError(Exception):
    """The guards could not give a usable answer.

    Raised inside the handler only; the hooks turn it into the failure
    policy's outcome and never let it out.
    """


class ConfigurationError(ServiceError):
    """A request was refused as invalid: a wrong URL, token, or request.

    The handler resolves it by its failure policy like any failure, but logs
    it at ERROR (once per distinct reason) and counts it in
    ``handler.config_errors``: until it is fixed, no guard is consulted.
    :meth:`ToolgateHandler.check` raises it.
    """


def _text(content: bytes) -> str:
    """The start of an answer's body, for an error message."""
    return content[:300].decode("utf-8", "replace")


def _dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


#: What a transport's ``call`` returns: the hook's answer and the trace.
Answer = tuple[Any, list[dict[str, Any]]]


def _traced(doc: Any) -> Answer:
    """Splits a traced answer ``{"result": ..., "trace": [...]}``."""
    if not isinstance(doc, dict) or "result" not in doc:
        raise ServiceError(f"answer has no result: {str(doc)[:300]!r}")
    trace = doc.get("trace")
    if not isinstance(trace, list):
        raise ServiceError(f"answer has no trace: {str(doc)[:300]!r}")
    return doc["result"], [e for e in trace if isinstance(e, dict)]


def load_findings(description: Any, where: str) -> list[str]:
    """Checks a plugin set's description (``GET /v1/plugins``,
    ``Host.plugins()``): raises ConfigurationError when files failed to
    load; returns the warnings (no guard loaded at all, a plugin serving
    without its snapshot)."""
    if not isinstance(description, dict):
        raise ConfigurationError(f"{where}: the plugin list is not an object")
    issues = [e for e in description.get("errors") or () if isinstance(e, dict)]
    errors = [e for e in issues if e.get("kind") != "snapshot"]
    if errors:
        raise ConfigurationError(
            f"{len(errors)} file(s) in {where} failed to load: "
            + "; ".join(str(e.get("message", e)) for e in errors)
        )
    # A message names its file.
    warnings = [str(e.get("message", e)) for e in issues]
    tenants = description.get("tenants") or {}
    if description.get("starting"):
        warnings.append(
            f"{where} is still loading its global guards: until they are in, every call "
            "is answered 503 (not ready) and resolved by the failure policy"
        )
    elif not description.get("global") and not any(tenants.values()):
        warnings.append(
            f"no guard is loaded in {where}: every tool call proceeds as if no guard "
            "had answered (an empty plugin directory?)"
        )
    return warnings


class CircuitBreaker:
    """Stops waiting on a service that keeps failing.

    After ``threshold`` consecutive failures the circuit opens: for
    ``cooldown`` seconds every call fails at once (the failure policy applies
    without waiting for a timeout). Then one call is let through as a probe:
    its success closes the circuit, its failure opens it for another
    cool-down.
    """

    def __init__(self, threshold: int, cooldown: float) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self.consecutive = 0
        self.open_until: float | None = None
        self._probing = False
        #: How many times the circuit opened.
        self.opened = 0

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half-open"`` (a probe may go)."""
        if self.open_until is None:
            return "closed"
        return "open" if time.monotonic() < self.open_until or self._probing else "half-open"

    def before_call(self) -> None:
        """Raises ServiceError while the circuit is open."""
        if self.open_until is None:
            return
        now = time.monotonic()
        if now < self.open_until or self._probing:
            wait = max(0.0, self.open_until - now)
            raise ServiceError(
                f"circuit open after {self.consecutive} consecutive failures "
                f"(next probe in {wait:.1f}s)"
            )
        self._probing = True

    def success(self) -> None:
        """Records an answer: closes the circuit."""
        if self.open_until is not None:
            logger.warning("toolgate: service answered again; circuit closed")
        self.consecutive = 0
        self.open_until = None
        self._probing = False

    def failure(self, target: str, cause: str, policy: str) -> None:
        """Records a failure; opens the circuit at the threshold."""
        self.consecutive += 1
        probing, self._probing = self._probing, False
        if probing or self.consecutive >= self.threshold:
            self.open_until = time.monotonic() + self.cooldown
            self.opened += 1
            logger.error(
                "toolgate: %s failed %d times in a row (last: %s); circuit open for %gs: "
                "every guard call is resolved by %s at once until a probe succeeds",
                target,
                self.consecutive,
                cause,
                self.cooldown,
                policy,
            )


def _proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url``'s scheme (``HTTP_PROXY``,
    ``HTTPS_PROXY``, ``ALL_PROXY``), if any."""
    proxies = urllib.request.getproxies()
    return proxies.get(url.split(":", 1)[0].lower()) or proxies.get("all")


class HttpTransport:
    """``POST {url}/v1/{seam}`` to a ``toolgate serve`` service."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        client: httpx.AsyncClient | None,
        trust_env: bool,
        breaker: CircuitBreaker,
        policy: str,
    ) -> None:
        self.url = url.rstrip("/")
        self.breaker = breaker
        self._policy = policy
        self._trust_env = trust_env
        self._external_client = client
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        host = httpx.URL(self.url).host
        # httpx would send through a proxy the environment names for this
        # URL: then httpx makes every request, as it did before.
        self._proxied = trust_env and bool(
            _proxy_for(self.url) and not urllib.request.proxy_bypass(host)
        )
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pool] = (
            weakref.WeakKeyDictionary()
        )

    def __str__(self) -> str:
        return self.url

    def _http(self) -> httpx.AsyncClient:
        """The httpx client for the running event loop: an injected one, or
        the handler's own when a proxy from the environment applies."""
        if self._external_client is not None:
            return self._external_client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop or self._client.is_closed:
            # A client's pooled connections belong to the loop that opened
            # them; a handler reused under a new loop gets a new client.
            self._client = httpx.AsyncClient(
                base_url=self.url,
                headers=self._headers,
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
                trust_env=self._trust_env,
            )
            self._client_loop = loop
        return self._client

    def _pool(self) -> Pool | None:
        """The handler's own keep-alive connections for the running event
        loop, or None when httpx has to make the request (an injected
        client, or a proxy that the environment names for this URL)."""
        if self._external_client is not None or self._proxied:
            return None
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            # Connections belong to the loop that opened them.
            pool = self._pools[loop] = Pool(self.url, self._headers)
        return pool

    async def _request(self, method: str, path: str, body: bytes | None, timeout: float) -> tuple[int, bytes]:
        """One request within ``timeout``: the status and the body. Raises
        ServiceError naming the cause when there is no answer (the breaker
        is the caller's business)."""
        try:
            async with asyncio.timeout(timeout):
                pool = self._pool()
                if pool is not None:
                    return await pool.request(method, path, body)
                url = f"{self.url}{path}" if self._external_client is not None else path
                headers = {"Content-Type": "application/json"} if body is not None else None
                response = await self._http().request(
                    method, url, content=body, headers=headers, timeout=httpx.Timeout(timeout)
                )
                return response.status_code, response.content
        except TimeoutError as exc:
            raise ServiceError(f"no answer within {timeout:g}s") from exc
        except (httpx.HTTPError, OSError, asyncio.IncompleteReadError, ProtocolError) as exc:
            raise ServiceError(f"{type(exc).__name__}: {exc or 'transport error'}") from exc

    async def _post(self, path: str, body: dict[str, Any], timeout: float, ok: int) -> Any:
        """Posts ``body`` to ``path``; returns the answer's JSON when its
        status is ``ok``. A refusal of the request itself (4xx but 408 and
        429) raises ConfigurationError and leaves the breaker closed; no
        answer, another status or a body that is not JSON counts against
        the service and raises ServiceError."""
        self.breaker.before_call()
        try:
            status, content = await self._request("POST", path, _dumps(body), timeout)
        except ServiceError as exc:
            self._failure(str(exc))
            raise
        if 400 <= status < 500 and status not in (408, 429):
            # The service is up and answered: it refuses the request itself.
            self.breaker.success()
            raise ConfigurationError(f"HTTP {status}: {_text(content)!r}")
        if status != ok:
            cause = f"HTTP {status}: {_text(content)!r}"
            self._failure(cause)
            raise ServiceError(cause)
        self.breaker.success()
        try:
            return json.loads(content)
        except ValueError as exc:
            raise ServiceError(f"answer is not JSON: {_text(content)!r}") from exc

    async def call(self, seam: str, body: dict[str, Any], timeout: float) -> Answer:
        """Posts one request; returns the decoded answer and its trace."""
        return _traced(await self._post(f"/v1/{seam}?trace=1", body, timeout, 200))

    def _failure(self, cause: str) -> None:
        self.breaker.failure(self.url, cause, self._policy)

    async def observe(self, body: dict[str, Any], timeout: float) -> str:
        """Posts one lifecycle event to ``/v1/observe``; returns what became
        of it (``queued``, ``unobserved``, ``dropped``). The service answers
        202 before any guard runs, so awaiting it costs one round trip and
        puts the event on the service before the run's next request."""
        doc = await self._post("/v1/observe", body, timeout, 202)
        try:
            return str(doc["observed"])
        except (KeyError, TypeError) as exc:
            raise ServiceError(f"answer is not an observation: {doc!r:.300}") from exc

    async def hooks(self, timeout: float) -> dict[str, Any]:
        """``GET /v1/hooks``: the hooks worth sending now (see
        ``toolgate.Host.hooks``). Raises ServiceError when there is no
        such answer; the breaker is left alone (a poll is not a guard
        call)."""
        status, content = await self._request("GET", "/v1/hooks", None, timeout)
        if status != 200:
            raise ServiceError(f"HTTP {status}: {_text(content)!r}")
        try:
            doc = json.loads(content)
        except ValueError as exc:
            raise ServiceError(f"answer is not JSON: {_text(content)!r}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("hooks"), list):
            raise ServiceError(f"answer has no hooks: {_text(content)!r}")
        return doc

    async def check(self) -> list[str]:
        """Raises ConfigurationError unless the service answers with this
        handler's URL and token and loaded every file; returns the
        warnings (see :func:`load_findings`)."""
        try:
            status, content = await self._request("GET", "/v1/plugins", None, 10.0)
        except ServiceError as exc:
            raise ConfigurationError(f"cannot reach {self.url}: {exc}") from exc
        if status != 200:
            raise ConfigurationError(
                f"{self.url}/v1/plugins answered HTTP {status}: {_text(content)!r}"
            )
        try:
            description = json.loads(content)
        except ValueError as exc:
            raise ConfigurationError(
                f"{self.url}/v1/plugins answered with something that is not JSON: "
                f"{_text(content)!r}"
            ) from exc
        return load_findings(description, f"the service at {self.url}")

    async def aclose(self) -> None:
        """Closes the transport's own connections (an injected client stays open)."""
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.close()
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.aclose()


class EmbeddedTransport:
    """The guards in this process: a ``toolgate.Host``."""

    def __init__(self, host: Host) -> None:
        from toolgate import RequestError, ToolgateError
        from toolgate._native import dumps

        self.host = host
        # Looked up once: a hook's own work is a few microseconds.
        self._native_dumps = dumps
        self._errors = (RequestError, ToolgateError)

    def __str__(self) -> str:
        return f"plugins {self.host.root}"

    async def call(self, seam: str, body: dict[str, Any], timeout: float) -> Answer:
        """Runs one request through the host's chain; returns the answer and
        its trace."""
        request_error, toolgate_error = self._errors
        request = self._native_dumps(body)
        if request is None:
            request = json.dumps(body, separators=(",", ":"), allow_nan=False)
        try:
            answer = self.host._native.decide(seam, request, True)
            if not isinstance(answer, str):
                async with asyncio.timeout(timeout):
                    answer = await answer
        except request_error as exc:
            raise ConfigurationError(f"request refused: {exc}") from exc
        except TimeoutError as exc:
            raise ServiceError(f"no answer within {timeout:g}s") from exc
        except toolgate_error as exc:
            raise ServiceError(str(exc)) from exc
        return _traced(json.loads(answer))

    async def observe(self, body: dict[str, Any], timeout: float) -> str:
        """Hands one lifecycle event to the host (it returns at once)."""
        request_error, toolgate_error = self._errors
        request = self._native_dumps(body)
        if request is None:
            request = json.dumps(body, separators=(",", ":"), allow_nan=False)
        try:
            return str(self.host._native.observe(request))
        except request_error as exc:
            raise ConfigurationError(f"request refused: {exc}") from exc
        except toolgate_error as exc:
            raise ServiceError(str(exc)) from exc

    def routing_guards(self, tenant: str | None) -> bool:
        """Whether some plugin of ``tenant``'s chain subscribes to routing."""
        return "routing" in self.host.seams(tenant)

    async def check(self) -> list[str]:
        """Raises ConfigurationError when the directory had load errors;
        returns the warnings (see :func:`load_findings`)."""
        return load_findings(self.host.plugins(), str(self.host.root))

    async def aclose(self) -> None:
        """Nothing to close per event loop (the host outlives it)."""


def open_host(plugins: str | os.PathLike[str], **options: Any) -> Host:
    """A ``toolgate.Host`` over ``plugins`` (imported only when needed)."""
    from toolgate import Host

    return Host(plugins, **options)
