from flask import Blueprint, current_app

from app.api.auth import require_api_key
from app.api.errors import echoing_as_sent
from app.api.http import account_id, json_body, load, load_body, load_query, spec
from app.api.limits import default_limit
from app.schemas.base import DeletedSchema, page
from app.schemas.webhooks import (DeliveryListQuerySchema, DeliveryListSchema, RecoverResultSchema, RecoverSchema,
                                  RotatedSecretSchema, TestResultSchema, WebhookConfigSchema,
                                  WebhookConfigureSchema, WebhookConfigWithSecretSchema, WebhookUpdateSchema)
from app.errors import InvalidState
from app.services import outbox, webhooks
from app.services.webhooks import ConfigurationMissing
from app.services.transport import transport_for

bp = Blueprint("webhooks", __name__)
bp.before_request(require_api_key)
configure_schema = WebhookConfigureSchema()
update_schema = WebhookUpdateSchema()
config_schema = WebhookConfigSchema()
config_with_secret_schema = WebhookConfigWithSecretSchema()
deleted_schema = DeletedSchema()
rotated_schema = RotatedSecretSchema()
test_result_schema = TestResultSchema()
delivery_query_schema = DeliveryListQuerySchema()
delivery_list_schema = DeliveryListSchema()
recover_schema = RecoverSchema()
recover_result_schema = RecoverResultSchema()


@bp.post("/webhooks/configure")
@default_limit
@spec("Create the webhook configuration (201) or replace it (200); answers with a new secret",
      body=WebhookConfigureSchema, response=WebhookConfigWithSecretSchema, status=(201, 200), tag="webhooks")
def configure():
    config, created = webhooks.configure(account_id(), load_body(configure_schema))
    if created:
        return config_with_secret_schema.dump(config), 201, {"Location": "/api/v1/webhooks/configure"}
    return config_with_secret_schema.dump(config)


@bp.get("/webhooks/configure")
@bp.get("/webhooks/configuration")
@default_limit
@spec("The webhook configuration, without its secret", response=WebhookConfigSchema, tag="webhooks",
      errors=(ConfigurationMissing,))
def get_configuration():
    return config_schema.dump(webhooks.get(account_id()))


@bp.put("/webhooks/configure")
@default_limit
@spec("Change endpoint_url, events, is_active or initial_webhook; the secret stays", body=WebhookUpdateSchema,
      response=WebhookConfigSchema, tag="webhooks", errors=(ConfigurationMissing,))
def update_configuration():
    return config_schema.dump(webhooks.update_config(account_id(), load_body(update_schema)))


@bp.delete("/webhooks/configure")
@default_limit
@spec("Delete the webhook configuration; queued deliveries are dropped", response=DeletedSchema, tag="webhooks",
      errors=(ConfigurationMissing,))
def delete_configuration():
    return deleted_schema.dump(webhooks.remove(account_id()))


@bp.post("/webhooks/test")
@default_limit
@spec("Send a `test` event now and report the outcome", response=TestResultSchema, tag="webhooks",
      errors=(ConfigurationMissing,))
def send_test():
    return test_result_schema.dump(outbox.send_test(account_id(), transport_for(current_app._get_current_object())))


@bp.post("/webhooks/rotate-secret")
@default_limit
@spec("Rotate the secret; for 24 hours deliveries also carry X-Webhook-Signature-Previous",
      response=RotatedSecretSchema, tag="webhooks", errors=(ConfigurationMissing,))
def rotate_secret():
    return rotated_schema.dump(webhooks.rotate_secret(account_id()))


@bp.get("/webhooks/deliveries")
@default_limit
@spec("The delivery log: one item per HTTP try, newest first", query=DeliveryListQuerySchema,
      response=DeliveryListSchema, tag="webhooks")
def list_deliveries():
    query = load_query(delivery_query_schema)
    rows, total = outbox.attempts_page(account_id(), **query)
    return delivery_list_schema.dump(page(rows, total, query["limit"], query["offset"]))


@bp.post("/webhooks/recover")
@default_limit
@spec("Queue a new delivery for every failed or unsent event of a window (at most 14 days back); "
      "with include_pending, send now what waits for a retry (its retry schedule restarted)",
      body=RecoverSchema, response=RecoverResultSchema, status=202, tag="webhooks",
      errors=(ConfigurationMissing, InvalidState))
def recover():
    sent = json_body()
    body = load(recover_schema, sent)
    with echoing_as_sent(sent):  # an empty window names `since` or `until` as sent, not as loaded
        queued = outbox.recover(account_id(), body["since"], body.get("until"), body["include_pending"])
    return recover_result_schema.dump(queued), 202
