from flask import Blueprint

from app.api.auth import require_api_key
from app.api.http import account_id, load_body, spec
from app.api.limits import default_limit
from app.schemas.account import ApiKeyCreatedSchema, ApiKeyCreateSchema, ApiKeyListSchema, ApiKeySchema
from app.schemas.base import DeletedSchema
from app.errors import InvalidState, KeyLimitExceeded
from app.services import keys

bp = Blueprint("keys", __name__)
bp.before_request(require_api_key)
create_schema = ApiKeyCreateSchema()
created_schema = ApiKeyCreatedSchema()
list_schema = ApiKeyListSchema()
key_schema = ApiKeySchema()


@bp.post("/account/api-keys")
@default_limit
@spec("Create an API key (its value is shown only here)", body=ApiKeyCreateSchema,
      response=ApiKeyCreatedSchema, status=201, tag="api keys", errors=(KeyLimitExceeded,))
def create_key():
    body = load_body(create_schema)
    key, plaintext = keys.create_key(account_id(), body["name"])
    created = created_schema.dump({**vars(key), "key": plaintext})
    return created, 201, {"Location": f"/api/v1/account/api-keys/{key.id}"}


@bp.get("/account/api-keys")
@default_limit
@spec("List API keys (metadata only)", response=ApiKeyListSchema, tag="api keys")
def list_keys():
    return list_schema.dump({"keys": keys.list_keys(account_id())})


@bp.get("/account/api-keys/<key_id>")
@default_limit
@spec("One API key (metadata only, as listed)", response=ApiKeySchema, tag="api keys")
def get_key(key_id):
    return key_schema.dump(keys.get_key(account_id(), key_id))


@bp.delete("/account/api-keys/<key_id>")
@default_limit
@spec("Delete an API key; it fails from its next request on", response=DeletedSchema, tag="api keys",
      errors=(InvalidState,))
def delete_key(key_id):
    keys.delete_key(account_id(), key_id)
    return {"id": key_id, "deleted": True}
