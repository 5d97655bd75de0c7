"""Type stubs of the extension module ``toolgate._native`` (Rust, PyO3)."""

from collections.abc import Awaitable

class ToolgateError(Exception):
    """Something toolgate could not do: load or reload a plugin directory."""

class RequestError(ToolgateError):
    """A seam request refused as invalid; the message names the field."""

class BusyError(ToolgateError):
    """The tenant already had its share of requests in progress, or was over
    its rate (HTTP 429)."""

def dumps(value: object) -> str | None:
    """JSON text of a value made of plain JSON types only, else None."""

def compile_child(argv: list[str]) -> int:
    """The compile child's run (``toolgate compile``): limits this process,
    compiles the component on stdin, writes its code on stdout; the exit code."""

class Host:
    def __init__(
        self,
        plugins: str,
        *,
        cache_dir: str | None = ...,
        no_cache: bool = ...,
        watch: bool = ...,
        settle_ms: int = ...,
        max_instances: int = ...,
        pooling: bool = ...,
        inline: bool = ...,
        compile_command: list[str] | None = ...,
        compile_timeout_ms: int = ...,
        compile_memory_mib: int = ...,
        state: str | None = ...,
        decision_log: str | None = ...,
    ) -> None: ...
    def decide(self, seam: str, request: str, trace: bool = ...) -> str | Awaitable[str]: ...
    def observe(self, request: str) -> str: ...
    def hooks(self) -> str: ...
    def reload(self) -> str: ...
    def plugins(self) -> str: ...
    def seams(self, tenant: str | None = ...) -> list[str]: ...
    def metrics(self) -> str: ...
    @property
    def generation(self) -> int: ...
    @property
    def root(self) -> str: ...
    @property
    def watching(self) -> bool: ...
    def close(self) -> None: ...
