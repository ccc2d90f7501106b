"""A fake Vertex AI on loopback: ``POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{m}`` with
``:streamRawPredict`` (or ``:rawPredict``) and a bearer token, answered as the Messages API's SSE (Vertex relays
it as is), the replies FakeAnthropic's.

It is also the OAuth token endpoint of `service_account_file`: Application Default Credentials read from
GOOGLE_APPLICATION_CREDENTIALS sign a JWT with its key and trade it here for the only token the fake accepts.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt

from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.cloud import CloudFake, CloudRequest

_PATH = "/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}"


class FakeVertex(CloudFake):
    name = "vertex"

    def __init__(self, anthropic: FakeAnthropic, *, project: str = "opsloop-test", region: str = "us-east5") -> None:
        super().__init__(anthropic)
        self.project, self.region = project, region
        self.token = f"ya29.fake-{secrets.token_hex(8)}"
        self.tokens_minted = 0
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def routes(self, app: web.Application) -> None:
        app.router.add_post(_PATH, self._predict)
        app.router.add_post("/token", self._token)

    def service_account_file(self, directory: Path) -> Path:
        """A service account key file whose token endpoint is this fake (its project: the fake's)."""
        path = directory / "service-account.json"
        pem = self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        info = {
            "type": "service_account",
            "project_id": self.project,
            "private_key_id": "fake-key",
            "private_key": pem.decode(),
            "client_email": f"opsloop@{self.project}.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": f"{self.base_url}/token",
        }
        path.write_text(json.dumps(info))
        return path

    async def _token(self, request: web.Request) -> web.Response:
        """The JWT bearer grant: the assertion must be signed by the service account's key (google-auth always
        addresses it to Google's token endpoint, whichever `token_uri` it posts it to)."""
        form = await request.post()
        public = self._key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        try:
            jwt.decode(str(form.get("assertion")), certs=public, audience="https://oauth2.googleapis.com/token")
        except ValueError:
            return web.json_response({"error": "invalid_grant"}, status=400)
        self.tokens_minted += 1
        return web.json_response({"access_token": self.token, "expires_in": 3600, "token_type": "Bearer"})

    async def _predict(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        rec = CloudRequest(
            path=request.raw_path, headers={k.lower(): v for k, v in request.headers.items()}, body=dict(body)
        )
        self.requests.append(rec)
        model, _, specifier = request.match_info["model"].partition(":")
        where = (request.match_info["project"], request.match_info["region"])
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            rec.status = 401
            return web.json_response({"error": {"code": 401, "status": "UNAUTHENTICATED"}}, status=401)
        stream = specifier == "streamRawPredict"
        if where != (self.project, self.region) or specifier not in ("streamRawPredict", "rawPredict"):
            rec.problems.append(f"called {where} {specifier}")
        if body.pop("anthropic_version", None) != "vertex-2023-10-16":
            rec.problems.append("anthropic_version is not vertex-2023-10-16")
        if "model" in body:
            rec.problems.append("model belongs in the path, not the body")
        body.pop("stream", None)
        if self.overloaded:
            self.overloaded -= 1
            rec.status = 529
            return web.json_response(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                status=529,
                headers={"retry-after": "0"},
            )
        betas = [b for b in request.headers.get("anthropic-beta", "").split(",") if b]
        if betas and self.refuse_betas:
            rec.status = 400
            return web.json_response({"error": {"code": 400, "message": f"unsupported beta: {betas}"}}, status=400)
        name = re.sub(r"@(\d{8})$", r"-\1", model)
        status, answer = await self.relay(body, model=name, betas=betas, stream=stream)
        rec.status = status
        if status != 200 or not stream:
            return web.json_response(answer, status=status, headers={"retry-after": "0"})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        async for event in answer:
            await resp.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await resp.write_eof()
        return resp
