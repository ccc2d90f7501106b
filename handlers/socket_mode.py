"""Socket Mode's door: bolt's handler, with unreadable envelopes acked and logged and each delivery counted in hand."""

from __future__ import annotations

import time

import structlog
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.async_app import AsyncApp
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from handlers.after_ack import AfterAck
from handlers.payload_shape import Unreadable, bolt_request

log = structlog.get_logger("opsloop.app")


class SocketMode(AsyncSocketModeHandler):
    """bolt's Socket Mode handler with a door: an envelope whose payload bolt can't read
    (handlers/payload_shape.py) is acked and logged, never dispatched (bolt would raise, leave it unacked and
    Slack would send it again). Each envelope counts as in hand (`AfterAck.delivering`) until its ack is sent,
    with those read and queued behind it: the reactions and run starts it causes wait for the burst's acks."""

    def __init__(self, app: AsyncApp, app_token: str, *, after_ack: AfterAck) -> None:
        super().__init__(app, app_token)
        self.after_ack = after_ack

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        start = time.time()
        with self.after_ack.delivering(client.message_queue.qsize):
            try:
                bolt_req = bolt_request(req.payload, mode="socket_mode", headers=build_headers(req))
            except Unreadable as e:
                log.warning("slack.payload_unreadable", transport="socket_mode", envelope=req.type, problem=str(e))
                await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
                return
            await send_async_response(client, req, await self.app.async_dispatch(bolt_req), start)

    async def close_async(self) -> None:
        await super().close_async()  # type: ignore[no-untyped-call]  # bolt leaves it untyped
