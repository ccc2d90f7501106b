"""HTTP mode's doors before bolt: deliveries in hand, junk timestamps, unreadable payloads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from handlers.after_ack import AfterAck
from handlers.payload_shape import Unreadable, bolt_request

log = structlog.get_logger("opsloop.app")


def slack_doors(after_ack: AfterAck, signing_secret: str) -> Any:
    """HTTP mode's doors before bolt, as one aiohttp middleware.

    A request counts as a delivery in hand (`AfterAck.delivering`, as SocketMode keeps it) until its handler
    returns the response (the ack), so the reactions and run starts it causes wait. A POST whose
    X-Slack-Request-Timestamp is not a whole number (`1e9`, `abc`) fails like any forgery: 401, not the verifier's
    int() blowing up into a 500 and an error-level log. A payload bolt can't read (handlers/payload_shape.py) is
    answered 400 and logged when signed, 401 when not; the rest go on to bolt, which checks the signature itself."""
    verifier = SignatureVerifier(signing_secret)

    @web.middleware
    async def door(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        with after_ack.delivering():
            if request.method != "POST":
                return await handler(request)
            stamp = request.headers.get("X-Slack-Request-Timestamp", "").strip()
            if not (stamp.isascii() and stamp.isdigit()):
                log.info("http.request_refused", why="X-Slack-Request-Timestamp is missing or not a number")
                return web.json_response({"error": "invalid request"}, status=401)
            body = await request.text()  # aiohttp keeps the bytes: bolt reads them again
            try:
                bolt_request(body, mode="http", headers=dict(request.headers), query=request.query_string)
            except Unreadable as e:
                if not verifier.is_valid_request(body, dict(request.headers)):
                    return web.json_response({"error": "invalid request"}, status=401)
                log.warning("slack.payload_unreadable", transport="http", problem=str(e))
                return web.json_response({"error": "malformed payload"}, status=400)
            return await handler(request)

    return door
