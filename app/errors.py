"""The errors the service layer raises; the HTTP layer renders them in the one error shape (contract §2)."""


class ServiceError(Exception):
    status = 400
    code = "VALIDATION_ERROR"

    def __init__(self, message, details=None):
        super().__init__(message)
        self.message = message
        self.details = details


class ValidationFailed(ServiceError):
    status, code = 400, "VALIDATION_ERROR"

    def __init__(self, field, message, value=None, errors=None):
        errors = errors or [{"field": field, "message": message}]
        super().__init__(message, {"field": field, "value": value, "errors": errors})
        self.field = field


class Unauthorized(ServiceError):
    status, code = 401, "UNAUTHORIZED"


class TierLimitExceeded(ServiceError):
    status, code = 403, "TIER_LIMIT_EXCEEDED"


class TrialExpired(ServiceError):
    status, code = 403, "TRIAL_EXPIRED"


class KeyLimitExceeded(ServiceError):
    status, code = 403, "KEY_LIMIT_EXCEEDED"


class NotFound(ServiceError):
    status, code = 404, "NOT_FOUND"

    def __init__(self, resource, resource_id):
        super().__init__(f"No {resource} with id '{resource_id}' was found.",
                         {"resource": resource, "id": resource_id})


class DuplicateSubscription(ServiceError):
    status, code = 409, "DUPLICATE_SUBSCRIPTION"


class InvalidState(ServiceError):
    status, code = 409, "INVALID_STATE"
