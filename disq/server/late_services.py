"""gRPC services added to the bus's server after it started (the client API of a node that
dials its peers before it serves its clients).

A restarted node with peers starts its bus (the Link service) and dials them before its client
ports serve, so that they hear of the restart first (ARCHITECTURE.md, "Restarts"). The client
API (the Queue service, health, reflection: their protobuf modules and the servicer, 7-10 ms
of CPU) is not needed for that, so it loads once the client ports serve. grpc.aio takes
services only before its server starts; this handler is registered then, and the API's
services register on it later (it stands in for the server in ``QueueApi.register``).

Until they are installed, any other method is answered UNAVAILABLE with
:data:`NOT_STARTED_DETAILS`, which tells a client the call was never run (the SDK retries it,
on another node if it has one): a window of milliseconds after a restart, as when the port
itself was not yet listening.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

# What an early call's status says; the SDK's list of "never sent" details holds it.
NOT_STARTED_DETAILS = "node starting: the client API is not loaded yet, the call was not run"


async def _not_started(request_iterator: AsyncIterator[bytes], context: Any) -> None:
    await context.abort(grpc.StatusCode.UNAVAILABLE, NOT_STARTED_DETAILS)


# A stream-stream handler without (de)serializers answers a call of any kind: it reads
# nothing and ends the call with its status.
_NOT_STARTED = grpc.stream_stream_rpc_method_handler(_not_started)


class LateServices(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc is untyped
    """One generic handler on the server; the services of ``register`` calls made on it
    after the server started, found in the order they were added."""

    def __init__(self) -> None:
        self._handlers: list[grpc.GenericRpcHandler] = []
        self.installed = False  # set by install(): unknown methods are UNIMPLEMENTED then

    def attach(self, server: Any) -> None:
        """PeerLinks.add_services' hook: on the server, before it starts."""
        server.add_generic_rpc_handlers((self,))

    # The two registration calls of the generated ``add_*_to_server`` functions (and of
    # reflection's), so this object can be handed to them in the server's place. A
    # registered method's handler is kept as a generic one: grpc matches those only at start.
    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._handlers.extend(handlers)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self._handlers.append(grpc.method_handlers_generic_handler(service_name, method_handlers))

    def install(self) -> None:
        """The services registered so far are the API: serve them from now on."""
        self.installed = True

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        if not self.installed:
            return _NOT_STARTED
        for handler in self._handlers:
            found = handler.service(handler_call_details)
            if found is not None:
                return found
        return None
