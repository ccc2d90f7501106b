"""A fake Amazon Bedrock runtime on loopback: ``POST /model/{modelId}/invoke-with-response-stream``, SigV4-signed,
answered in AWS's binary event stream (each Messages API event a ``chunk`` frame), the replies FakeAnthropic's.

    async with FakeAnthropic() as fake, FakeBedrock(fake, region="us-east-1") as bedrock:
        AsyncAnthropicBedrock(aws_region="us-east-1", base_url=bedrock.base_url)  # AWS_* credentials: CREDENTIALS

Every request's signature is recomputed with botocore's own signer from the fake credentials and the request's
own X-Amz-Date, and must equal the Authorization header's; a request that fails is answered 403 as Bedrock does.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import urllib.parse
from typing import Any

from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.cloud import CloudFake, CloudRequest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "AKIAFAKEOPSLOOP00001", "AWS_SECRET_ACCESS_KEY": "fake/secret/for/opsloop/tests"}
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, "
    r"SignedHeaders=(?P<signed>[a-z0-9;-]+), Signature=(?P<signature>[0-9a-f]{64})$"
)


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event stream message: prelude (total and headers length, CRC32), string headers, payload, CRC32."""
    encoded = b"".join(
        struct.pack("B", len(k)) + k.encode() + b"\x07" + struct.pack(">H", len(v)) + v.encode()
        for k, v in headers.items()
    )
    prelude = struct.pack(">II", 16 + len(encoded) + len(payload), len(encoded))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message))


def chunk(event: dict[str, Any]) -> bytes:
    """A Messages API event as Bedrock streams it: a `chunk` event whose `bytes` is the event's JSON."""
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode()
    return frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}, payload)


def claude_name(model_id: str) -> str:
    """`us.anthropic.claude-x-20250929-v1:0` -> `claude-x-20250929`: the name FakeAnthropic is asked for."""
    name = model_id.split("anthropic.", 1)[-1]
    return re.sub(r"-v\d+(:\d+)?$", "", name)


class FakeBedrock(CloudFake):
    name = "bedrock"

    def __init__(self, anthropic: FakeAnthropic, *, region: str = "us-east-1") -> None:
        super().__init__(anthropic)
        self.region = region

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/model/{model_id}/invoke-with-response-stream", self._invoke)
        app.router.add_post("/model/{model_id}/invoke", self._invoke)

    def signature_problem(self, request: web.Request, body: bytes) -> str | None:
        """None when the Authorization header is a SigV4 signature of this very request by CREDENTIALS."""
        auth = _AUTH.match(request.headers.get("Authorization", ""))
        if auth is None:
            return f"not a SigV4 Authorization header: {request.headers.get('Authorization')!r}"
        if (auth["key"], auth["region"], auth["service"]) != (CREDENTIALS["AWS_ACCESS_KEY_ID"], self.region, "bedrock"):
            return f"signed for {auth['key']}/{auth['region']}/{auth['service']}"
        signed = auth["signed"].split(";")
        if not {"host", "x-amz-date"} <= set(signed):
            return f"host and x-amz-date must be signed, got {signed}"
        headers = {name: request.headers[name] for name in signed if name in request.headers}
        aws = AWSRequest(method="POST", url=f"http://{request.host}{request.raw_path}", headers=headers, data=body)
        aws.context["timestamp"] = request.headers["X-Amz-Date"]
        signer = SigV4Auth(
            Credentials(CREDENTIALS["AWS_ACCESS_KEY_ID"], CREDENTIALS["AWS_SECRET_ACCESS_KEY"]), "bedrock", self.region
        )
        expected = signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws)
        return None if expected == auth["signature"] else "signature does not match"

    async def _invoke(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        model_id = urllib.parse.unquote(request.match_info["model_id"])
        rec = CloudRequest(
            path=request.raw_path, headers={k.lower(): v for k, v in request.headers.items()}, body=dict(body)
        )
        self.requests.append(rec)
        if (problem := self.signature_problem(request, raw)) is not None:
            rec.problems.append(problem)
            rec.status = 403
            return web.json_response({"message": f"fake bedrock: {problem}"}, status=403)
        if body.pop("anthropic_version", None) != "bedrock-2023-05-31":
            rec.problems.append("anthropic_version is not bedrock-2023-05-31")
        stream = request.path.endswith("/invoke-with-response-stream")
        if "model" in body or "stream" in body:
            rec.problems.append("model and stream belong in the path, not the body")
        if self.overloaded:
            self.overloaded -= 1
            rec.status = 529
            return web.json_response(
                {"message": "Too many requests, please wait before trying again."},
                status=529,
                headers={"x-amzn-ErrorType": "ServiceUnavailableException", "retry-after": "0"},
            )
        betas = body.pop("anthropic_beta", [])
        if betas and self.refuse_betas:
            rec.status = 400
            return web.json_response({"message": f"invalid beta flag: {betas}"}, status=400)
        status, answer = await self.relay(body, model=claude_name(model_id), betas=betas, stream=stream)
        rec.status = status
        if status != 200 or not stream:
            return web.json_response(answer, status=status, headers={"retry-after": "0"})
        resp = web.StreamResponse(headers={"Content-Type": "application/vnd.amazon.eventstream"})
        await resp.prepare(request)
        async for event in answer:
            await resp.write(chunk(event))
        await resp.write_eof()
        return resp
