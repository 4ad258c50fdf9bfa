from marshmallow import Schema, ValidationError, fields, validate

from app.common import NAME_RULE, PLAIN_NAME_PATTERN, is_plain_name
from app.schemas.base import BodySchema, Timestamp


class AccountSchema(Schema):
    id = fields.Str()
    name = fields.Str()
    tier = fields.Str()
    subscription_limit = fields.Int(allow_none=True, metadata={"description": "null means unlimited."})
    subscription_count = fields.Int(metadata={"description": "Active and paused subscriptions."})
    trial_ends_at = Timestamp(allow_none=True)
    created_at = Timestamp()


class UsagePeriodSchema(Schema):
    start = fields.Date()
    requests = fields.Int()
    checks = fields.Int()
    provider_calls = fields.Int(metadata={"description": "Lookups made at the data provider for this account's "
                                                         "subscriptions (one per subscription asked, batched or not)."})
    provider_credits = fields.Float(metadata={"description": "The provider's credits spent on them, as the vendor "
                                                             "reports them (a batch call's cost shared evenly)."})
    events_created = fields.Int()
    deliveries_succeeded = fields.Int()
    deliveries_failed = fields.Int()


class UsageSubscriptionsSchema(Schema):
    active = fields.Int()
    paused = fields.Int()
    cancelled = fields.Int()
    live = fields.Int(metadata={"description": "active + paused: what counts toward the cap."})
    limit = fields.Int(allow_none=True)


class ProviderStatusSchema(Schema):
    provider = fields.Str()
    state = fields.Str(metadata={"description": "`active`, or `paused` while checks wait for the provider."})
    reason = fields.Str(allow_none=True, metadata={"description": "`rate_limited` or `quota_exhausted`."})
    paused_at = Timestamp(allow_none=True)
    paused_until = Timestamp(allow_none=True, metadata={"description": "null while paused: until an operator "
                                                                       "resumes it."})
    detail = fields.Str(allow_none=True)
    rate_limit = fields.Str(allow_none=True)
    batch_size = fields.Int()
    concurrency = fields.Int()
    credits_remaining = fields.Float(allow_none=True, metadata={
        "description": "The vendor's credit balance as last reported to this process; null if it does not say."})


class UsageSchema(Schema):
    day = fields.Nested(UsagePeriodSchema, metadata={"description": "The current UTC day."})
    month = fields.Nested(UsagePeriodSchema, metadata={"description": "The current UTC month."})
    subscriptions = fields.Nested(UsageSubscriptionsSchema)
    provider_status = fields.Nested(ProviderStatusSchema, metadata={
        "description": "The data provider: checks delayed by a pause keep their place and are not failures."})


def plain_name(name: str):
    if not is_plain_name(name):
        raise ValidationError(f"name {NAME_RULE}.")


class ApiKeyCreateSchema(BodySchema):
    name = fields.Str(required=True, validate=[validate.Length(1, 100), plain_name],
                      metadata={"json_schema": {"pattern": PLAIN_NAME_PATTERN}})


class ApiKeySchema(Schema):
    id = fields.Str()
    name = fields.Str()
    key_hint = fields.Str(metadata={"description": "The last 4 characters of the key."})
    last_used_at = Timestamp(allow_none=True)
    created_at = Timestamp()


class ApiKeyCreatedSchema(ApiKeySchema):
    key = fields.Str(metadata={"description": "The key itself, shown only in this response."})


class ApiKeyListSchema(Schema):
    keys = fields.List(fields.Nested(ApiKeySchema))
