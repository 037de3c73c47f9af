"""InitProducerId for idempotent producers; one with a transactional id is the transaction
coordinator's (klog.server.transactions).

Producer ids come from klog.broker.producer_ids (the clock). Without a transactional id every InitProducerId gets a new
id at epoch 0, as in Kafka: a named id and epoch are never bumped, whoever names them."""

from __future__ import annotations

from typing import Any

from klog.broker.producer_ids import new_producer_id
from klog.protocol.apis import INIT_PRODUCER_ID
from klog.protocol.kafka import NO_THROTTLE, E, make, response_for
from klog.server.context import RequestContext
from klog.server.dispatch import register


@register(INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    mod = response_for(request)
    if request.transactional_id is not None:
        from klog.server.transactions import init_transactional_producer

        return await init_transactional_producer(ctx, request)
    if not (ctx.authorize("IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster") or ctx.authorize_any("WRITE", "TOPIC")):
        return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=E.cluster_authorization_failed, producer_id=-1, producer_epoch=-1)
    pid, epoch = int(getattr(request, "producer_id", -1)), int(getattr(request, "producer_epoch", -1))
    if (pid == -1) != (epoch == -1):  # Kafka: both given (KIP-360, v3+) or neither
        return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=E.invalid_request, producer_id=-1, producer_epoch=-1)
    # Without a transactional id nothing proves the caller owns a producer id it names (ids are in
    # every fetched batch header): like Kafka, a new id, never a bump of the named one, so no client
    # can move another's epoch and then write sequences the owner's retries would match.
    return make(mod.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=E.none,
                producer_id=new_producer_id(), producer_epoch=0)
