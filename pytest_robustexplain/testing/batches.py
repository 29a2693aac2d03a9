"""The fake server's provider batches: OpenAI's ``/v1/files`` + ``/v1/batches`` flow, answered by the fake's
own chat completions, with the delays, partial failures and expiry a real provider has.

A batch is worked through as it is looked at: each ``GET /v1/batches/{id}`` answers the next share of its
lines (``hold`` looks to finish), so a test orders events by its polls, never by the clock. ``fail`` lines
(the first ones) go to the error file with a server error; ``expire_after`` lines answered, the batch
expires with those in its output, as a provider's 24-hour window does.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from email.parser import BytesParser
from email.policy import HTTP
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import FakeOllamaServer


class BatchError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class FakeBatches:
    """The files and batches one fake server holds. Settable while it runs: ``hold`` (looks at a batch
    before it has answered every line; 1: the first look finds it done), ``fail`` (lines that fail),
    ``expire_after`` (lines answered before it expires; None: never)."""

    def __init__(self, fake: FakeOllamaServer) -> None:
        self.fake = fake
        self.hold = 1
        self.fail = 0
        self.expire_after: int | None = None
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.lines_answered = 0  # chat completions the batches made, over all of them
        self.submitted = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------- the endpoints
    def upload(self, raw: bytes, content_type: str) -> dict[str, Any]:
        """``POST /v1/files`` (multipart: ``purpose`` and ``file``)."""
        message = BytesParser(policy=HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
        if not message.is_multipart():
            raise BatchError(400, "expected multipart/form-data with a file")
        parts = {part.get_param("name", header="content-disposition"): part for part in message.iter_parts()}
        if "file" not in parts or parts.get("purpose") is None:
            raise BatchError(400, "a batch file needs the fields purpose and file")
        data = parts["file"].get_payload(decode=True)
        return self._file(data if isinstance(data, bytes) else b"", "batch")

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/batches``."""
        source = self.files.get(str(body.get("input_file_id")))
        if source is None:
            raise BatchError(404, f"no file {body.get('input_file_id')!r}")
        if body.get("endpoint") != "/v1/chat/completions":
            raise BatchError(400, f"endpoint {body.get('endpoint')!r} is not served in batches here")
        lines = [json.loads(line) for line in source.decode("utf-8").splitlines() if line.strip()]
        with self._lock:
            self.submitted += 1
            batch_id = f"batch_{self.submitted:04d}"
            self.batches[batch_id] = {"id": batch_id, "object": "batch", "endpoint": body["endpoint"],
                                      "status": "validating", "input_file_id": body["input_file_id"],
                                      "output_file_id": None, "error_file_id": None,
                                      "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                                      "_lines": lines, "_out": [], "_err": [], "_looks": 0}
        return self.view(batch_id)

    def look(self, batch_id: str) -> dict[str, Any]:
        """``GET /v1/batches/{id}``: the batch after its next share of lines."""
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                raise BatchError(404, f"no batch {batch_id!r}")
            if batch["status"] in ("validating", "in_progress"):
                self._advance(batch)
        return self.view(batch_id)

    def content(self, file_id: str) -> bytes:
        """``GET /v1/files/{id}/content``."""
        if file_id not in self.files:
            raise BatchError(404, f"no file {file_id!r}")
        return self.files[file_id]

    def view(self, batch_id: str) -> dict[str, Any]:
        return {k: v for k, v in self.batches[batch_id].items() if not k.startswith("_")}

    # ------------------------------------------------------------------------------- working
    def _advance(self, batch: dict[str, Any]) -> None:
        batch["_looks"] += 1
        lines, done = batch["_lines"], len(batch["_out"]) + len(batch["_err"])
        share = len(lines) if batch["_looks"] >= self.hold else -(-len(lines) // self.hold)
        batch["status"] = "in_progress"
        for line in lines[done:done + share]:
            if self.expire_after is not None and len(batch["_out"]) >= self.expire_after:
                self._end(batch, "expired")
                return
            status, body = (500, None) if len(batch["_err"]) < self.fail else self._chat(line["body"])
            if status >= 500:  # the provider's own trouble: the line is in the error file, never answered
                failed = {"code": "server_error", "message": "the fake failed this line"}
                batch["_err"].append({"id": f"req_{len(batch['_err'])}", "custom_id": line["custom_id"],
                                      "response": None, "error": failed})
            else:  # answered: a completion, or the request refused (a 4xx), as a live call is
                batch["_out"].append({"id": f"req_{len(batch['_out'])}", "custom_id": line["custom_id"],
                                      "response": {"status_code": status, "body": body}, "error": None})
                self.lines_answered += 1
        counts = batch["request_counts"]
        counts["completed"], counts["failed"] = len(batch["_out"]), len(batch["_err"])
        if counts["completed"] + counts["failed"] == len(lines):
            self._end(batch, "completed")

    def _end(self, batch: dict[str, Any], status: str) -> None:
        batch["status"] = status
        if batch["_out"]:
            batch["output_file_id"] = self._file(_jsonl(batch["_out"]), "batch_output")["id"]
        if batch["_err"]:
            batch["error_file_id"] = self._file(_jsonl(batch["_err"]), "batch_output")["id"]

    def _chat(self, body: dict[str, Any]) -> tuple[int, Any]:
        """The fake's own chat completion of one line (its modes, models and faults, as a live call): the
        status and the body."""
        key = f"/{self.fake.path_key}" if self.fake.path_key else ""
        request = urllib.request.Request(f"{self.fake.url}{key}/v1/chat/completions",
                                         data=json.dumps(body).encode("utf-8"),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return int(reply.status), json.loads(reply.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def _file(self, data: bytes, purpose: str) -> dict[str, Any]:
        file_id = f"file-{len(self.files) + 1:04d}"
        self.files[file_id] = data
        return {"id": file_id, "object": "file", "bytes": len(data), "purpose": purpose}


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
