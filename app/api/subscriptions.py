from flask import Blueprint, Response, stream_with_context

from app.api.auth import require_api_key
from app.api.errors import cut_failed_items
from app.api.http import account_id, load, load_body, load_query, spec
from app.api.limits import bulk_limit, export_limit, read_limit, write_limit
from app.schemas.subscriptions import (BulkCancelResultSchema, BulkCreateResultSchema, BulkCreateSchema,
                                       BulkIdsSchema, BulkStatusResultSchema, BulkStatusSchema,
                                       ExportQuerySchema, ExportSchema, MetadataPatchSchema,
                                       SubscriptionCancelledSchema, SubscriptionCreatedSchema, SubscriptionCreateSchema,
                                       SubscriptionListItemSchema, SubscriptionListQuerySchema,
                                       SubscriptionListSchema, SubscriptionSchema)
from app.schemas.base import flat_dumper, json_fields, page_text
from app.errors import DuplicateSubscription, InvalidState, TierLimitExceeded, TrialExpired, ValidationFailed
from app.services import export, subscriptions

bp = Blueprint("subscriptions", __name__)
bp.before_request(require_api_key)
create_schema = SubscriptionCreateSchema()
created_schema = SubscriptionCreatedSchema()
detail_schema = SubscriptionSchema()
list_query_schema = SubscriptionListQuerySchema()
created_item = flat_dumper(created_schema)
list_item_fields = json_fields(SubscriptionListItemSchema())
detail_item = flat_dumper(detail_schema)
cancelled_schema = SubscriptionCancelledSchema()
metadata_schema = MetadataPatchSchema()
bulk_create_schema = BulkCreateSchema()
bulk_create_result_schema = BulkCreateResultSchema()
bulk_ids_schema = BulkIdsSchema()
bulk_cancel_result_schema = BulkCancelResultSchema()
bulk_status_schema = BulkStatusSchema()
bulk_status_result_schema = BulkStatusResultSchema()
export_query_schema = ExportQuerySchema()


@bp.post("/subscriptions")
@write_limit
@spec("Subscribe to an entity", body=SubscriptionCreateSchema, response=SubscriptionCreatedSchema,
      status=201, tag="subscriptions", errors=(TierLimitExceeded, TrialExpired, DuplicateSubscription))
def create_subscription():
    subscription = subscriptions.create(account_id(), load_body(create_schema))
    return (created_item(subscription), 201,
            {"Location": f"/api/v1/subscriptions/{subscription.id}"})


@bp.get("/subscriptions")
@read_limit
@spec("List subscriptions, newest first", query=SubscriptionListQuerySchema, response=SubscriptionListSchema,
      tag="subscriptions")
def list_subscriptions():
    query = load_query(list_query_schema)
    items, count, total = subscriptions.list_page_json(account_id(), list_item_fields, **query)
    return Response(page_text(items, count, total, query["limit"], query["offset"]), mimetype="application/json")


@bp.get("/subscriptions/<subscription:subscription_id>")
@read_limit
@spec("One subscription", response=SubscriptionSchema, tag="subscriptions")
def get_subscription(subscription_id):
    return detail_item(subscriptions.get_detail(account_id(), subscription_id))


@bp.delete("/subscriptions/<subscription:subscription_id>")
@write_limit
@spec("Cancel a subscription (soft delete, idempotent)", response=SubscriptionCancelledSchema,
      tag="subscriptions")
def cancel_subscription(subscription_id):
    return cancelled_schema.dump(subscriptions.cancel(account_id(), subscription_id))


@bp.post("/subscriptions/<subscription:subscription_id>/pause")
@write_limit
@spec("Pause an active subscription", response=SubscriptionSchema, tag="subscriptions", errors=(InvalidState,))
def pause_subscription(subscription_id):
    return detail_schema.dump(subscriptions.set_status(account_id(), subscription_id, "paused"))


@bp.post("/subscriptions/<subscription:subscription_id>/resume")
@write_limit
@spec("Resume a paused subscription", response=SubscriptionSchema, tag="subscriptions", errors=(InvalidState,))
def resume_subscription(subscription_id):
    return detail_schema.dump(subscriptions.set_status(account_id(), subscription_id, "active"))


@bp.patch("/subscriptions/<subscription:subscription_id>")
@write_limit
@spec("Replace a subscription's custom_metadata", body=MetadataPatchSchema, response=SubscriptionSchema,
      tag="subscriptions")
def update_subscription(subscription_id):
    body = load_body(metadata_schema)
    return detail_schema.dump(subscriptions.update_metadata(account_id(), subscription_id,
                                                            body["custom_metadata"]))


@bp.post("/subscriptions/bulk")
@bulk_limit
@spec("Create up to 100 subscriptions; failures are reported per item", body=BulkCreateSchema,
      response=BulkCreateResultSchema, tag="subscriptions", errors=(TrialExpired,))
def bulk_create():
    body = load_body(bulk_create_schema)
    result = subscriptions.bulk_create(account_id(), body["subscriptions"], _load_bulk_item)
    return bulk_create_result_schema.dump({"created": len(result.created), "failed": len(result.errors),
                                           "subscriptions": result.created, "errors": cut_failed_items(result.errors)})


def _load_bulk_item(raw):
    """One item of a bulk create, loaded as a single create's body. One that is no object is refused as an item: the
    schema's "body: Invalid input type." blamed the request's body, a valid object."""
    if not isinstance(raw, dict):
        raise ValidationFailed("subscriptions", "Not a subscription: an item is a JSON object, as POST /subscriptions "
                               "takes.")
    return load(create_schema, raw)


@bp.delete("/subscriptions/bulk")
@bulk_limit
@spec("Cancel up to 100 subscriptions", body=BulkIdsSchema, response=BulkCancelResultSchema,
      tag="subscriptions")
def bulk_cancel():
    body = load_body(bulk_ids_schema)
    done, errors = subscriptions.bulk_cancel(account_id(), body["subscription_ids"])
    return bulk_cancel_result_schema.dump({"cancelled": len(done), "failed": len(errors),
                                           "subscriptions": done, "errors": cut_failed_items(errors)})


@bp.patch("/subscriptions/bulk")
@bulk_limit
@spec("Pause or resume up to 100 subscriptions", body=BulkStatusSchema, response=BulkStatusResultSchema,
      tag="subscriptions")
def bulk_set_status():
    body = load_body(bulk_status_schema)
    done, errors = subscriptions.bulk_set_status(account_id(), body["subscription_ids"], body["status"])
    return bulk_status_result_schema.dump({"updated": len(done), "failed": len(errors),
                                           "subscriptions": done, "errors": cut_failed_items(errors)})


@bp.get("/subscriptions/export")
@export_limit
@spec("Export subscriptions as CSV or JSON, streamed", query=ExportQuerySchema, tag="subscriptions",
      response={"text/csv": {"type": "string", "description": "A header line, then one line per subscription."},
                "application/json": ExportSchema}, headers=("Content-Disposition",))
def export_subscriptions():
    query = load_query(export_query_schema)
    body, mimetype = export.export(account_id(), query["status"], query["format"])
    filename = f"subscriptions.{query['format']}"
    return Response(stream_with_context(body), mimetype=mimetype,
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})
