"""The errors of the A2A routes, as the specification names them: a JSON-RPC error code
for the JSON-RPC binding, an HTTP status with a `google.rpc.Status` body (its `ErrorInfo`
giving the reason) for HTTP+JSON."""

from __future__ import annotations

from typing import Any, ClassVar

ERROR_DOMAIN = "a2a-protocol.org"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


class A2AError(Exception):
    """An error the client caused, named as the protocol names it."""

    code: ClassVar[int] = -32603
    http_status: ClassVar[int] = 500
    status: ClassVar[str] = "INTERNAL"
    reason: ClassVar[str] = "INTERNAL_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def jsonrpc(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "data": [self._info()]}

    def rest(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.http_status,
                "status": self.status,
                "message": self.message,
                "details": [self._info()],
            }
        }

    def _info(self) -> dict[str, Any]:
        return {"@type": ERROR_INFO, "reason": self.reason, "domain": ERROR_DOMAIN}


class TaskNotFound(A2AError):
    code, http_status, status, reason = -32001, 404, "NOT_FOUND", "TASK_NOT_FOUND"

    def __init__(self, task_id: str, what: str = "task") -> None:
        super().__init__(f"{what} {task_id[:120]!r} not found")


class TaskNotCancelable(A2AError):
    code, http_status, status, reason = -32002, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"


class UnsupportedOperation(A2AError):
    code, http_status, status, reason = -32004, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"


class ContentTypeNotSupported(A2AError):
    code, http_status = -32005, 400
    status, reason = "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED"


class VersionNotSupported(A2AError):
    code, http_status, status, reason = -32009, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"


class InvalidParams(A2AError):
    code, http_status, status, reason = -32602, 400, "INVALID_ARGUMENT", "INVALID_PARAMS"


class InvalidRequest(A2AError):
    code, http_status, status, reason = -32600, 400, "INVALID_ARGUMENT", "INVALID_REQUEST"


class MethodNotFound(A2AError):
    code, http_status, status, reason = -32601, 404, "NOT_FOUND", "METHOD_NOT_FOUND"


class ParseError(A2AError):
    code, http_status, status, reason = -32700, 400, "INVALID_ARGUMENT", "INVALID_PARAMS"
