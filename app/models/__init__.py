"""ORM models, one module per aggregate. Importing this package registers every table."""
from app.models.account import Account, ApiKey, UsageCounter
from app.models.dashboard import DashboardSession
from app.models.event import DeliveryAttempt, DeliveryDayCount, Event, EventDayCount, OutboxDelivery
from app.models.provider import ProviderBudget, ProviderSlot, ProviderState
from app.models.scheduler import SchedulerHeartbeat
from app.models.subscription import Subscription, SubscriptionCount, SubscriptionGramCount
from app.models.webhook import WebhookConfig

__all__ = ["Account", "ApiKey", "UsageCounter", "Subscription", "SubscriptionCount", "SubscriptionGramCount",
           "Event", "EventDayCount", "OutboxDelivery", "DeliveryAttempt", "DeliveryDayCount", "WebhookConfig",
           "SchedulerHeartbeat", "ProviderBudget", "ProviderSlot", "ProviderState", "DashboardSession"]
