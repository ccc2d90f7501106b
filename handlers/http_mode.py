"""HTTP mode's doors (aiohttp middlewares before bolt): junk timestamps, unreadable payloads, deliveries in hand."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from handlers.after_ack import AfterAck
from handlers.payload_shape import Unreadable, bolt_request

log = structlog.get_logger("opsloop.app")


@web.middleware
async def junk_timestamp_is_a_bad_signature(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A request whose X-Slack-Request-Timestamp is not a whole number (`1e9`, `abc`) fails the signature check
    like any other forgery: 401, not the verifier's int() blowing up into a 500 and an error-level log."""
    stamp = request.headers.get("X-Slack-Request-Timestamp", "").strip()
    if request.method == "POST" and not (stamp.isascii() and stamp.isdigit()):
        log.info("http.request_refused", why="X-Slack-Request-Timestamp is missing or not a number")
        return web.json_response({"error": "invalid request"}, status=401)
    return await handler(request)


def deliveries_in_hand(after_ack: AfterAck) -> Any:
    """HTTP mode's count of the deliveries in hand (`AfterAck.delivering`), as SocketMode keeps it: a request
    counts until its handler returns the response (the ack), so the reactions and run starts it causes wait."""

    @web.middleware
    async def counted(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        with after_ack.delivering():
            return await handler(request)

    return counted


def unreadable_payloads(signing_secret: str) -> Any:
    """HTTP mode's door for payloads bolt can't read (handlers/payload_shape.py): a signed one is answered 400 and
    logged, an unsigned one 401 like any forgery; the rest go on to bolt, which checks the signature itself."""
    verifier = SignatureVerifier(signing_secret)

    @web.middleware
    async def door(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.method != "POST":
            return await handler(request)
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
