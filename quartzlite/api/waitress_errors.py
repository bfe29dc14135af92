"""waitress's own error responses in the API's JSON error shape.

waitress answers some requests before Flask sees them: a request line or headers it
cannot parse (400), request headers past ``max_header_bytes`` (431), a body past its
own limit (413), a broken chunked body (400), a transfer coding it does not know (501),
an application that failed before answering (500). Its answers are text/plain; these
are ``{"error": {"code", "message", "details"}}`` like every other error of the API,
with the API's response headers.
"""

from __future__ import annotations

import json
import re
from typing import Any

from waitress.channel import HTTPChannel
from waitress.task import ErrorTask

from quartzlite.api import RESPONSE_HEADERS

#: Codes the Flask side already uses for these statuses (see quartzlite.api.errors).
CODE_BY_STATUS = {413: "payload_too_large", 500: "internal_error"}


class JsonErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's :class:`ErrorTask` writing the API's JSON error shape."""

    def execute(self) -> None:
        error: Any = self.request.error
        status: int = error.code
        code = CODE_BY_STATUS.get(status) or re.sub(r"[^a-z0-9]+", "_", error.reason.lower()).strip("_")
        # waitress's text of a 500 may hold a traceback (expose_tracebacks): the log has it.
        message = (
            "internal server error (the server log has the details)"
            if status == 500 else str(error.body or error.reason)
        )
        body = json.dumps({"error": {"code": code, "message": message, "details": {}}}).encode()
        self.status = f"{status} {error.reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.response_headers.extend(RESPONSE_HEADERS.items())
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class JsonErrorChannel(HTTPChannel):  # type: ignore[misc]
    """A connection whose waitress-made errors are JSON (the server's ``channel_class``)."""

    error_task_class = JsonErrorTask
